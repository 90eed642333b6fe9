"""PostgreSQL connections per process are bounded by a pool; past it, 503 with Retry-After."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.db.backends.postgresql.base import DatabaseWrapper
from django.test import Client

from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def postgres() -> DatabaseWrapper:
    """This thread's default connection, as the PostgreSQL wrapper that owns the pool."""
    wrapper = connections["default"]
    assert isinstance(wrapper, DatabaseWrapper)
    return wrapper


def test_connections_come_from_a_pool_sized_by_the_settings():
    pool = settings.DATABASES["default"]["OPTIONS"]["pool"]
    assert pool["max_size"] == settings.DB_POOL_SIZE
    assert postgres().pool is not None


@pytest.fixture
def tiny_pool():
    """This process's pool made two connections wide and quick to give up."""
    options = connection.settings_dict["OPTIONS"]["pool"]
    saved = dict(options)
    connection.close()
    postgres().close_pool()
    options.update(max_size=2, min_size=1, timeout=0.5)
    yield
    connection.close()
    postgres().close_pool()
    options.clear()
    options.update(saved)


class Busy:
    """Threads that each hold one pooled connection inside a transaction until told to stop."""

    def __init__(self, count: int) -> None:
        self.holding = threading.Barrier(count + 1)
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._hold) for _ in range(count)]

    def _hold(self) -> None:
        try:
            with transaction.atomic():
                connections["default"].cursor().execute("SELECT 1")
                self.holding.wait(10)
                self.done.wait(10)
        finally:
            connections["default"].close()

    def __enter__(self) -> Busy:
        for thread in self.threads:
            thread.start()
        self.holding.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join()


def signed_in_client() -> Client:
    workspace = WorkspaceFactory()
    user = UserFactory(username="pooled")
    MembershipFactory(workspace=workspace, user=user)
    client = Client(raise_request_exception=False)
    client.force_login(user)
    connection.close()  # give this thread's connection back before the pool fills
    return client


def test_a_page_answers_503_with_retry_after_while_every_connection_is_busy(tiny_pool):
    client = signed_in_client()
    with Busy(2):
        response = client.get("/clusters/")
    assert response.status_code == 503
    assert int(response["Retry-After"]) > 0
    connection.close()
    assert client.get("/clusters/").status_code == 200


def test_the_api_answers_503_in_its_envelope_while_every_connection_is_busy(tiny_pool):
    from api.keys import create_api_key

    membership = MembershipFactory(workspace=WorkspaceFactory(), user=UserFactory(username="pooled-api"))
    _, raw = create_api_key(workspace=membership.workspace, created_by=membership.user, name="ci")
    client = Client(raise_request_exception=False)
    connection.close()
    with Busy(2):
        response = client.get("/api/v1/clusters", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "busy"
    assert int(response["Retry-After"]) > 0
