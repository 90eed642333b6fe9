"""Web tests: every page, partial and action as Owner, Manager, Developer, outsider and anonymous."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import Role
from clusters.models import Cluster
from clusters.services.create import create_cluster
from tests.factories import MembershipFactory, UserFactory

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def manager(workspace):
    return MembershipFactory(workspace=workspace, role=Role.MANAGER, user=UserFactory(username="meg")).user


@pytest.fixture(params=["owner", "developer"])
def member(request):
    """A user who may create and manage the workspace's clusters."""
    return request.getfixturevalue(request.param)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def member_client(member):
    return client_for(member)


@pytest.fixture
def outsider_client(outsider):
    return client_for(outsider)


@pytest.fixture
def developer_client(developer):
    return client_for(developer)


@pytest.fixture
def cluster(environment, machine_type, owner) -> Cluster:
    # Outside a transactional test on_commit never fires, so the cluster stays provisioning
    # with every node pending: a fixed state for page tests.
    return create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=4, created_by=owner,
    )


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
