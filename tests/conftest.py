from __future__ import annotations

import os
import shutil

import pytest
from django.db import connection

from accounts.models import Role
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts

# Tests that point this process's Celery app at a private Redis and stop it mid-run leave
# the app's broker pools behind them; they run last so no test after them inherits those.
RUN_LAST = ("tests/live/test_redis_outage.py", "tests/live/test_worker_crash.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: next((i + 1 for i, path in enumerate(RUN_LAST) if item.nodeid.startswith(path)), 0))
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
