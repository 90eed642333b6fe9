"""Providers whose machines are driven over SSH with Fabric (clusters.nodeops).

The control plane builds a ClusterSpec from the cluster's live nodes and runs the node
steps on every node in parallel. Join = names + WireGuard mesh + /shared + volume; it
counts only when every node reaches every other by name. Install and readiness checks
are the software's own (sinfo / kubectl / ray status).
"""

from __future__ import annotations

import abc
import contextlib
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from accounts.sshkeys import node_payload
from clusters.models import Software
from clusters.network_test import node as network_test_node
from clusters.network_test.node import NetworkTestReport, NetworkTestResult
from clusters.node_health import node as health_node
from clusters.nodeops import operations
from clusters.nodeops.metrics import collect_metrics
from clusters.nodeops.operations import ClusterSecrets, StepResult
from clusters.nodeops.runner import NodeResult, NodeRunner, RetryPolicy
from clusters.nodeops.targets import ClusterSpec, NodeTarget
from clusters.providers.base import (
    BootReport,
    BootState,
    NodeHealthReport,
    Provider,
    StepOutcome,
    VolumeNotSynced,
    VolumeSync,
)
from clusters.providers.kubernetes import kubernetes_pins
from clusters.services.keys import record_host_keys, save_node_secrets
from clusters.services.volumes import record_volume_synced

if TYPE_CHECKING:
    from clusters.models import Cluster, Node
    from clusters.nodeops.metrics import MetricsRound


def ssh_banner(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when an SSH server answers on host:port (the machine is up)."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            return sock.recv(8).startswith(b"SSH-")
    except OSError:
        return False


class HealthRunners:
    """One NodeRunner with kept connections per cluster, for the health rounds of this
    process: round after round reuses each node's SSH connection, so a round costs one
    session per node, not a handshake. At most `size` clusters are kept; the least recently
    checked one gives its connections back first."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._runners: OrderedDict[int, NodeRunner] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, cluster_id: int) -> NodeRunner:
        with self._lock:
            runner = self._runners.pop(cluster_id, None) or NodeRunner(health_node.HEALTH_POLICY, keep_connections=True)
            self._runners[cluster_id] = runner
            evicted = []
            while len(self._runners) > self.size:
                evicted.append(self._runners.popitem(last=False)[1])
        for old in evicted:
            old.close()
        return runner

    def forget(self, cluster_id: int) -> None:
        with self._lock:
            runner = self._runners.pop(cluster_id, None)
        if runner is not None:
            runner.close()


HEALTH_RUNNERS = HealthRunners()




class FabricProvider(Provider):
    sandbox = False
    # Whether the control plane reaches machines through the location's SSH gateway.
    through_gateway = True
    retry_policy = RetryPolicy()
    # How long one join pass waits for peers (None: the operations' default).
    join_wait_seconds: int | None = None

    @abc.abstractmethod
    def target_for(self, node: Node) -> NodeTarget:
        """How the control plane reaches this node over SSH, and the root its scripts act under."""

    # Where the provider attaches a cluster's volume on the head machine.
    VOLUME_MOUNT = "/mnt/runcrate-volume"

    def volume_source(self, cluster: Cluster) -> str | None:
        return self.VOLUME_MOUNT if cluster.volume_id else None

    def spec_for(self, cluster: Cluster, nodes: list[Node]) -> ClusterSpec:
        ordered = sorted(nodes, key=lambda n: n.index)
        return ClusterSpec(
            cluster_id=str(cluster.pk),
            software=cluster.software,
            machine_kind=cluster.machine_type.kind,
            gpus_per_machine=cluster.machine_type.gpus_per_machine,
            nodes=tuple(self.target_for(node) for node in ordered),
            sandbox=self.sandbox,
            volume_source=self.volume_source(cluster),
            volume_bytes=cluster.volume.size_gb * 10**9 if cluster.volume_id and cluster.volume else None,
            gateway=(cluster.machine_type.location.gateway_host or None) if self.through_gateway else None,
            extra_env=(
                ("RUNCRATE_SSH_KEYS", node_payload(k.public_key for k in cluster.ssh_keys.all())),
                ("RUNCRATE_INTERCONNECT", cluster.machine_type.interconnect),
                *(kubernetes_pins().items() if cluster.software == Software.KUBERNETES else ()),
            ),
        )

    def _emit(self, name: str, step: str, text: str) -> None:
        self.on_output(name, step, text)

    def _secrets(self, cluster: Cluster, spec: ClusterSpec, nodes: list[Node] | None = None) -> ClusterSecrets:
        stored = cluster.plain_node_secrets
        existing = ClusterSecrets.from_dict(stored) if stored else None
        secrets = operations.generate_secrets(spec, existing)
        # A machine being swapped in joins with a WireGuard key of its own (operations.with_replacement_keys).
        swapping = {n.name: n.pk for n in nodes or () if n.replacing_id is not None}
        secrets = operations.with_replacement_keys(secrets, swapping)
        if secrets.to_dict() != stored:
            save_node_secrets(cluster, secrets.to_dict())
        return operations.keys_as_used(secrets, swapping)

    _session_runner: NodeRunner | None = None

    @contextlib.contextmanager
    def session(self) -> Iterator[NodeRunner]:
        """One runner for the steps of a pass: install and the readiness check run over the
        connections the join opened, instead of a new SSH handshake per node and step."""
        with NodeRunner(self.retry_policy, keep_connections=True) as runner:
            self._session_runner = runner
            try:
                yield runner
            finally:
                self._session_runner = None

    def _runner(self) -> contextlib.AbstractContextManager[NodeRunner]:
        if self._session_runner is not None:
            return contextlib.nullcontext(self._session_runner)
        return NodeRunner(self.retry_policy, keep_connections=True)

    # -- machines ------------------------------------------------------------------

    def boot_status(self, node: Node) -> BootReport:
        target = self.target_for(node)
        if ssh_banner(target.host, target.port):
            return BootReport(BootState.UP, address=f"{target.host}:{target.port}")
        return BootReport(BootState.BOOTING)

    # -- node steps ------------------------------------------------------------------

    def join_network(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        spec = self.spec_for(cluster, nodes)
        secrets = self._secrets(cluster, spec, nodes)
        with self._runner() as runner:
            names = operations.set_names(spec, secrets=secrets, runner=runner, on_output=self._emit)
            record_host_keys(cluster, nodes, names.host_keys)
            if not names.ok:
                return _pending(names)
            joined = operations.join_network(
                spec, secrets=secrets, runner=runner, on_output=self._emit, wait_seconds=self.join_wait_seconds
            )
            if not joined.joined:
                outcome = _pending(joined)
                for a, b in joined.failed_pairs:
                    outcome.pending.update((a, b))
                return outcome
            for step in (operations.setup_shared, operations.sync_volume_in):
                result = step(spec, runner=runner, on_output=self._emit)
                if not result.ok:
                    return _pending(result)
        return StepOutcome.done()

    def install_software(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        # Install on `nodes`; every other live node already runs the software and is only
        # reconfigured with the new node list (a worker was added): nothing that runs jobs
        # is reinstalled or restarted.
        spec = self.spec_for(cluster, self._live_nodes(cluster, nodes))
        secrets = self._secrets(cluster, spec)
        with self._runner() as runner:
            result = operations.install_software(
                spec, secrets=secrets, runner=runner, on_output=self._emit, only={n.name for n in nodes}
            )
        return _failed(result, cluster.software)

    def check_ready(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        """Readiness of `nodes` (the head asks the software about them); the cluster's other
        live nodes may be busy running jobs."""
        spec = self.spec_for(cluster, self._live_nodes(cluster, nodes))
        asked = {n.name for n in nodes}
        with self._runner() as runner:
            result = operations.check_ready(spec, runner=runner, on_output=self._emit, accept=asked)
        outcome = StepOutcome()
        for name, readiness in result.readiness.items():
            if name not in asked:
                continue
            if name in result.rejected:
                outcome.failed[name] = result.rejected[name]
            elif not readiness.ready:
                outcome.pending.add(name)
                self._emit(name, "check_ready", f"not ready yet: {readiness.state}")
        return outcome

    def drain(self, cluster: Cluster, nodes: list[Node], node: Node, *, resume: bool = False) -> list[str] | None:
        spec = self.spec_for(cluster, nodes)
        with self._runner() as runner:
            result, jobs = operations.drain(spec, node.name, runner=runner, on_output=self._emit, resume=resume)
        return jobs if result.ok else None

    def check_health(self, cluster: Cluster, nodes: list[Node]) -> dict[str, NodeHealthReport] | None:
        """health.sh on `nodes` (the head among them), over this process's kept connections."""
        if not any(node.index == 0 for node in nodes):
            return None  # the head answers for the software: no round without it
        spec = self.spec_for(cluster, nodes)
        result = health_node.check_health(spec, runner=HEALTH_RUNNERS.get(cluster.pk), stopped=self.stopped_machines(nodes))
        return {name: NodeHealthReport(verdict.health, verdict.detail) for name, verdict in result.health.items()}

    def stopped_machines(self, nodes: list[Node]) -> dict[str, str]:
        """The nodes whose machine this provider knows has stopped (it does not ask them over
        SSH), each with why in the customer's words. A driver that cannot tell knows of none."""
        return {}

    def collect_metrics(self, cluster: Cluster, nodes: list[Node]) -> MetricsRound | None:
        """metrics.sh on `nodes`, over the connections the health rounds keep (no new session setup)."""
        return collect_metrics(self.spec_for(cluster, nodes), runner=HEALTH_RUNNERS.get(cluster.pk))

    def stop(self, cluster: Cluster, nodes: list[Node]) -> None:
        HEALTH_RUNNERS.forget(cluster.pk)
        # A machine being swapped in is stopped in a spec of its own (it stands in its old
        # node's place there); the nodes in service, the old one included, in theirs.
        try:
            for group in ([n for n in nodes if n.replacing_id is None], [n for n in nodes if n.replacing_id is not None]):
                self._stop(cluster, group)
        finally:
            # The machines are given back next: no connection of this pass may hold one (a
            # live session keeps a local machine's namespace busy while it is torn down).
            if self._session_runner is not None:
                self._session_runner.close()

    def _stop(self, cluster: Cluster, nodes: list[Node]) -> None:
        if not nodes:
            return
        # A spec starts at the head, so build it from every live node even when only a
        # worker is being given back, and stop just the nodes asked for.
        spec = self.spec_for(cluster, self._live_nodes(cluster, nodes))
        stopping = {node.name for node in nodes}
        with self._runner() as runner:
            synced: VolumeSync | VolumeNotSynced | None = None
            if spec.volume_source and spec.head.name in stopping:
                try:
                    synced = self._sync_out(spec, runner, failed="The volume was not synced back")
                except VolumeNotSynced as error:
                    synced = error
            operations.stop(spec, runner=runner, on_output=self._emit, only=stopping)
        if isinstance(synced, VolumeNotSynced):
            # The machines stop all the same; the customer reads why the volume kept its old data.
            raise synced
        if synced is not None:
            record_volume_synced(cluster, synced, at_terminate=True)

    def sync_volume(self, cluster: Cluster, nodes: list[Node]) -> VolumeSync:
        spec = self.spec_for(cluster, self._live_nodes(cluster, nodes))
        if not spec.volume_source:
            raise VolumeNotSynced("No volume is attached to this cluster.")
        with self._runner() as runner:
            return self._sync_out(spec, runner, failed="The volume was not saved")

    def _sync_out(self, spec: ClusterSpec, runner: NodeRunner, *, failed: str) -> VolumeSync:
        started = time.monotonic()
        synced = operations.sync_volume_out(spec, runner=runner, on_output=self._emit)
        head = synced.results.get(spec.head.name)
        if not synced.ok:
            said = head.stderr.strip().splitlines()[-1].split("error: ", 1)[-1] if head and head.stderr.strip() else ""
            raise VolumeNotSynced(f"{failed}{': ' + said if said else ''}.")
        return VolumeSync(operations.synced_bytes(synced, spec.head.name), time.monotonic() - started)

    def measures_with_nccl(self, cluster: Cluster) -> bool:
        """Machines with GPUs run nccl-tests' all_reduce_perf (when every node has it)."""
        return not self.sandbox and cluster.machine_type.gpus_per_machine > 0

    def network_test(self, cluster: Cluster, nodes: list[Node], report: NetworkTestReport) -> NetworkTestResult:
        spec = self.spec_for(cluster, nodes)
        with self._runner() as runner:
            return network_test_node.network_test(
                spec, runner=runner, report=report, prefer_nccl=self.measures_with_nccl(cluster)
            )

    @staticmethod
    def _live_nodes(cluster: Cluster, nodes: list[Node]) -> list[Node]:
        """The cluster's nodes in service, with a machine of `nodes` that is being swapped in
        standing in the place of the node it replaces (it takes that node's name and address)."""
        swapping = {n.replacing_id: n for n in nodes if n.replacing_id is not None}
        live = [
            swapping.get(n.pk, n) for n in cluster.nodes.select_related("host").all()
            if n.released_at is None and n.replacing_id is None
        ]
        return live or list(nodes)


def _pending(result: StepResult) -> StepOutcome:
    """Nodes that did not manage a step yet: looked at again until the cluster's deadline."""
    return StepOutcome(pending={name for name, r in result.results.items() if not r.ok})


def _failed(result: StepResult, software: str) -> StepOutcome:
    """Each node that failed, in the customer's words; the script's own output (steps, paths,
    exit codes) stays in the node's log."""
    outcome = StepOutcome()
    for name, node_result in result.results.items():
        if not node_result.ok:
            outcome.failed[name] = install_failure(software, node_result)
    return outcome


def install_failure(software: str, node_result: NodeResult) -> str:
    name = Software(software).label
    if node_result.unreachable:
        return f"{node_result.name} did not answer over SSH during the {name} install."
    if node_result.error.startswith("not run"):
        return f"Not started on {node_result.name}: the {name} install failed on node-0 (the head) first."
    if node_result.exit_code is None:
        return f"The connection to {node_result.name} broke during the {name} install."
    return f"The {name} install failed on {node_result.name}; its log has the details."
