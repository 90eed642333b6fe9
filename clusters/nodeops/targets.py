"""What the node operations act on: the machines of one cluster and how to reach them.

Pure data, no I/O: the Django side builds a `ClusterSpec` from its models and hands it to
`clusters.nodeops.operations`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PRIVATE_NETWORK = "10.77.0.0/24"
PRIVATE_PREFIX = "10.77.0."
WIREGUARD_PORT = 51820

SOFTWARE_CHOICES = ("none", "slurm", "kubernetes", "ray")
MACHINE_KINDS = ("vm", "bare_metal", "container")


def node_name(index: int) -> str:
    return f"node-{index}"


def private_ip(index: int) -> str:
    """node-0 is 10.77.0.1, node-1 is 10.77.0.2, ... (the design's private network)."""
    if not 0 <= index < 254:
        raise ValueError(f"node index {index} does not fit in {PRIVATE_NETWORK}")
    return f"{PRIVATE_PREFIX}{index + 1}"


@dataclass(frozen=True)
class NodeTarget:
    """One machine and how to reach it over SSH.

    `root` is the path prefix every node-side script acts under: "" on a real machine,
    a sandbox directory in tests and in the `local` provider.
    """

    name: str
    index: int
    host: str
    port: int
    user: str
    key_filename: str | None
    root: str
    private_ip: str
    # How the control plane reaches a machine without an address of its own (real nodes on
    # one computer): an SSH ProxyCommand, used instead of dialing host:port.
    proxy_command: str = ""
    # Where the other nodes send this node's WireGuard traffic, when it is not `host`.
    endpoint: str = ""
    # The host (site) the machine runs on, "" for this computer; and where nodes on other sites
    # send its WireGuard traffic ("address:port", a port its host forwards to it). Nodes of one
    # site reach each other on their underlay, nodes of different sites through their hosts.
    site: str = ""
    site_endpoint: str = ""

    @property
    def wireguard_endpoint(self) -> str:
        return self.endpoint or self.host

    @property
    def is_head(self) -> bool:
        return self.index == 0

    def crosses_sites(self, other: NodeTarget) -> bool:
        """Whether this node and `other` run on different hosts."""
        return self.site != other.site


@dataclass(frozen=True)
class ClusterSpec:
    cluster_id: str
    software: str  # "none" | "slurm" | "kubernetes" | "ray"
    machine_kind: str  # "vm" | "bare_metal" | "container"
    gpus_per_machine: int
    nodes: tuple[NodeTarget, ...]
    sandbox: bool
    volume_source: str | None = None  # where the volume is mounted on the head
    volume_bytes: int | None = None  # the volume's size: a sync back never writes more
    gateway: str | None = None  # "user@host:port" jump host every node is reached through
    # Extra environment for every script (e.g. an apt proxy); never secrets.
    extra_env: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.software not in SOFTWARE_CHOICES:
            raise ValueError(f"unknown software {self.software!r}")
        if self.machine_kind not in MACHINE_KINDS:
            raise ValueError(f"unknown machine kind {self.machine_kind!r}")
        if self.software == "kubernetes" and self.machine_kind == "container":
            raise ValueError("Kubernetes runs only on vm and bare_metal machines")
        if not self.nodes:
            raise ValueError("a cluster has at least one node")
        # node-0 is the head; the rest follow in index order. An index can be missing: a
        # worker that never came up is released and the others keep their names.
        if self.nodes[0].index != 0:
            raise ValueError("node-0 (the head) must come first")
        for previous, node in zip(self.nodes, self.nodes[1:], strict=False):
            if node.index <= previous.index:
                raise ValueError("nodes must be in increasing index order")
        for node in self.nodes:
            if node.name != node_name(node.index):
                raise ValueError(f"{node.name} must be named {node_name(node.index)}")

    @property
    def head(self) -> NodeTarget:
        return self.nodes[0]

    @property
    def workers(self) -> tuple[NodeTarget, ...]:
        return self.nodes[1:]

    @property
    def has_shared_folder(self) -> bool:
        # Containers share no folder: each keeps its own disk (design rule 12).
        return self.machine_kind in ("vm", "bare_metal")

    def node(self, name: str) -> NodeTarget:
        for candidate in self.nodes:
            if candidate.name == name:
                return candidate
        raise KeyError(name)


def make_targets(
    endpoints: list[tuple[str, int]],
    *,
    user: str,
    key_filename: str | None,
    roots: list[str] | None = None,
) -> tuple[NodeTarget, ...]:
    """NodeTargets for node-0..node-N-1 from (host, port) pairs, in order."""
    return tuple(
        NodeTarget(
            name=node_name(i),
            index=i,
            host=host,
            port=port,
            user=user,
            key_filename=key_filename,
            root=roots[i] if roots else "",
            private_ip=private_ip(i),
        )
        for i, (host, port) in enumerate(endpoints)
    )
