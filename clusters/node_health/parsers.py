"""What health.sh printed on each node, and the verdict on every node of the round: healthy,
unreachable, network_down or software_down, with why (docs/nodeops.md, "Node health")."""

from __future__ import annotations

from dataclasses import dataclass, field

from clusters.nodeops.parsers import parse_kubectl_nodes, parse_ray_status, parse_sinfo

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

