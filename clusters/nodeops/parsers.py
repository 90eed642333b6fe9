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
