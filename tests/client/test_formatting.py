from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from runcrate_client.cli.billing import lines_table, usage_table
from runcrate_client.cli.clusters import offers_table
from runcrate_client.formatting import format_money, format_time, render_table


def test_money_is_dollars_and_cents() -> None:
    assert format_money("19.6") == "$19.60"
    assert format_money("1234.005") == "$1,234.01"
    assert format_money("-3.5") == "-$3.50"
    assert format_money(None) == "-"
    assert format_money("n/a") == "n/a"


@given(st.decimals(min_value=-10**9, max_value=10**9, places=4, allow_nan=False, allow_infinity=False))
def test_money_always_has_two_decimals(value) -> None:
    shown = format_money(str(value))
    assert shown.lstrip("-").startswith("$")
    assert len(shown.rsplit(".", 1)[1]) == 2


def test_times_are_shown_without_the_utc_suffix() -> None:
    assert format_time("2025-06-01T10:00:03Z") == "2025-06-01 10:00:03"
    assert format_time("2025-06-01T10:00:03+02:00") == "2025-06-01 10:00:03 +0200"
    assert format_time(None) == "-"


def test_tables_align_columns_and_right_align_numbers() -> None:
    text = render_table(["NAME", "PRICE"], [["a", "$1.00"], ["longer", "$100.00"]], right={1})
    assert text.splitlines() == [
        "NAME      PRICE",
        "a         $1.00",
        "longer  $100.00",
    ]


def test_community_offers_are_marked() -> None:
    offers = [
        {"id": "o1", "gpu": "H100", "community": False, "price_per_cluster_hour": "40", "price_per_machine_hour": "10"},
        {"id": "o2", "gpu": "H100", "community": True, "price_per_cluster_hour": "20", "price_per_machine_hour": "5"},
    ]
    lines = offers_table(offers).splitlines()
    assert "community" not in lines[1]
    assert lines[2].endswith("! community")
    assert "$40.00/h" in lines[1] and "$10.00/h" in lines[1]


def test_usage_is_a_line_per_cluster_with_its_machines_indented_under_it() -> None:
    items = [{
        "cluster_id": "c1", "description": "Cluster usage train", "amount": "6.00",
        "rows": [
            {"node": "node-0", "gpu": "H100", "start": "2025-06-01T10:00:00Z", "end": "2025-06-01T11:00:00Z",
             "hours": "1", "rate": "3", "amount": "3.00"},
            {"node": "node-1", "gpu": "H100", "start": "2025-06-01T10:00:00Z", "end": None,
             "hours": "1", "rate": "3", "amount": "3.00"},
        ],
    }]
    lines = usage_table(items, "6.00").splitlines()
    assert lines[1].startswith("Cluster usage train") and lines[1].endswith("$6.00")
    assert lines[2].startswith("    node-0") and lines[2].endswith("$3.00")
    assert "running" in lines[3]
    assert lines[-1].startswith("Total") and lines[-1].endswith("$6.00")


def test_usage_lines_without_rows_show_machines_status_and_amount() -> None:
    items = [
        {"cluster_id": 7, "description": "Cluster usage train", "amount": "6.00", "machines": 2, "accruing": True, "rows": None},
        {"cluster_id": 9, "description": "Cluster usage eval", "amount": "1.50", "machines": 4, "accruing": False, "rows": None},
    ]
    # The total is the server's (meta.total_amount, which Billing shows too), not a sum made here.
    lines = lines_table(items, "7.51").splitlines()
    assert lines[0].split() == ["DESCRIPTION", "CLUSTER", "MACHINES", "STATUS", "AMOUNT"]
    assert lines[1].startswith("Cluster usage train") and "accruing" in lines[1] and lines[1].endswith("$6.00")
    assert "completed" in lines[2] and lines[2].split()[-3] == "4"
    assert lines[-1].startswith("Total") and lines[-1].endswith("$7.51")


def test_a_field_error_is_said_once_in_the_apis_words() -> None:
    from runcrate_client.api import ApiError

    same = ApiError(400, "invalid_name", "Use lowercase letters.", {"name": ["Use lowercase letters."]})
    assert str(same) == "Use lowercase letters."
    generic = ApiError(400, "invalid", "Some fields are not valid.",
                       {"machines": ["Must be a whole number."], "ssh_key_ids": ["Must be a list."]})
    assert str(generic) == "machines: Must be a whole number. ssh_key_ids: Must be a list."
    fragments = ApiError(400, "invalid", "Some fields are not valid.", {"name": ["too long", "not lowercase"]})
    assert str(fragments) == "name: too long; not lowercase"
    whole = ApiError(400, "invalid", "This invitation was already accepted or revoked.",
                     {"__all__": ["This invitation was already accepted or revoked."]})
    assert str(whole) == "This invitation was already accepted or revoked."


def test_top_shows_a_dash_not_0_percent_for_a_node_before_its_first_figures():
    from runcrate_client.cli.top import latest, render

    rows = latest({"nodes": [
        {"node": "node-0", "points": [{"cpu_percent": None, "memory_percent": 0.0, "root_percent": 0.0,
                                       "shared_percent": 0.0, "net_rx_bps": None, "load1": 0.0}]},
        {"node": "node-1", "points": []},
    ]})
    text = render("train", rows)
    assert text.splitlines()[0] == "train: no figures yet (they arrive every 10 s once the cluster is ready)"
    assert "0%" not in text and "0.00" not in text
    for node in ("node-0", "node-1"):
        [line] = [line for line in text.splitlines() if line.startswith(node)]
        assert line.split()[1:] == ["—"] * 7, line


def test_top_says_every_node_is_idle_instead_of_naming_an_idle_node_busiest():
    from runcrate_client.cli.top import render

    idle = [{"node": f"node-{i}", "cpu_percent": 0.5} for i in (2, 0, 1)]
    assert render("train", idle).splitlines()[0] == "train: every node idle"
    busy = [{"node": "node-1", "cpu_percent": 80.0}, {"node": "node-2", "cpu_percent": 1.0},
            {"node": "node-0", "cpu_percent": 2.0}]
    assert render("train", busy).splitlines()[0] == "train: busiest node-1; idle node-0, node-2"
