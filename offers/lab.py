"""Lab-only behaviour of the simulated and local inventories' machines: boot, join and install
delays and an injected fault per machine (offers.models.InjectedFault), for tests and demos.

A machine without a row behaves as a healthy one with no delay. Providers read a list of
machines' rows in one query (`load`), then each machine's (`of`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Manager, QuerySet

from offers.models import Host, InjectedFault

_CACHE = "_injected_fault"
FIELDS = ("boot_seconds", "join_seconds", "install_seconds", "fault")


def load(hosts: Iterable[Host], *, fresh: bool = False) -> None:
    """Read the injected behaviour of these machines in one query, kept on each instance
    (`fresh`: read again, for what it is now)."""
    missing = [host for host in hosts if fresh or _CACHE not in host.__dict__]
    if not missing:
        return
    found = {row.host_id: row for row in InjectedFault.objects.filter(host_id__in=[host.pk for host in missing])}
    for host in missing:
        host.__dict__[_CACHE] = found.get(host.pk) or InjectedFault(host_id=host.pk)


def of(host: Host) -> InjectedFault:
    """The machine's injected delays and fault (none: a healthy machine with no delay)."""
    load([host])
    return host.__dict__[_CACHE]


def inject(hosts: QuerySet[Host] | Manager[Host] | Iterable[Host] | Host, **values: Any) -> int:
    """Set delays or a fault on machines (`fault=HostFault.BOOT_FAILS`, `boot_seconds=40`…);
    `fault=HostFault.NONE` clears a fault. Returns how many machines."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise TypeError(f"no injected behaviour named {', '.join(sorted(unknown))}")
    if isinstance(hosts, Host):
        ids = [hosts.pk]
    elif isinstance(hosts, (QuerySet, Manager)):
        ids = list(hosts.values_list("pk", flat=True))
    else:
        ids = [host.pk for host in hosts]
    existing = set(InjectedFault.objects.filter(host_id__in=ids).values_list("host_id", flat=True))
    if existing:
        InjectedFault.objects.filter(host_id__in=existing).update(**values)
    InjectedFault.objects.bulk_create([InjectedFault(host_id=pk, **values) for pk in ids if pk not in existing])
    return len(ids)
