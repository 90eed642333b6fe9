"""The `runcrate` CLI against a real local HTTP server: output, --json, -q and exit codes."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from fake_api import VALID_KEY, FakeApi

from runcrate_client.api import ApiError, ConfigError, TransportError
from runcrate_client.cli import exit_code_for


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ApiError(400, "invalid", "Invalid input."), 2),
        (ApiError(401, "unauthenticated", "No."), 3),
        (ApiError(403, "forbidden", "No."), 3),
        (ApiError(402, "insufficient_credits", "Top up."), 4),
        (ApiError(404, "not_found", "Gone."), 5),
        (ApiError(409, "offer_unavailable", "Taken."), 6),
        (ApiError(429, "rate_limited", "Slow down."), 1),
        (ApiError(500, "server_error", "Oops."), 1),
        (ConfigError("no key"), 3),
        (TransportError("down"), 1),
    ],
)
def test_each_kind_of_error_has_its_exit_code(error: Exception, code: int) -> None:
    assert exit_code_for(error) == code


def create(cli, name: str = "train", offer: str = "off_h100_vm", machines: str = "4", *extra: str) -> str:
    result = cli("clusters", "create", "--name", name, "--offer", offer, "--machines", machines, "-q", *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_offers_show_cluster_and_machine_prices(cli) -> None:
    result = cli("clusters", "offers", "--gpu", "H100", "--machines", "4")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].split()[:3] == ["ID", "GPU", "GPUS/MACHINE"]
    assert "$78.40/h" in result.stdout and "$19.60/h" in result.stdout
    assert "community" not in result.stdout


def test_community_offers_only_when_asked_and_with_a_warning(cli) -> None:
    result = cli("clusters", "offers", "--gpu", "H100", "--machines", "4", "--include-community")
    assert "off_h100_comm" in result.stdout
    assert "Keep secrets off them" in result.stdout


def test_offers_json_and_quiet(cli) -> None:
    data = json.loads(cli("clusters", "offers", "--gpu", "H100", "--json").stdout)
    assert [o["id"] for o in data] == ["off_h100_ct", "off_h100_vm"]
    assert cli("clusters", "offers", "--gpu", "H100", "-q").stdout.split() == ["off_h100_ct", "off_h100_vm"]


def test_create_then_list_info_and_events(cli, fake_api: FakeApi) -> None:
    cluster_id = create(cli, "train", "off_h100_vm", "4", "--software", "Slurm", "--ssh-key", "k1")
    body = json.loads(fake_api.state.requests[-1]["body"])
    assert body["software"] == "slurm" and body["ssh_key_ids"] == ["k1"]
    assert fake_api.state.requests[-1]["headers"]["Idempotency-Key"]  # always sent

    listing = cli("clusters", "ls")
    assert cluster_id in listing.stdout and "$78.40/h" in listing.stdout
    assert cli("clusters", "list", "-q").stdout.split() == [cluster_id]

    info = cli("clusters", "info", cluster_id)  # first read: machines still booting, no address yet
    assert "node-3  worker  booting" in info.stdout
    info = cli("clusters", "info", cluster_id)
    assert "node-0  head    joined  10.77.0.1" in info.stdout
    assert json.loads(cli("clusters", "info", cluster_id, "--json").stdout)["id"] == cluster_id
    assert "Reserved 4 machines." in cli("clusters", "events", cluster_id).stdout


def test_watch_follows_every_node_to_ready_and_exits_0(cli) -> None:
    cluster_id = create(cli)
    result = cli("clusters", "watch", cluster_id, "--interval", "0")
    assert result.returncode == 0, result.stdout
    assert "installing -> ready 10.77.0.4" in result.stdout  # node-3's own progress
    assert "is ready (4/4 nodes ready)" in result.stdout


@pytest.mark.parametrize(("name", "status"), [("will-fail", "failed"), ("will-degrade", "degraded")])
def test_watch_exits_7_when_the_cluster_fails_or_degrades(cli, name: str, status: str) -> None:
    cluster_id = create(cli, name, "off_h100_vm", "2", "--software", "slurm")
    result = cli("clusters", "watch", cluster_id, "--interval", "0")
    assert result.returncode == 7
    assert f"is {status}" in result.stdout


def test_402_says_required_and_available_and_exits_4(cli, fake_api: FakeApi) -> None:
    fake_api.state.balance = Decimal("20.00")
    result = cli("clusters", "create", "--name", "big", "--offer", "off_h100_vm", "--machines", "4")
    assert result.returncode == 4
    assert result.stderr.strip() == (
        "Error (402 insufficient_credits): Your balance does not cover one hour of this cluster. "
        "(required $78.40, available $20.00)"
    )


def test_400_exits_2_and_names_the_field(cli) -> None:
    result = cli("clusters", "create", "--name", "x", "--offer", "nope", "--machines", "2")
    assert result.returncode == 2
    assert "offer_id: Unknown offer." in result.stderr


def test_409_offer_unavailable_exits_6(cli) -> None:
    result = cli("clusters", "create", "--name", "x", "--offer", "off_h100_ct", "--machines", "8")
    assert result.returncode == 6
    assert "offer_unavailable" in result.stderr


def test_unknown_cluster_exits_5(cli) -> None:
    result = cli("clusters", "info", "cl_missing")
    assert result.returncode == 5
    assert result.stderr.startswith("Error (404 not_found)")


def test_a_bad_key_exits_3_and_no_key_too(cli) -> None:
    assert cli("clusters", "ls", api_key="rc_live_nope").returncode == 3
    result = cli("clusters", "ls", api_key=None)
    assert result.returncode == 3
    assert "RUNCRATE_API_KEY" in result.stderr


def test_an_unreachable_api_exits_1_with_one_line(cli) -> None:
    result = cli("gpu-types", base_url="http://127.0.0.1:9")
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "cannot reach the Runcrate API at http://127.0.0.1:9" in result.stderr


def test_terminating_one_node_shows_the_refusal(cli) -> None:
    cluster_id = create(cli)
    result = cli("clusters", "terminate-node", cluster_id, "node-1")
    assert result.returncode == 6
    assert "cannot be terminated on its own" in result.stderr


def test_delete_asks_first(cli, fake_api: FakeApi) -> None:
    cluster_id = create(cli)
    refused = cli("clusters", "rm", cluster_id)  # stdin is not a terminal here
    assert refused.returncode == 2
    assert fake_api.state.clusters[cluster_id]["status"] != "terminating"
    done = cli("clusters", "rm", cluster_id, "--yes")
    assert done.returncode == 0
    assert fake_api.state.clusters[cluster_id]["status"] == "terminating"


def test_retry_install_and_add_worker(cli, fake_api: FakeApi) -> None:
    cluster_id = create(cli, "will-degrade", "off_h100_vm", "2", "--software", "slurm")
    cli("clusters", "watch", cluster_id, "--interval", "0")
    assert cli("clusters", "retry-install", cluster_id).returncode == 0
    assert cli("clusters", "add-worker", cluster_id, "--count", "2").returncode == 0
    assert json.loads(fake_api.state.requests[-1]["body"]) == {"count": 2}


def test_billing_balance_and_usage(cli) -> None:
    cluster_id = create(cli)
    cli("clusters", "watch", cluster_id, "--interval", "0")
    balance = cli("billing", "balance")
    assert "Credits:" in balance.stdout and "$500.00" in balance.stdout and "$78.40/h" in balance.stdout
    usage = cli("billing", "usage", "--month", "2025-06")
    lines = usage.stdout.splitlines()
    assert lines[1].startswith("Cluster usage train")
    assert sum(1 for line in lines if line.startswith("    node-")) == 4
    assert cli("billing", "usage", "--month", "June").returncode == 2


def test_quote(cli, fake_api: FakeApi) -> None:
    result = cli("quote", "--contact-name", "Ada", "--email", "ada@example.com", "--gpu", "H100",
                 "--machines", "128", "--network", "infiniband", "--term-months", "12")
    assert result.returncode == 0, result.stderr
    assert json.loads(fake_api.state.requests[-1]["body"]) == {
        "contact_name": "Ada", "email": "ada@example.com", "gpu": "H100", "machines": 128,
        "network": "infiniband", "term_months": 12,
    }


def test_environment_header_comes_from_the_environment_variable(cli, fake_api: FakeApi) -> None:
    assert cli("clusters", "ls", environment="staging").returncode == 0
    assert fake_api.state.requests[-1]["headers"]["X-Environment"] == "staging"
    assert cli("clusters", "ls", environment="nowhere").returncode == 5


def test_the_installed_entry_point_runs_as_a_subprocess(fake_api: FakeApi, run_runcrate) -> None:
    result = run_runcrate(["clusters", "offers", "--gpu", "H100", "--machines", "2", "--json"],
                          base_url=fake_api.url, api_key=VALID_KEY)
    assert result.returncode == 0, result.stderr
    assert {o["id"] for o in json.loads(result.stdout)} == {"off_h100_vm", "off_h100_ct"}
    result = run_runcrate(["clusters", "info", "cl_missing"], base_url=fake_api.url, api_key=VALID_KEY)
    assert result.returncode == 5
