from __future__ import annotations

import os
import shutil

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

from accounts.models import Role
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts


def pytest_collection_modifyitems(config, items):
    # Resolved lazily: the database engine is known once Django's settings are loaded.
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL); SQLite has no row locks to race")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(request, django_db_modify_db_settings_parallel_suffix):
    """Test databases of one run, named so that parallel runs never meet.

    PostgreSQL: suffixed with the process id, so runs sharing a server (several engineers,
    CI jobs) never drop each other's database. SQLite: a file instead of memory when a
    browser test is selected, because its web server and worker run in other processes.
    """
    from django.conf import settings

    db = settings.DATABASES["default"]
    test = db.setdefault("TEST", {})
    if db["ENGINE"].endswith("postgresql"):
        test["NAME"] = f"{test.get('NAME') or 'test_' + db['NAME']}_{os.getpid()}"
    elif any("browser" in item.keywords for item in request.session.items):
        # Named db.sqlite3 in a directory of its own: a server started with
        # RUNCRATE_VAR_DIR=<that directory> opens it with the project's SQLite options.
        directory = settings.VAR_DIR / f"test-{os.getpid()}"
        directory.mkdir(parents=True, exist_ok=True)
        test["NAME"] = str(directory / "db.sqlite3")
        # Runs after django_db_setup's teardown has dropped the database itself.
        request.addfinalizer(lambda: shutil.rmtree(directory, ignore_errors=True))


@pytest.fixture(autouse=True)
def _fresh_rendered_rows():
    """Each test starts without the rows another test's pushes rendered: they are kept per
    process by row id, and SQLite gives a rolled-back test's ids out again."""
    from clusters import live

    live._RENDERED.clear()


@pytest.fixture
async def socket_thread_connections():
    """Give back the database connection of the thread consumers query in, after the test.

    channels' test communicators turn database_sync_to_async's clean-up off while they send
    and receive (channels.testing.application patches close_old_connections to a no-op), so
    what a consumer read leaves asgiref's sync thread holding a connection checked out of the
    pool, and the test database cannot be dropped while it is open. The clean-up runs in that
    same thread (thread-sensitive sync_to_async)."""
    yield
    await sync_to_async(connections.close_all)()


@pytest.fixture
def workspace(db):
    return WorkspaceFactory()


@pytest.fixture
def environment(workspace):
    return workspace.default_environment


@pytest.fixture
def owner(workspace):
    return MembershipFactory(workspace=workspace, role=Role.OWNER, user=UserFactory(username="alice")).user


@pytest.fixture
def developer(workspace):
    return MembershipFactory(workspace=workspace, role=Role.DEVELOPER, user=UserFactory(username="dave")).user


@pytest.fixture
def outsider(db):
    return MembershipFactory(user=UserFactory(username="mallory")).user


@pytest.fixture
def machine_type(db):
    return machine_type_with_hosts(6)


@pytest.fixture
def owner_client(client, owner):
    client.force_login(owner)
    return client


def is_postgres() -> bool:
    return connection.vendor == "postgresql"
