from __future__ import annotations

import pytest
from django.db import connection

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
