"""Turn the software's own status output into per-node readiness (design rule 7).

- Slurm: every node `idle` in `sinfo` (`sinfo -N -h -o "%N %T"`, or the default table).
- Kubernetes: every node `Ready` with its GPUs allocatable (`kubectl get nodes -o json`).
- Ray: every node alive in `ray status`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

# sinfo appends these to a state: * not responding, ~ powered off, # powering up,
# ! pending power down, % powering down, $ maintenance, @ pending reboot, ^ rebooting,
# - planned. A node with any of them is not ready.
SLURM_STATE_FLAGS = "*~#!%$@^-"
SLURM_READY_STATES = frozenset({"idle"})


@dataclass(frozen=True)
class NodeReadiness:
    name: str
    ready: bool
    state: str  # what the software said, for the node's detail line


def expand_hostlist(expression: str) -> list[str]:
    """Expand a Slurm hostlist: "node-[0-2,5],login" -> node-0 node-1 node-2 node-5 login."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expression):
        names.extend(_expand_one(part))
    return names


def _expand_one(part: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", part)
    if not match:
        return [part] if part else []
    prefix, suffix = part[: match.start()], part[match.end() :]
    expanded: list[str] = []
    for item in match.group(1).split(","):
        if "-" in item:
            low, high = item.split("-", 1)
            width = len(low) if low.startswith("0") else 0
            for number in range(int(low), int(high) + 1):
                expanded.extend(_expand_one(f"{prefix}{number:0{width}d}{suffix}"))
        else:
            expanded.extend(_expand_one(f"{prefix}{item}{suffix}"))
    return expanded


def parse_sinfo(text: str) -> dict[str, str]:
    """Node name -> state from `sinfo -N -h -o "%N %T"` or a default `sinfo [-N]` table.

    A node listed in several partitions keeps the first state that is not ready.
    """
    states: dict[str, str] = {}
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if not lines:
        return states
    header = [word.upper() for word in lines[0]]
    if "NODELIST" in header and "STATE" in header:
        name_at, state_at = header.index("NODELIST"), header.index("STATE")
        rows = [(row[name_at], row[state_at]) for row in lines[1:] if len(row) > max(name_at, state_at)]
    else:
        rows = [(row[0], row[1]) for row in lines if len(row) >= 2]
    for names, state in rows:
        for name in expand_hostlist(names):
            state = state.lower()
            if name not in states or slurm_state_is_ready(states[name]):
                states[name] = state
    return states


def slurm_state_is_ready(state: str) -> bool:
    return state in SLURM_READY_STATES and not any(flag in state for flag in SLURM_STATE_FLAGS)


def slurm_readiness(text: str, expected: list[str]) -> dict[str, NodeReadiness]:
    states = parse_sinfo(text)
    return {
        name: NodeReadiness(
            name,
            ready=slurm_state_is_ready(states.get(name, "")),
            state=states.get(name, "not in sinfo"),
        )
        for name in expected
    }


@dataclass(frozen=True)
class KubeNode:
    name: str
    ready: bool
    gpus_allocatable: int
    unschedulable: bool


def parse_kubectl_nodes(text: str) -> dict[str, KubeNode]:
    """Node name -> KubeNode from `kubectl get nodes -o json` (a List, or a single Node)."""
    document = json.loads(text)
    items = document.get("items", [document] if document.get("kind") == "Node" else [])
    nodes: dict[str, KubeNode] = {}
    for item in items:
        name = item.get("metadata", {}).get("name")
        if not name:
            continue
        status = item.get("status", {})
        ready = any(
            condition.get("type") == "Ready" and condition.get("status") == "True"
            for condition in status.get("conditions", [])
        )
        gpus = _quantity(status.get("allocatable", {}).get("nvidia.com/gpu", "0"))
        nodes[name] = KubeNode(
            name=name,
            ready=ready,
            gpus_allocatable=gpus,
            unschedulable=bool(item.get("spec", {}).get("unschedulable", False)),
        )
    return nodes


def _quantity(value: object) -> int:
    # Extended resources like nvidia.com/gpu are whole numbers ("8").
    try:
        return int(str(value))
    except ValueError:
        return 0


def kubernetes_readiness(text: str, expected: list[str], gpus_per_node: int) -> dict[str, NodeReadiness]:
    nodes = parse_kubectl_nodes(text)
    readiness = {}
    for name in expected:
        node = nodes.get(name)
        if node is None:
            readiness[name] = NodeReadiness(name, False, "not registered")
        elif not node.ready:
            readiness[name] = NodeReadiness(name, False, "NotReady")
        elif node.gpus_allocatable < gpus_per_node:
            readiness[name] = NodeReadiness(
                name, False, f"Ready, {node.gpus_allocatable}/{gpus_per_node} GPUs allocatable"
            )
        elif node.unschedulable:
            readiness[name] = NodeReadiness(name, False, "Ready,SchedulingDisabled")
        else:
            readiness[name] = NodeReadiness(name, True, f"Ready, {node.gpus_allocatable} GPUs allocatable")
    return readiness


@dataclass(frozen=True)
class RayStatus:
    active: list[str] = field(default_factory=list)  # one entry per alive node
    idle: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def alive(self) -> int:
        # Idle nodes are alive too (Ray >= 2.8 lists them apart from active ones).
        return len(self.active) + len(self.idle)


_RAY_SECTIONS = {
    "active:": "active",
    "healthy:": "active",  # Ray < 2.6 called it "Healthy"
    "idle:": "idle",
    "pending:": "pending",
    "recent failures:": "failures",
}


def parse_ray_status(text: str) -> RayStatus:
    """Alive/pending/failed nodes from the "Node status" part of `ray status`.

    Lines under Active/Idle are " <count> <node id or type>": a count of 3 means three
    nodes of that type (older autoscaler output), so each is listed `count` times.
    """
    sections: dict[str, list[str]] = {"active": [], "idle": [], "pending": [], "failures": []}
    current: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if not raw[0].isspace():
            # An unindented line is a heading: a node section, or anything else
            # ("Node status", a rule, "Resources") which ends the node sections.
            current = _RAY_SECTIONS.get(line.lower())
            continue
        if current is None:
            continue
        if line.startswith("(") and line.endswith(")"):  # "(no pending nodes)"
            continue
        if current in ("active", "idle"):
            count, _, node = line.partition(" ")
            if count.isdigit():
                sections[current].extend([node.strip()] * int(count))
                continue
        sections[current].append(line)
    return RayStatus(**sections)


def ray_readiness(text: str, expected: list[str]) -> dict[str, NodeReadiness]:
    """Ray names nodes by random ids, not our names: every node counts as ready once as
    many nodes are alive as the cluster has, none before (the detail says how many)."""
    status = parse_ray_status(text)
    all_alive = status.alive >= len(expected)
    state = f"{status.alive}/{len(expected)} nodes alive in ray status"
    return {name: NodeReadiness(name, all_alive, state) for name in expected}


# -- node health (scripts/health.sh) ------------------------------------------------------

HEALTH_MARKER = "::health:: "
# sinfo state flags that mean the node cannot run jobs: * not responding, ~ powered off,
# # ! % power transitions, @ ^ rebooting. ($ maintenance and - planned are reservations.)
SLURM_BAD_FLAGS = "*~#!%@^"
SLURM_WORKING_STATES = frozenset({"idle", "allocated", "alloc", "mixed", "mix", "completing", "comp", "reserved",
                                  "resv", "planned", "plnd"})
# WireGuard rekeys every 2 minutes while traffic flows, and PersistentKeepalive keeps traffic
# flowing: a handshake older than this means the peer has not answered for a while.
STALE_HANDSHAKE_SECONDS = 180

HEALTHY, UNREACHABLE, NETWORK_DOWN, SOFTWARE_DOWN = "healthy", "unreachable", "network_down", "software_down"


@dataclass(frozen=True)
class HealthReport:
    """What health.sh printed on one node."""

    wg_up: bool | None = None  # None: the script printed nothing about wg0
    wg_daemon: str = ""  # running | stopped | kernel
    peers: dict[str, bool] = field(default_factory=dict)  # peer name -> it answered (a ping, or a fresh handshake)
    # The peers judged by their handshake's age, not pinged this round (all but the ring
    # neighbours): a link they say is up is no evidence either way when another end is blamed.
    by_handshake: frozenset[str] = frozenset()
    handshakes: dict[str, int | None] = field(default_factory=dict)  # seconds since the last one; None: never
    daemons: dict[str, bool] = field(default_factory=dict)  # slurmd/raylet/... -> running
    status: str = ""  # the head's status command output (sinfo, kubectl, ray status)
    status_exit: int | None = None  # the status command's exit status when it failed

    @property
    def printed_anything(self) -> bool:
        return self.wg_up is not None


@dataclass(frozen=True)
class NodeHealthVerdict:
    name: str
    health: str  # healthy | unreachable | network_down | software_down
    detail: str


def parse_health_report(text: str) -> HealthReport:
    """The markers health.sh printed (unknown lines are ignored: a newer script may say more)."""
    wg_up: bool | None = None
    wg_daemon = ""
    peers: dict[str, bool] = {}
    by_handshake: set[str] = set()
    handshakes: dict[str, int | None] = {}
    daemons: dict[str, bool] = {}
    status_exit: int | None = None
    for line in text.splitlines():
        if not line.startswith(HEALTH_MARKER):
            continue
        words = line[len(HEALTH_MARKER):].split()
        if len(words) == 2 and words[0] == "wg0":
            wg_up = words[1] == "up"
        elif len(words) == 2 and words[0] == "wg-daemon":
            wg_daemon = words[1]
        elif len(words) in (3, 4) and words[0] == "peer":
            peers[words[1]] = words[2] == "ok"
            if words[3:] == ["handshake"]:
                by_handshake.add(words[1])
        elif len(words) == 3 and words[0] == "handshake":
            handshakes[words[1]] = int(words[2]) if words[2].isdigit() else None
        elif len(words) == 3 and words[0] == "daemon":
            daemons[words[1]] = words[2] == "running"
        elif len(words) == 2 and words[0] == "status-exit" and words[1].isdigit():
            status_exit = int(words[1])
    status = ""
    start = text.find("::begin-status::\n")
    stop = text.find("::end-status::", start) if start >= 0 else -1
    if start >= 0 and stop >= 0:
        status = text[start + len("::begin-status::\n"):stop].strip("\n")
    return HealthReport(wg_up, wg_daemon, peers, frozenset(by_handshake), handshakes, daemons, status, status_exit)


def slurm_state_works(state: str) -> bool:
    """The node can run jobs (idle, allocated, mixed, ...), whatever its reservations."""
    base = state.rstrip("*~#!%$@^-+")
    return base in SLURM_WORKING_STATES and not any(flag in state for flag in SLURM_BAD_FLAGS)


def _names(names: list[str]) -> str:
    return ", ".join(names)


def judge_health(
    reports: dict[str, HealthReport | str], software: str, head: str | None = None
) -> dict[str, NodeHealthVerdict]:
    """Each node's health from every node's report (a str: why the node could not be asked).

    Unreachable over SSH, then the private network (its own wg0 and wireguard-go, then the
    pings: a lost link counts against the end that loses most of its links, so one broken
    node does not take its healthy peers down with it), then the software (its own
    daemons, then the head's view of it: sinfo, kubectl, ray status). Each phase judges only
    the nodes no earlier phase has."""
    verdicts: dict[str, NodeHealthVerdict] = {}
    notes: dict[str, list[str]] = {name: [] for name in reports}
    answered = {name: report for name, report in reports.items() if isinstance(report, HealthReport)}
    _judge_answers(reports, verdicts)
    _judge_interfaces(answered, verdicts)
    _judge_links(answered, verdicts, notes)
    _judge_daemons(answered, verdicts)
    head_report = answered.get(head) if head else None
    if head is not None and head_report is not None and software != "none":
        _judge_status(head, head_report, software, answered, verdicts, notes)
    for name in reports:
        if name not in verdicts:
            verdicts[name] = _healthy(name, answered[name], notes[name])
    return {name: verdicts[name] for name in reports}


def _judge_answers(reports: dict[str, HealthReport | str], verdicts: dict[str, NodeHealthVerdict]) -> None:
    """Unreachable: no SSH session, or a session in which the check printed nothing."""
    for name, report in reports.items():
        if not isinstance(report, HealthReport):
            verdicts[name] = NodeHealthVerdict(name, UNREACHABLE, f"Does not answer over SSH: {report}"[:255])
        elif not report.printed_anything:
            verdicts[name] = NodeHealthVerdict(name, UNREACHABLE, "The health check did not run on it")


def _judge_interfaces(answered: dict[str, HealthReport], verdicts: dict[str, NodeHealthVerdict]) -> None:
    """The private network, first as each node says of its own interface."""
    for name, report in answered.items():
        if name in verdicts:
            continue
        if report.wg_up is False:
            why = " (wireguard-go is not running)" if report.wg_daemon == "stopped" else ""
            verdicts[name] = NodeHealthVerdict(name, NETWORK_DOWN, f"wg0 is down{why}")
        elif report.wg_daemon == "stopped":
            verdicts[name] = NodeHealthVerdict(name, NETWORK_DOWN, "wireguard-go is not running")


def _judge_links(
    answered: dict[str, HealthReport], verdicts: dict[str, NodeHealthVerdict], notes: dict[str, list[str]]
) -> None:
    """Then the links, both directions, between nodes whose own checks pass. A lost link has
    two ends; it is put on the end that loses more than half of the links it has evidence
    of, the worst such end first (a node cut off fails with every peer that checks it,
    each peer only with it), one at a time, so a broken node never takes its healthy
    peers down with it. Evidence of a link is a ping from either end (each node pings its
    two ring neighbours) or a stale handshake; a fresh handshake says the link worked
    lately, which does not outweigh a ping that failed now. Links to a node whose own
    checks already failed are its own, above. Only when every node left is equally cut off
    (two nodes whose link is down, and nothing says which end) are all of them down.
    A link is lost when neither end reached the other: an echo crosses the link both ways,
    so one end's answer proves it, and a failure at the other end was that end's own (its
    probe timed out under the round's load, say) — no verdict from that."""
    meshed = [name for name in answered if name not in verdicts]
    lost = {
        name: [
            peer for peer in meshed
            if peer != name and not (answered[name].peers.get(peer, False) or answered[peer].peers.get(name, False))
        ]
        for name in meshed
    }

    def pinged(name: str, peer: str) -> bool:
        return peer in answered[name].peers and peer not in answered[name].by_handshake

    checked = {
        name: {peer for peer in meshed if peer != name and (peer in lost[name] or pinged(name, peer) or pinged(peer, name))}
        for name in meshed
    }
    pool = _blame_lost_links(meshed, lost, checked, verdicts)
    own_fault = [name for name in answered if name not in meshed]
    for name in pool:
        notes[name].extend(_link_notes(answered[name], lost[name], meshed, own_fault))


def _blame_lost_links(
    meshed: list[str], lost: dict[str, list[str]], checked: dict[str, set[str]], verdicts: dict[str, NodeHealthVerdict]
) -> list[str]:
    """Put each lost link on the end that loses most of its links, one round at a time (see
    _judge_links); the nodes left unblamed."""
    pool = list(meshed)
    while len(pool) > 1:
        counts = {name: sum(1 for peer in lost[name] if peer in pool) for name in pool}
        bases = {name: sum(1 for peer in checked[name] if peer in pool) for name in pool}
        failing = [name for name in pool if counts[name] * 2 > bases[name]]
        if not failing:
            break
        worst = max(counts[name] for name in failing)
        blamed = [name for name in failing if counts[name] == worst]
        for name in blamed:
            failed = [peer for peer in lost[name] if peer in pool]
            alone = " (neither end's own checks fail)" if len(blamed) == len(pool) else ""
            verdicts[name] = NodeHealthVerdict(
                name, NETWORK_DOWN, f"Cannot reach {_names(failed)} over the private network{alone}"[:255]
            )
        if len(blamed) == len(pool):
            break
        pool = [name for name in pool if name not in blamed]
    return pool


def _link_notes(report: HealthReport, failed: list[str], meshed: list[str], own_fault: list[str]) -> list[str]:
    """What a node not blamed for its links still says of them."""
    found = []
    if failed:
        found.append(f"cannot reach {_names(failed)}")
    if gone := [peer for peer in own_fault if peer in report.peers and not report.peers[peer]]:
        found.append(f"cannot reach {_names(gone)} (down on {'its' if len(gone) == 1 else 'their'} own)")
    stale = [
        peer for peer, age in report.handshakes.items()
        if peer in meshed and peer not in failed and (age is None or age > STALE_HANDSHAKE_SECONDS)
    ]
    if stale:
        found.append(f"no recent WireGuard handshake with {_names(stale)}")
    return found


def _judge_daemons(answered: dict[str, HealthReport], verdicts: dict[str, NodeHealthVerdict]) -> None:
    """The software, first as each node's own daemons say (the head's view comes after)."""
    for name, report in answered.items():
        if name in verdicts:
            continue
        stopped = sorted(daemon for daemon, running in report.daemons.items() if not running)
        if stopped:
            verdicts[name] = NodeHealthVerdict(name, SOFTWARE_DOWN, f"{_names(stopped)} not running")


def _healthy(name: str, report: HealthReport, notes: list[str]) -> NodeHealthVerdict:
    peers = sum(report.peers.values())
    if report.peers:
        parts = [f"reaches {peers} peer{'s' if peers != 1 else ''} over wg0"]
    else:
        parts = ["wg0 up, no peer checked this round"]
    running = sorted(daemon for daemon, up in report.daemons.items() if up)
    if running:
        parts.append(f"{_names(running)} running")
    return NodeHealthVerdict(name, HEALTHY, "; ".join(parts + notes)[:255])


def _judge_status(
    head: str, report: HealthReport, software: str, answered: dict[str, HealthReport],
    verdicts: dict[str, NodeHealthVerdict], notes: dict[str, list[str]],
) -> None:
    command = {"slurm": "sinfo", "kubernetes": "kubectl get nodes", "ray": "ray status"}[software]
    if report.status_exit is not None:
        if head not in verdicts:
            verdicts[head] = NodeHealthVerdict(
                head, SOFTWARE_DOWN, f"`{command}` failed on the head (exit status {report.status_exit})"
            )
        return
    judged = [name for name in answered if name not in verdicts]
    if software == "slurm":
        states = parse_sinfo(report.status)
        for name in judged:
            state = states.get(name)
            if state is None:
                verdicts[name] = NodeHealthVerdict(name, SOFTWARE_DOWN, "Not listed by sinfo")
            elif not slurm_state_works(state):
                verdicts[name] = NodeHealthVerdict(name, SOFTWARE_DOWN, f"{state} in sinfo")
            else:
                notes[name].append(f"{state} in sinfo")
    elif software == "kubernetes":
        try:
            nodes = parse_kubectl_nodes(report.status)
        except ValueError:
            verdicts.setdefault(head, NodeHealthVerdict(head, SOFTWARE_DOWN, "`kubectl get nodes` printed no JSON"))
            return
        for name in judged:
            node = nodes.get(name)
            if node is None:
                verdicts[name] = NodeHealthVerdict(name, SOFTWARE_DOWN, "Not registered with Kubernetes")
            elif not node.ready:
                verdicts[name] = NodeHealthVerdict(name, SOFTWARE_DOWN, "NotReady in Kubernetes")
            else:
                notes[name].append("Ready in Kubernetes")
    else:
        # Ray names nodes by random ids: the count is for the head's detail; each node's
        # own raylet (above) says which one is gone.
        alive = parse_ray_status(report.status).alive
        if head in notes:
            notes[head].append(f"{alive} nodes alive in ray status, {len(notes)} checked")

# -- the network test ---------------------------------------------------------------------


@dataclass(frozen=True)
class Iperf3Run:
    """What one `iperf3 --json` client run measured: the receiver's figure (what arrived)."""

    gbps: float | None
    error: str = ""


def iperf3_result(text: str) -> Iperf3Run:
    """Parse `iperf3 -c … --json`. iperf3 reports a failed run inside the JSON ("error")."""
    start = text.find("{")
    if start < 0:
        line = next((line.strip() for line in text.splitlines() if line.strip()), "")
        return Iperf3Run(None, f"iperf3 printed no result: {line or 'no output'}"[:255])
    try:
        data = json.loads(text[start : text.rfind("}") + 1])
    except ValueError as error:
        return Iperf3Run(None, f"unreadable iperf3 output: {error}"[:255])
    if data.get("error"):
        return Iperf3Run(None, f"iperf3: {data['error']}"[:255])
    end = data.get("end") or {}
    summary = end.get("sum_received") or end.get("sum") or {}
    bits = summary.get("bits_per_second")
    if not isinstance(bits, (int, float)):
        return Iperf3Run(None, "iperf3 reported no received bandwidth")
    return Iperf3Run(round(bits / 1e9, 3))


_RTT = re.compile(r"(?:rtt|round-trip) min/avg/max/(?:mdev|stddev) = [\d.]+/([\d.]+)/")


def ping_average_ms(text: str) -> float | None:
    """The average round trip of `ping -q` (Linux iputils or BSD), None when nothing came back."""
    match = _RTT.search(text)
    return round(float(match.group(1)), 3) if match else None


@dataclass(frozen=True)
class NcclRow:
    """One message size of nccl-tests' all_reduce_perf (out-of-place columns)."""

    size_bytes: int
    time_us: float
    algbw_gbs: float  # GB/s
    busbw_gbs: float  # GB/s
    wrong: int


def all_reduce_perf_rows(text: str) -> list[NcclRow]:
    """The result table of `all_reduce_perf`: size count type redop root time algbw busbw
    #wrong (out-of-place), then the same four for in-place. Comment lines start with #."""
    rows = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 9 or line.lstrip().startswith("#") or not words[0].isdigit():
            continue
        try:
            wrong = int(words[8]) if words[8].isdigit() else 0
            rows.append(NcclRow(int(words[0]), float(words[5]), float(words[6]), float(words[7]), wrong))
        except ValueError:
            continue
    return rows


def all_reduce_average_busbw(text: str) -> float | None:
    """`# Avg bus bandwidth    : 70.742` (GB/s), None when the run did not print it."""
    match = re.search(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)", text)
    return float(match.group(1)) if match else None
