"""The node side of the health check: one round of health.sh on every node at once, one SSH
session each, and the verdict on every node (docs/nodeops.md, "Node health"). Standalone, like
clusters.nodeops: no Django."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from clusters.node_health.parsers import UNREACHABLE, HealthReport, NodeHealthVerdict, judge_health, parse_health_report
from clusters.nodeops.operations import StepResult, _run, _Session
from clusters.nodeops.runner import ROUND_CONNECT_TIMEOUT, NodeEnv, NodeRunner, OutputCallback, RetryPolicy
from clusters.nodeops.targets import ClusterSpec, NodeTarget

SCRIPT = Path(__file__).with_name("health.sh")


@dataclass
class HealthRound(StepResult):
    # Every node's verdict.
    health: dict[str, NodeHealthVerdict] = field(default_factory=dict)


# How hard one health round tries a node: a machine that does not answer within seconds is
# unreachable for this round (the next round asks again), and one round never outlasts an
# interval by much.
# Its output is a few lines a node (the head's software status: a line a node): a session
# that prints more is cut off (a node's rc file can print anything).
HEALTH_POLICY = RetryPolicy(connect_timeout=ROUND_CONNECT_TIMEOUT, attempts=2, backoff=0.5, command_timeout=40.0,
                            max_output=1024 * 1024)


def health_ring(spec: ClusterSpec) -> NodeEnv:
    """RUNCRATE_HEALTH_RING for each node: the private addresses of the nodes just before and
    just after it by index, wrapping round (one in a two-node cluster), which health.sh pings."""
    ordered = sorted(spec.nodes, key=lambda node: node.index)
    position = {node.name: place for place, node in enumerate(ordered)}

    def ring(node: NodeTarget) -> dict[str, str]:
        place = position[node.name]
        neighbours = dict.fromkeys(
            ordered[(place + step) % len(ordered)].private_ip for step in (-1, 1) if len(ordered) > 1
        )
        return {"RUNCRATE_HEALTH_RING": " ".join(neighbours)}

    return ring


# The verdict's detail for a machine its provider knows has stopped (a local node whose PID 1
# exited): the customer's words, not how it was found out.
MACHINE_STOPPED = "The machine stopped"


def check_health(
    spec: ClusterSpec, *, runner: NodeRunner | None = None, on_output: OutputCallback | None = None,
    ping_wait: int = 2, stopped: Iterable[str] | Mapping[str, str] = (),
) -> HealthRound:
    """One round of the periodic health check: health.sh on every node at once, one SSH
    session each (over the runner's kept connection when it has one). `result.health` has
    every node's verdict: healthy, unreachable, network_down or software_down, with why.
    `stopped` names machines the provider knows have stopped: they are not asked, and are
    unreachable because "The machine stopped", or the provider's own words for each (a mapping:
    "node-3's host stopped answering")."""
    env = {"RUNCRATE_HEALTH_PING_WAIT": str(ping_wait)}
    ring = health_ring(spec)
    why_stopped = dict(stopped) if isinstance(stopped, Mapping) else dict.fromkeys(stopped, MACHINE_STOPPED)
    asked = [node for node in spec.nodes if node.name not in why_stopped]
    with _Session(runner) as session:
        results = _run(spec, asked, SCRIPT, "health", session, on_output, extra_env=env, node_env=ring,
                       policy=HEALTH_POLICY)
        # A node that did not answer while every node was being asked at once is asked once
        # more on its own, after the others finished: a login that timed out under the load
        # of the round itself is no verdict. Only a node that fails this second time too is
        # unreachable.
        again = [node for node in asked if results[node.name].unreachable]
        if again:
            results.update(_run(spec, again, SCRIPT, "health", session, on_output, extra_env=env, node_env=ring,
                                policy=HEALTH_POLICY))
    # A stopped machine answers nothing; its peers' failed pings to it are its own (judged
    # like any node that could not be asked).
    reports: dict[str, HealthReport | str] = {node.name: why_stopped[node.name] for node in spec.nodes
                                              if node.name in why_stopped}
    for name, result in results.items():
        if result.unreachable:
            # "node-1 (host:port) unreachable after 2 attempts: TimeoutError: ..." -> the kind only.
            kind = result.error.rpartition(" attempts: ")[2].split(":", 1)[0] or "no answer"
            reports[name] = f"no answer after {result.attempts} attempts ({kind})"
        else:
            report = parse_health_report(result.stdout)
            if result.cut_off:
                reports[name] = f"its health check {result.error}"
            else:
                reports[name] = report if report.printed_anything else (result.error or "the check printed nothing")
    health = judge_health(reports, spec.software, head=spec.head.name)
    for name in why_stopped.keys() & set(health):
        health[name] = NodeHealthVerdict(name, UNREACHABLE, why_stopped[name])
    return HealthRound("check_health", results, health=health, detail=spec.software)
