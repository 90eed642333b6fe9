"""The `runcrate` CLI as a subprocess, over real HTTP, against the real API on a live server."""

from __future__ import annotations

import json

import pytest

from tests.client.client_support import run_runcrate

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_cli_lists_offers_creates_watches_reads_usage_and_deletes(live_server, dashboard_key, instant_offer):
    def runcrate(*args: str, key: str = dashboard_key):
        return run_runcrate(list(args), base_url=live_server.url, api_key=key)

    offers = runcrate("clusters", "offers", "--gpu", "H100", "--machines", "2", "--json")
    assert offers.returncode == 0, offers.stderr
    [offer] = json.loads(offers.stdout)
    assert offer["id"] == instant_offer.pk and offer["price_per_cluster_hour"] == "5.00"
    table = runcrate("clusters", "offers", "--gpu", "H100", "--machines", "2")
    assert "$5.00/h" in table.stdout and "$2.50/h" in table.stdout

    created = runcrate("clusters", "create", "--name", "e2e", "--offer", str(offer["id"]), "--machines", "2",
                       "--software", "slurm", "-q")
    assert created.returncode == 0, created.stderr
    cluster_id = created.stdout.strip()
    assert cluster_id.isdigit()

    listed = runcrate("clusters", "ls")
    assert listed.returncode == 0 and "e2e" in listed.stdout
    assert runcrate("clusters", "list", "-q").stdout.split() == [cluster_id]

    watched = runcrate("clusters", "watch", cluster_id, "--interval", "0.2", "--timeout", "60")
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "is ready" in watched.stdout

    info = runcrate("clusters", "info", cluster_id)
    assert info.returncode == 0
    for text in ("ready", "node-0", "head", "10.77.0.1", "node-1", "10.77.0.2", "$5.00/h"):
        assert text in info.stdout

    usage = runcrate("billing", "usage")
    assert usage.returncode == 0, usage.stderr
    assert "Cluster usage e2e" in usage.stdout and "accruing" in usage.stdout and "node-1" not in usage.stdout
    rows = runcrate("billing", "usage", "--rows")
    assert rows.returncode == 0, rows.stderr
    assert "Cluster usage e2e" in rows.stdout and "node-1" in rows.stdout
    line = runcrate("billing", "usage-line", "e2e")
    assert line.returncode == 0, line.stderr
    assert "Cluster usage e2e" in line.stdout and "node-0" in line.stdout and "node-1" in line.stdout
    balance = runcrate("billing", "balance", "--json")
    assert json.loads(balance.stdout)["active_usage_cost_per_hour"] == "5.00"

    refused = runcrate("clusters", "terminate-node", cluster_id, "node-1")
    assert refused.returncode == 6 and "node_terminate_refused" in refused.stderr

    deleted = runcrate("clusters", "rm", cluster_id, "--yes")
    assert deleted.returncode == 0, deleted.stderr
    after = json.loads(runcrate("clusters", "info", cluster_id, "--json").stdout)
    assert after["status"] == "terminated" and after["termination_reason"] == "user_requested"
    assert runcrate("clusters", "watch", cluster_id, "--interval", "0.2").returncode == 7


def test_the_cli_exits_non_zero_with_a_clear_message_for_api_errors(live_server, dashboard_key, instant_offer,
                                                                      workspace):
    def runcrate(*args: str, key: str = dashboard_key):
        return run_runcrate(list(args), base_url=live_server.url, api_key=key)

    missing = runcrate("clusters", "info", "999999")
    assert missing.returncode == 5 and "not_found" in missing.stderr

    bad_name = runcrate("clusters", "create", "--name", "Bad Name", "--offer", str(instant_offer.pk), "--machines", "2")
    assert bad_name.returncode == 2 and "invalid_name" in bad_name.stderr

    workspace.credit_balance = 0
    workspace.save(update_fields=["credit_balance"])
    broke = runcrate("clusters", "create", "--name", "broke", "--offer", str(instant_offer.pk), "--machines", "2")
    assert broke.returncode == 4
    assert "required $10.00, available $0.00" in broke.stderr

    unknown = runcrate("clusters", "ls", key="rc_live_not_a_real_key")
    assert unknown.returncode == 3 and "401" in unknown.stderr

    from api.models import ApiKey

    ApiKey.objects.update(is_active=False)
    deactivated = runcrate("clusters", "ls")
    assert deactivated.returncode == 3 and "deactivated" in deactivated.stderr


def test_the_cli_manages_volumes(live_server, dashboard_key, settings, tmp_path):
    settings.VOLUMES_DIR = str(tmp_path / "volumes")

    def runcrate(*args: str):
        return run_runcrate(list(args), base_url=live_server.url, api_key=dashboard_key)

    created = runcrate("volumes", "create", "corpus", "--size-gb", "50")
    assert created.returncode == 0, created.stderr
    assert "Created volume corpus" in created.stdout
    [volume] = json.loads(runcrate("volumes", "list", "--json").stdout)
    assert volume["name"] == "corpus" and volume["size_gb"] == 50
    assert "corpus" in runcrate("volumes", "list").stdout
    bad = runcrate("volumes", "create", "Bad Name", "--size-gb", "5")
    assert bad.returncode == 2 and "name" in (bad.stdout + bad.stderr).lower()
    assert runcrate("volumes", "delete", str(volume["id"]), "--yes").returncode == 0
    assert runcrate("volumes", "list", "-q").stdout.strip() == ""
