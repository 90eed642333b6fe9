"""The health round (clusters/node_health: health.sh + node.check_health) against real sshd
processes on loopback addresses, with the sandbox's stand-ins for wg0 and the daemons."""

from __future__ import annotations

import dataclasses

import pytest

from clusters.node_health import node as health_node
from clusters.nodeops import operations as ops
from clusters.nodeops.runner import NodeRunner, RetryPolicy
from clusters.nodeops.targets import NodeTarget, private_ip
from clusters.providers.local.sandbox import free_port
from tests.nodeops.test_nodeops_cluster import bring_up, root


@pytest.mark.parametrize("software", ["none", "slurm", "ray", "kubernetes"])
def test_a_cluster_that_came_up_is_healthy_on_every_node(endpoints, runner, software):
    spec = endpoints.spec(software=software)
    assert [step.summary() for step in bring_up(spec, runner).values() if not step.ok] == []

    result = health_node.check_health(spec, runner=runner)

    assert {name: verdict.health for name, verdict in result.health.items()} == {
        f"node-{i}": "healthy" for i in range(4)
    }, result.health
    assert "reaches 3 peers over wg0" in result.health["node-1"].detail


def test_a_node_whose_tunnel_went_down_is_network_down_and_its_peers_stay_healthy(endpoints, runner):
    spec = endpoints.spec(software="slurm")
    assert [step.summary() for step in bring_up(spec, runner).values() if not step.ok] == []
    (root(spec, 2) / "etc/runcrate/network").write_text("down\n")

    health = health_node.check_health(spec, runner=runner).health

    assert health["node-2"].health == "network_down" and health["node-2"].detail == "wg0 is down"
    assert [health[f"node-{i}"].health for i in (0, 1, 3)] == ["healthy"] * 3
    # Its peers reach the others, and are not blamed for it.
    assert health["node-0"].detail.startswith("reaches 2 peers over wg0")


def test_a_node_whose_daemon_stopped_is_software_down_from_its_own_view_and_the_heads(endpoints, runner):
    spec = endpoints.spec(software="slurm")
    assert [step.summary() for step in bring_up(spec, runner).values() if not step.ok] == []
    registry = root(spec, 0) / "var/lib/runcrate-sim/slurm/registered"
    (registry / "node-3").unlink()

    health = health_node.check_health(spec, runner=runner).health

    assert health["node-3"].health == "software_down"
    assert health["node-3"].detail == "slurmd not running"
    assert [health[f"node-{i}"].health for i in range(3)] == ["healthy"] * 3
    assert "idle in sinfo" in health["node-1"].detail


def test_a_node_that_does_not_answer_over_ssh_is_unreachable(endpoints):
    spec = endpoints.spec(software="none")
    with NodeRunner(RetryPolicy(connect_timeout=1, attempts=3, backoff=0.05)) as runner:
        assert [step.summary() for step in bring_up(spec, runner).values() if not step.ok] == []
        closed = dataclasses.replace(spec.nodes[1], port=free_port(spec.nodes[1].host))
        broken = dataclasses.replace(spec, nodes=(spec.nodes[0], closed, *spec.nodes[2:]))

        health = health_node.check_health(broken, runner=runner).health

    assert health["node-1"].health == "unreachable"
    assert health["node-1"].detail.startswith("Does not answer over SSH: no answer after")
    assert [health[f"node-{i}"].health for i in (0, 2, 3)] == ["healthy"] * 3


def test_one_round_is_one_ssh_session_per_node_over_kept_connections(endpoints):
    spec = endpoints.spec(software="slurm")
    with NodeRunner(keep_connections=True) as runner:
        assert [step.summary() for step in bring_up(spec, runner).values() if not step.ok] == []
        opened = {key: id(conn) for key, conn in runner._connections.items()}
        first = health_node.check_health(spec, runner=runner)
        second = health_node.check_health(spec, runner=runner)
        kept = {key: id(conn) for key, conn in runner._connections.items()}
    assert kept == opened and len(kept) == len(spec.nodes), "the same connections carried both rounds"
    assert first.results.keys() == second.results.keys() == {node.name for node in spec.nodes}


def test_the_health_script_is_part_of_the_scripts_shellcheck_reads():
    assert health_node.SCRIPT.exists()


class FirstLoginTimesOut(NodeRunner):
    """node-1's first login of the round fails (its port closed, as a login that timed out
    under the round's own load); every later one goes through."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.failed_once = False

    def run(self, nodes, *args, **kwargs):
        nodes = list(nodes)
        if not self.failed_once:
            self.failed_once = True
            nodes = [dataclasses.replace(n, port=free_port(n.host)) if n.name == "node-1" else n for n in nodes]
        return super().run(nodes, *args, **kwargs)


def test_a_login_that_timed_out_during_the_round_is_asked_again_alone_before_any_verdict(endpoints):
    spec = endpoints.spec(software="none")
    with NodeRunner(RetryPolicy(connect_timeout=1, attempts=2, backoff=0.05)) as runner:
        assert [step.summary() for step in bring_up(spec, runner).values() if not step.ok] == []
    # node-1's closed port refuses at once; the others get a timeout a busy computer meets.
    flaky = FirstLoginTimesOut(RetryPolicy(connect_timeout=10, attempts=2, backoff=0.05))
    with flaky:
        health = health_node.check_health(spec, runner=flaky).health

    assert flaky.failed_once
    assert {name: verdict.health for name, verdict in health.items()} == dict.fromkeys(
        (f"node-{i}" for i in range(4)), "healthy"
    )


def ring_spec(indices: list[int]) -> ops.ClusterSpec:
    nodes = tuple(
        NodeTarget(name=f"node-{i}", index=i, host="127.0.0.1", port=22, user="root", key_filename=None,
                   root="", private_ip=private_ip(i))
        for i in indices
    )
    return ops.ClusterSpec(cluster_id="ring", software="none", machine_kind="vm", gpus_per_machine=1,
                           nodes=nodes, sandbox=False)


def test_each_node_pings_the_nodes_before_and_after_it_by_index_wrapping_round_gaps_and_all():
    spec = ring_spec([0, 1, 2, 5])
    ring = health_node.health_ring(spec)
    by_name = {node.name: ring(node)["RUNCRATE_HEALTH_RING"] for node in spec.nodes}

    assert by_name == {
        "node-0": f"{private_ip(5)} {private_ip(1)}",
        "node-1": f"{private_ip(0)} {private_ip(2)}",
        "node-2": f"{private_ip(1)} {private_ip(5)}",
        "node-5": f"{private_ip(2)} {private_ip(0)}",
    }
    two = ring_spec([0, 1])
    assert [health_node.health_ring(two)(node)["RUNCRATE_HEALTH_RING"] for node in two.nodes] == [private_ip(1), private_ip(0)]
