from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from accounts.models import Role
from api.keys import create_api_key
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory


class ApiClient:
    """Django's test client speaking to /api/v1 with a bearer key; returns (status, body)."""

    def __init__(self, key: str | None, environment: str | None = None) -> None:
        self.client = Client()
        self.key = key
        self.environment = environment

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {}
        if self.key is not None:
            headers["Authorization"] = f"Bearer {self.key}"
        if self.environment is not None:
            headers["X-Environment"] = self.environment
        return {**headers, **(extra or {})}

    def call(self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None,
             params: dict | None = None):
        kwargs: dict[str, Any] = {"headers": self.headers(headers)}
        if body is not None:
            kwargs.update(data=json.dumps(body), content_type="application/json")
        url = "/api/v1" + path
        if params:
            kwargs["QUERY_STRING"] = "&".join(f"{k}={v}" for k, v in params.items())
        response = getattr(self.client, method.lower())(url, **kwargs)
        self.last = response
        return response.status_code, response.json()

    def get(self, path: str, **params):
        return self.call("GET", path, params=params or None)

    def post(self, path: str, body: Any = None, **kwargs):
        return self.call("POST", path, body, **kwargs)

    def delete(self, path: str):
        return self.call("DELETE", path)


@pytest.fixture
def owner_key(owner, workspace) -> str:
    return create_api_key(workspace=workspace, created_by=owner, name="owner key")[1]


@pytest.fixture
def developer_key(developer, workspace) -> str:
    return create_api_key(workspace=workspace, created_by=developer, name="developer key")[1]


@pytest.fixture
def api(owner_key) -> ApiClient:
    return ApiClient(owner_key)


@pytest.fixture
def dev_api(developer_key) -> ApiClient:
    return ApiClient(developer_key)


@pytest.fixture
def outsider_api(db) -> ApiClient:
    """A key of another workspace (with its own balance and offers visible as everyone's)."""
    other = WorkspaceFactory(name="Elsewhere")
    user = MembershipFactory(workspace=other, role=Role.OWNER, user=UserFactory(username="olga")).user
    return ApiClient(create_api_key(workspace=other, created_by=user, name="other")[1])


def error_of(body: dict) -> dict:
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]


def make_cluster(environment, machine_type, name: str = "train", machines: int = 2, software: str = "none"):
    from clusters.services.create import create_cluster

    return create_cluster(
        environment=environment, name=name, machine_type=machine_type, machine_count=machines, software=software,
    )


def drive(cluster) -> None:
    """Run the reconciler until the cluster rests (the simulated hosts have no delays)."""
    from clusters import lifecycle

    for _ in range(5):
        if not lifecycle.advance(cluster.pk):
            break
    cluster.refresh_from_db()


@pytest.fixture(autouse=True)
def fresh_rate_limits():
    """Rate-limit counters live in the cache: each test starts with none (the quote limit is per
    address, and every test client is 127.0.0.1)."""
    from django.core.cache import cache

    cache.clear()
