"""Webhooks from the CLI and the MCP server, over real HTTP, to a receiver on loopback."""

from __future__ import annotations

import sys

import pytest
from mcp import Client, StdioServerParameters

from tests.client.client_support import REPO_ROOT, runcrate_env
from tests.e2e_client.test_mcp_live import call
from tests.webhooks.conftest import receiver  # noqa: F401  (the fixture)
from webhooks import signing
from webhooks.models import Endpoint

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_cli_adds_an_endpoint_test_sends_reads_the_log_and_resends(cli, receiver):
    added = cli("webhooks", "add", receiver.url, "--event", "cluster.ready", "--event", "cluster.terminated")
    assert added.returncode == 0, added.stderr
    endpoint = Endpoint.objects.get()
    assert f"Signing secret: {endpoint.secret}" in added.stdout
    assert cli("webhooks", "test", str(endpoint.pk)).returncode == 0
    [request] = receiver.requests
    assert request.json["type"] == "webhook.test"
    assert signing.verify(endpoint.secret, request.headers["Runcrate-Signature"], request.body)
    log = cli("webhooks", "deliveries", str(endpoint.pk))
    assert "webhook.test" in log.stdout and "succeeded" in log.stdout
    # A loopback receiver: the answer's class only, no status code or time (docs/webhooks.md).
    assert " 2xx " in log.stdout and " ms" not in log.stdout
    delivery_id = endpoint.deliveries.get().pk
    assert cli("webhooks", "resend", str(endpoint.pk), str(delivery_id)).returncode == 0
    assert len(receiver.requests) == 2 and receiver.requests[1].json["id"] == request.json["id"]
    refused = cli("webhooks", "add", "http://10.0.0.9/hook", "--event", "cluster.ready")
    assert refused.returncode != 0 and "private or reserved range" in refused.stderr


async def test_an_agent_adds_and_tests_an_endpoint(live_server, dashboard_key, receiver):
    server = StdioServerParameters(command=sys.executable, args=["-m", "runcrate_client.mcp_server"],
                                   env=runcrate_env(live_server.url, dashboard_key), cwd=REPO_ROOT)
    async with Client(server) as client:
        added = await call(client, "add_webhook", url=receiver.url, events=["cluster.failed"])
        endpoint_id = str(added["webhook"]["id"])
        assert added["webhook"]["secret"].startswith("whsec_")
        assert [w["url"] for w in (await call(client, "list_webhooks"))["webhooks"]] == [receiver.url]
        await call(client, "test_webhook", endpoint_id=endpoint_id)
        [delivery] = (await call(client, "webhook_deliveries", endpoint_id=endpoint_id))["deliveries"]
        assert delivery["status"] == "succeeded"
        # A loopback receiver: only the answer's class is shown (docs/webhooks.md).
        assert delivery["last_to_loopback"] and delivery["last_error"] == "2xx" and delivery["last_status_code"] is None
        again = await call(client, "resend_webhook_delivery", endpoint_id=endpoint_id, delivery_id=str(delivery["id"]))
        assert again["delivery"]["event_id"] == delivery["event_id"]
    assert len(receiver.requests) == 2
