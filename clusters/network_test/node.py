"""The node side of the network test: the rounds the control plane decides (the ring, then
every ordered pair) and network_test.sh's actions run on the nodes of each, or nccl-tests'
all_reduce_perf across every node (docs/nodeops.md, "Network test"). Standalone, like
clusters.nodeops: no Django."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from clusters.network_test.parsers import (
    NcclRow,
    all_reduce_average_busbw,
    all_reduce_perf_rows,
    iperf3_result,
    ping_average_ms,
)
from clusters.nodeops.operations import _between, _run, _Session
from clusters.nodeops.runner import NodeEnv, NodeResult, NodeRunner, OutputCallback
from clusters.nodeops.targets import ClusterSpec, NodeTarget

SCRIPT = Path(__file__).with_name("network_test.sh")

# All ordered pairs are measured one by one (a node in one pair at a time) up to this many
# nodes; a larger cluster is measured by the ring only (its pairs would take too long).
ALL_PAIRS_MAX_NODES = 8
NETWORK_TEST_SECONDS = 2


@dataclass(frozen=True)
class PairMeasurement:
    """One direction between two nodes: `source` sent to `target` (node names)."""

    phase: str  # "ring" (every node to the next at once) | "pairs" (one pair per node at a time)
    source: str
    target: str
    gbps: float | None
    latency_ms: float | None
    error: str = ""


@dataclass
class NetworkTestResult:
    method: str  # "iperf3" | "nccl"
    pairs: list[PairMeasurement] = field(default_factory=list)
    nccl_rows: list[NcclRow] = field(default_factory=list)
    nccl_average_busbw_gbs: float | None = None
    # Why the test could not run (or stopped); empty when every measurement was taken.
    error: str = ""
    stopped: bool = False
    notes: list[str] = field(default_factory=list)


class NetworkTestReport:
    """What the caller hears while a network test runs. The default hears nothing."""

    def started(self, method: str) -> None:
        """The method is known (after every node answered the probe)."""

    def measured(self, pairs: list[PairMeasurement]) -> None:
        """One round's pairs finished (called from the caller's thread, in round order)."""

    def keep_going(self) -> bool:
        """Asked before every round: False stops the test (the cluster is going away)."""
        return True


# action(nodes, name, node_env): run network_test.sh's action `name` on `nodes`.
_Action = Callable[..., dict[str, NodeResult]]


def ring_round(count: int) -> list[tuple[int, int]]:
    """Every node to the next one, all at once (positions in the node list)."""
    return [(i, (i + 1) % count) for i in range(count)] if count > 1 else []


def pair_rounds(count: int) -> list[list[tuple[int, int]]]:
    """Every ordered pair once, in rounds where each node is in at most one pair (as sender
    or receiver): the circle method pairs the nodes up, each pairing runs both ways."""
    players: list[int | None] = [*range(count), *([None] if count % 2 else [])]
    rounds: list[list[tuple[int, int]]] = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        matches = [(a, b) for a, b in zip(players[:half], reversed(players[half:]), strict=True)
                   if a is not None and b is not None]
        rounds.append([(a, b) for a, b in matches])
        rounds.append([(b, a) for a, b in matches])
        players = [players[0], players[-1], *players[1:-1]]
    return [r for r in rounds if r]


def _failure(result: NodeResult) -> str:
    return (result.tail(2) or result.error or f"exit status {result.exit_code}").strip()[-240:]


def _pair_failure(result: NodeResult, target: str) -> str:
    """Why one pair has no figure, in the customer's words: the tool's last line of complaint
    (never the script's own step and section markers), or that nothing came back."""
    said = [line.strip() for line in (result.stdout + "\n" + result.stderr).splitlines()
            if line.strip() and not line.lstrip().startswith("::")]
    if said:
        return said[-1][-200:]
    return f"no measurement came back from {target}"


def network_test(
    spec: ClusterSpec,
    *,
    runner: NodeRunner | None = None,
    on_output: OutputCallback | None = None,
    report: NetworkTestReport | None = None,
    prefer_nccl: bool = False,
    seconds: int = NETWORK_TEST_SECONDS,
    all_pairs: bool | None = None,
) -> NetworkTestResult:
    """Measure the private network: an iperf3 server on every node, then the ring (every
    node sends to the next at once), then every ordered pair (clusters of up to
    ALL_PAIRS_MAX_NODES), each pair with its ping latency. With `prefer_nccl` and GPUs,
    nccl-tests and mpirun on every node, nccl-tests' all_reduce_perf across every node
    instead. Results reach `report` as each round ends; `report.keep_going()` is asked
    before every round."""
    report = report or NetworkTestReport()
    env = {"RUNCRATE_NETTEST_SECONDS": str(seconds)}
    with _Session(runner) as session:

        def action(nodes: Iterable[NodeTarget], name: str, node_env: NodeEnv | None = None) -> dict[str, NodeResult]:
            return _run(spec, nodes, SCRIPT, f"network_test_{name}", session, on_output,
                        {**env, "RUNCRATE_NETTEST_ACTION": name}, node_env)

        served = action(spec.nodes, "serve")
        try:
            broken = [r for r in served.values() if not r.ok]
            if broken:
                return NetworkTestResult("iperf3", error="; ".join(f"{r.name}: {_failure(r)}" for r in broken))
            probes = {name: _probe(result.stdout) for name, result in served.items()}
            result = NetworkTestResult("iperf3")
            if prefer_nccl:
                missing = [name for name, p in probes.items()
                           if p.get("gpus", "0") in ("", "0") or p.get("nccl_tests", "none") == "none"
                           or p.get("mpirun") != "yes"]
                if missing:
                    result.notes.append(
                        "nccl-tests (all_reduce_perf), mpirun or a GPU is missing on " + ", ".join(missing)
                        + ": measured with iperf3 over the private network instead"
                    )
                else:
                    result.method = "nccl"
            report.started(result.method)
            if result.method == "nccl":
                return _nccl(spec, action, report, result)
            count = len(spec.nodes)
            rounds = [("ring", ring_round(count))]
            if all_pairs if all_pairs is not None else count <= ALL_PAIRS_MAX_NODES:
                rounds += [("pairs", r) for r in pair_rounds(count)]
            for phase, pairs in rounds:
                if not report.keep_going():
                    result.stopped = True
                    result.error = "stopped: the cluster is no longer ready"
                    return result
                measured = _measure(spec, action, phase, pairs)
                result.pairs.extend(measured)
                report.measured(measured)
            return result
        finally:
            action(spec.nodes, "stop")


def _probe(stdout: str) -> dict[str, str]:
    for line in stdout.splitlines():
        if line.startswith("PROBE "):
            return dict(word.split("=", 1) for word in line.split()[1:] if "=" in word)
    return {}


def _measure(spec: ClusterSpec, action: _Action, phase: str, pairs: list[tuple[int, int]]) -> list[PairMeasurement]:
    """One round: every source measures its target at once."""
    targets = {spec.nodes[s].name: spec.nodes[t] for s, t in pairs}

    def node_env(node: NodeTarget) -> dict[str, str]:
        target = targets[node.name]
        return {"RUNCRATE_NETTEST_TARGET": f"{target.name} {target.private_ip}"}

    results = action([spec.nodes[s] for s, _ in pairs], "measure", node_env)
    measured = []
    for source, target in targets.items():
        node_result = results[source]
        iperf = iperf3_result(_between(node_result.stdout, f"::begin-iperf3 {target.name}::", "::end-iperf3::"))
        latency = ping_average_ms(_between(node_result.stdout, f"::begin-ping {target.name}::", "::end-ping::"))
        error = "" if node_result.ok else _pair_failure(node_result, target.name)
        measured.append(PairMeasurement(phase, source, target.name, iperf.gbps if not error else None, latency,
                                        error or iperf.error))
    return measured


def _nccl(spec: ClusterSpec, action: _Action, report: NetworkTestReport, result: NetworkTestResult) -> NetworkTestResult:
    if not report.keep_going():
        result.stopped, result.error = True, "stopped: the cluster is no longer ready"
        return result
    head = action([spec.head], "nccl")[spec.head.name]
    output = _between(head.stdout, "::begin-nccl::", "::end-nccl::")
    result.nccl_rows = all_reduce_perf_rows(output)
    result.nccl_average_busbw_gbs = all_reduce_average_busbw(output)
    if not head.ok or not result.nccl_rows:
        result.error = f"all_reduce_perf did not finish: {_failure(head)}"
    return result
