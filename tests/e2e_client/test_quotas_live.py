"""Quotas from the CLI and an agent against the live API: set, listed, shown by `--dry-run` and
plan_cluster before anything is reserved, and a create past one refused."""

from __future__ import annotations

import json

import pytest
from mcp import Client

from accounts.models import Membership, Quota
from clusters.models import Cluster
from tests.e2e_client.test_mcp_live import call, stdio

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_cli_sets_lists_and_removes_a_quota_and_dry_run_shows_it(cli, instant_offer, developer):
    member = Membership.objects.get(user=developer)
    set_member = cli("quotas", "set", "--member", str(member.pk), "--max-gpus", "24", "--monthly-spend", "300")
    assert set_member.returncode == 0, set_member.stderr
    assert "of dave in every environment set" in set_member.stdout
    everyone = cli("quotas", "set", "--environment", "default", "--max-gpus", "8", "--json")
    assert json.loads(everyone.stdout)["applies_to"] == "everyone together"
    listed = cli("quotas")
    assert "dave" in listed.stdout and "everyone together" in listed.stdout and "$300.00" in listed.stdout
    dry = cli("clusters", "create", "--name", "dry", "--offer", str(instant_offer.pk), "--machines", "2", "--dry-run")
    assert dry.returncode == 3, dry.stdout
    assert "0 of 8 GPUs running, 16 after create" in dry.stdout and "Refused (quota_gpus)" in dry.stdout
    refused = cli("clusters", "create", "--name", "real", "--offer", str(instant_offer.pk), "--machines", "2")
    assert refused.returncode == 3 and "8 GPUs running at once" in refused.stderr
    assert not Cluster.objects.exists()
    removed = cli("quotas", "delete", str(Quota.objects.get(environment__isnull=False).pk))
    assert removed.returncode == 0 and "everyone together" in removed.stdout
    assert cli("clusters", "create", "--name", "real", "--offer", str(instant_offer.pk), "--machines", "2").returncode == 0


async def test_an_agent_sets_a_quota_and_its_plan_is_refused_past_it(live_server, dashboard_key, instant_offer):
    async with Client(stdio(live_server, dashboard_key)) as client:
        quota = (await call(client, "set_quota", max_gpus=8))["quota"]
        assert quota["applies_to"] == "everyone together" and quota["max_gpus"] == 8
        assert [q["id"] for q in (await call(client, "list_quotas"))["quotas"]] == [quota["id"]]
        plan = await call(client, "plan_cluster", offer_id=str(instant_offer.pk), machines=2, name="agent")
        assert plan["can_create"] is False and "confirmation_token" not in plan
        assert plan["plan"]["quotas"][0]["gpus_after_create"] == 16
        assert any(p.startswith("quota_gpus:") for p in plan["problems"])
        await call(client, "delete_quota", quota_id=quota["id"])
        assert (await call(client, "list_quotas"))["quotas"] == []
