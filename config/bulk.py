"""Write the same columns of many rows in one statement, without Django's per-row CASE.

`QuerySet.bulk_update` builds `CASE WHEN id = 1 THEN … WHEN id = 2 THEN …` for every column,
one `When` expression per row and column, each resolved and compiled in Python: at 64 nodes
and three columns that was 5–10 ms of the control plane's CPU per write, and a join writes
its nodes' output and progress dozens of times (issue 22). On PostgreSQL the rows' values
travel as one array per column instead (`UPDATE … FROM (SELECT unnest(…), …)`); elsewhere
(SQLite, `make run`) this is `bulk_update`. Node progress and metering's watermarks use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from django.db import connection, models


def lock_rows(model: type[models.Model], ids: Sequence[int]) -> None:
    """Lock `ids` of `model`'s table in primary-key order (the lock order in
    docs/architecture.md), PostgreSQL only: one statement, no row read back."""
    table = connection.ops.quote_name(model._meta.db_table)
    key = connection.ops.quote_name(str(model._meta.pk.column))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table} WHERE {key} = ANY(%s) ORDER BY {key} FOR UPDATE", [list(ids)])


def update_rows(model: type[models.Model], objs: Sequence[models.Model], fields: Sequence[str], *, locked: bool = False) -> None:
    """Save `fields` of `objs` (model instances with a primary key) in one UPDATE.

    The rows are locked first in primary-key order (the lock order in docs/architecture.md):
    a join's UPDATE visits rows in whatever order its plan picks. `locked`: the caller's
    transaction holds them already (select_for_update … order_by("pk")).
    """
    if not objs:
        return
    if connection.vendor != "postgresql":
        model._default_manager.bulk_update(objs, list(fields))
        return
    meta = model._meta
    pk = meta.pk
    columns = [cast(models.Field, meta.get_field(name)) for name in fields]
    arrays = [[pk.get_db_prep_value(obj.pk, connection) for obj in objs]]
    arrays += [[field.get_db_prep_save(getattr(obj, field.attname), connection) for obj in objs] for field in columns]
    selects = ", ".join(
        f"unnest(%s::{field.cast_db_type(connection)}[]) AS {connection.ops.quote_name(str(field.column))}"
        for field in [pk, *columns]
    )
    sets = ", ".join(f"{connection.ops.quote_name(str(f.column))} = v.{connection.ops.quote_name(str(f.column))}" for f in columns)
    table, key = connection.ops.quote_name(meta.db_table), connection.ops.quote_name(str(pk.column))
    if not locked:
        lock_rows(model, arrays[0])
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} AS t SET {sets} FROM (SELECT {selects}) AS v WHERE t.{key} = v.{key}", arrays)
