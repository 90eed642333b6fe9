"""health.sh's markers and the per-node verdicts, from output captured on real nodes (a
3-node Slurm cluster of clusters.providers.local.realnodes: all well, then wireguard-go killed on
node-1 and slurmd on node-2) and from sinfo/kubectl/ray output in their real formats."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from clusters.node_health.parsers import (
    HealthReport,
    judge_health,
    parse_health_report,
    slurm_state_works,
)
from tests.nodeops.test_nodeops_parsers import RAY_STATUS

DATA = Path(__file__).parent / "data"


def captured(tag: str) -> dict[str, HealthReport | str]:
    return {f"node-{i}": parse_health_report((DATA / f"health-{tag}-node-{i}.txt").read_text()) for i in range(3)}


def test_the_markers_of_a_healthy_head_are_read_in_full():
    report = parse_health_report((DATA / "health-ok-node-0.txt").read_text())
    assert report.wg_up is True and report.wg_daemon == "running"
    assert report.peers == {"node-1": True, "node-2": True}
    assert report.handshakes == {"node-1": 5, "node-2": 5}
    assert report.daemons == {"slurmd": True, "slurmctld": True}
    assert report.status == "node-0 idle\nnode-1 idle\nnode-2 idle" and report.status_exit is None


def test_a_healthy_real_cluster_is_healthy_on_every_node():
    verdicts = judge_health(captured("ok"), "slurm", head="node-0")
    assert {name: v.health for name, v in verdicts.items()} == dict.fromkeys(("node-0", "node-1", "node-2"), "healthy")
    assert verdicts["node-1"].detail == "reaches 2 peers over wg0; slurmd running; idle in sinfo"


def test_killed_wireguard_go_and_slurmd_are_told_apart_and_the_peers_stay_healthy():
    verdicts = judge_health(captured("bad"), "slurm", head="node-0")
    assert verdicts["node-0"].health == "healthy"
    assert (verdicts["node-1"].health, verdicts["node-1"].detail) == (
        "network_down", "wg0 is down (wireguard-go is not running)"
    )
    # sinfo still says idle (slurmctld notices after SlurmdTimeout): the node's own view wins.
    assert (verdicts["node-2"].health, verdicts["node-2"].detail) == ("software_down", "slurmd not running")


def test_a_node_that_could_not_be_asked_is_unreachable_and_its_peers_are_not_blamed():
    reports = captured("ok")
    reports["node-2"] = "no answer after 2 attempts (TimeoutError)"
    head = reports["node-0"]
    assert isinstance(head, HealthReport)
    reports["node-0"] = replace(head, peers={"node-1": True, "node-2": False})
    verdicts = judge_health(reports, "slurm", head="node-0")
    assert verdicts["node-2"].health == "unreachable"
    assert verdicts["node-2"].detail == "Does not answer over SSH: no answer after 2 attempts (TimeoutError)"
    assert verdicts["node-0"].health == verdicts["node-1"].health == "healthy"


def test_a_node_that_reaches_too_few_of_its_peers_is_network_down_even_with_wg0_up():
    up = HealthReport(wg_up=True, wg_daemon="kernel")
    names = [f"node-{i}" for i in range(4)]

    def reaching(me: str, bad: set[str]) -> HealthReport:
        return replace(up, peers={p: p not in bad for p in names if p != me})

    # node-3's packets go nowhere: it fails every peer, each peer fails only node-3.
    reports: dict[str, HealthReport | str] = {
        name: reaching(name, {"node-3"} if name != "node-3" else set(names)) for name in names
    }
    verdicts = judge_health(reports, "none")
    assert verdicts["node-3"].health == "network_down"
    assert verdicts["node-3"].detail == "Cannot reach node-0, node-1, node-2 over the private network"
    assert [verdicts[n].health for n in names[:3]] == ["healthy"] * 3
    assert "cannot reach node-3" in verdicts["node-0"].detail


def test_a_stale_handshake_is_told_but_does_not_make_a_node_unhealthy():
    reports = captured("ok")
    node = reports["node-1"]
    assert isinstance(node, HealthReport)
    reports["node-1"] = replace(node, handshakes={"node-0": 400, "node-2": None})
    verdicts = judge_health(reports, "slurm", head="node-0")
    assert verdicts["node-1"].health == "healthy"
    assert "; no recent WireGuard handshake with node-0, node-2;" in verdicts["node-1"].detail


def test_sinfo_states_that_cannot_run_jobs_are_software_down():
    assert all(slurm_state_works(s) for s in ("idle", "allocated", "mixed", "completing", "reserved", "idle$"))
    assert not any(slurm_state_works(s) for s in ("down*", "idle*", "drained", "draining", "fail", "unknown", "idle~"))
    reports = captured("ok")
    head = reports["node-0"]
    assert isinstance(head, HealthReport)
    reports["node-0"] = replace(head, status="node-0 mixed\nnode-1 down*\n")
    verdicts = judge_health(reports, "slurm", head="node-0")
    assert verdicts["node-0"].detail.endswith("mixed in sinfo") and verdicts["node-0"].health == "healthy"
    assert (verdicts["node-1"].health, verdicts["node-1"].detail) == ("software_down", "down* in sinfo")
    assert (verdicts["node-2"].health, verdicts["node-2"].detail) == ("software_down", "Not listed by sinfo")


def test_a_status_command_that_failed_marks_the_head_only():
    reports = captured("ok")
    head = reports["node-0"]
    assert isinstance(head, HealthReport)
    reports["node-0"] = replace(head, status="", status_exit=124)
    verdicts = judge_health(reports, "slurm", head="node-0")
    assert (verdicts["node-0"].health, verdicts["node-0"].detail) == (
        "software_down", "`sinfo` failed on the head (exit status 124)"
    )
    assert verdicts["node-1"].health == verdicts["node-2"].health == "healthy"


def test_kubernetes_and_ray_views_from_the_head():
    up = HealthReport(wg_up=True, wg_daemon="kernel")
    items = [
        {"metadata": {"name": "node-0"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        {"metadata": {"name": "node-1"}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}},
    ]
    reports: dict[str, HealthReport | str] = {
        "node-0": replace(up, peers={"node-1": True}, status=json.dumps({"kind": "List", "items": items})),
        "node-1": replace(up, peers={"node-0": True}),
    }
    verdicts = judge_health(reports, "kubernetes", head="node-0")
    assert verdicts["node-0"].health == "healthy"
    assert (verdicts["node-1"].health, verdicts["node-1"].detail) == ("software_down", "NotReady in Kubernetes")

    reports = {
        "node-0": replace(up, peers={"node-1": True}, daemons={"raylet": True, "gcs_server": True}, status=RAY_STATUS),
        "node-1": replace(up, peers={"node-0": True}, daemons={"raylet": False}),
    }
    verdicts = judge_health(reports, "ray", head="node-0")
    assert verdicts["node-0"].detail.endswith("3 nodes alive in ray status, 2 checked")
    assert (verdicts["node-1"].health, verdicts["node-1"].detail) == ("software_down", "raylet not running")


def test_output_without_markers_is_not_a_report():
    assert not parse_health_report("bash: line 1: something went wrong\n").printed_anything
    verdicts = judge_health({"node-0": parse_health_report("")}, "none", head="node-0")
    assert verdicts["node-0"].health == "unreachable"


def test_a_lost_link_is_put_on_the_node_cut_off_from_everyone_not_on_a_peer_that_also_lost_one_link():
    up = HealthReport(wg_up=True, wg_daemon="kernel")
    names = [f"node-{i}" for i in range(4)]
    # node-3 reaches no one; besides, the link node-1 <-> node-2 is down. node-2 then fails
    # two of its three peers, but one of them is node-3's own fault.
    broken = {frozenset(("node-1", "node-2"))} | {frozenset(("node-3", n)) for n in names[:3]}
    reports: dict[str, HealthReport | str] = {
        me: replace(up, peers={p: frozenset((me, p)) not in broken for p in names if p != me}) for me in names
    }
    verdicts = judge_health(reports, "none")
    assert verdicts["node-3"].health == "network_down"
    assert [verdicts[n].health for n in names[:3]] == ["healthy"] * 3
    assert "cannot reach node-1, node-3" in verdicts["node-2"].detail


def test_two_nodes_whose_only_link_is_down_with_both_ends_checks_passing_are_both_down_and_it_says_so():
    up = HealthReport(wg_up=True, wg_daemon="kernel")
    reports: dict[str, HealthReport | str] = {
        "node-0": replace(up, peers={"node-1": False}), "node-1": replace(up, peers={"node-0": False}),
    }
    verdicts = judge_health(reports, "none")
    assert {v.health for v in verdicts.values()} == {"network_down"}
    assert verdicts["node-0"].detail == "Cannot reach node-1 over the private network (neither end's own checks fail)"


def test_a_node_checked_alone_says_no_peer_was_checked_instead_of_reaching_zero_peers():
    reports: dict[str, HealthReport | str] = {"node-0": HealthReport(wg_up=True, wg_daemon="kernel")}
    verdict = judge_health(reports, "none", head="node-0")["node-0"]
    assert (verdict.health, verdict.detail) == ("healthy", "wg0 up, no peer checked this round")


def ring_reports(count: int, cut_off: frozenset[str] = frozenset(), broken: frozenset[frozenset[str]] = frozenset()
                 ) -> dict[str, HealthReport | str]:
    """What health.sh reports on `count` nodes: each pings its two ring neighbours, and judges
    every other peer by a handshake still fresh (a cut lasting seconds has not aged it yet)."""
    up = HealthReport(wg_up=True, wg_daemon="running")
    names = [f"node-{i}" for i in range(count)]
    reports: dict[str, HealthReport | str] = {}
    for i, me in enumerate(names):
        ring = {names[(i - 1) % count], names[(i + 1) % count]}
        peers = {
            peer: peer not in ring or not ({me, peer} & cut_off or frozenset((me, peer)) in broken)
            for peer in names if peer != me
        }
        reports[me] = replace(up, peers=peers, by_handshake=frozenset(set(peers) - ring))
    return reports


def test_a_node_cut_off_is_blamed_at_once_by_its_ring_neighbours_pings_before_any_handshake_ages():
    verdicts = judge_health(ring_reports(64, cut_off=frozenset({"node-9"})), "none")
    assert verdicts["node-9"].health == "network_down"
    assert verdicts["node-9"].detail == "Cannot reach node-8, node-10 over the private network"
    assert {v.health for name, v in verdicts.items() if name != "node-9"} == {"healthy"}
    assert "cannot reach node-9" in verdicts["node-8"].detail


def test_one_broken_ring_link_between_two_sound_nodes_blames_neither():
    verdicts = judge_health(ring_reports(8, broken=frozenset({frozenset(("node-3", "node-4"))})), "none")
    assert {v.health for v in verdicts.values()} == {"healthy"}
    assert "cannot reach node-4" in verdicts["node-3"].detail


def test_a_node_cut_off_for_minutes_loses_its_stale_handshakes_too():
    reports = ring_reports(8, cut_off=frozenset({"node-2"}))
    for name, report in reports.items():  # a handshake's age is the same at both ends
        assert isinstance(report, HealthReport)
        stale = {peer: False for peer in report.by_handshake if "node-2" in (name, peer)}
        reports[name] = replace(report, peers={**report.peers, **stale})
    verdicts = judge_health(reports, "none")
    assert verdicts["node-2"].health == "network_down"
    assert {v.health for name, v in verdicts.items() if name != "node-2"} == {"healthy"}


def test_a_node_whose_own_pings_timed_out_while_its_neighbours_reached_it_is_not_blamed():
    reports = ring_reports(64)
    slow = reports["node-5"]
    assert isinstance(slow, HealthReport)
    # Its fping got no CPU in time: both neighbours "fail" from its end, but each of them
    # pinged it and got the echo back, which crosses the link both ways.
    reports["node-5"] = replace(slow, peers={**slow.peers, "node-4": False, "node-6": False})
    verdicts = judge_health(reports, "none")
    assert {v.health for v in verdicts.values()} == {"healthy"}


def test_peers_judged_by_handshake_are_read_apart_from_those_pinged():
    report = parse_health_report(
        "::health:: wg0 up\n::health:: peer node-1 ok\n::health:: peer node-2 fail handshake\n"
        "::health:: peer node-3 ok handshake\n::health:: handshake node-2 400\n"
    )
    assert report.peers == {"node-1": True, "node-2": False, "node-3": True}
    assert report.by_handshake == {"node-2", "node-3"}
