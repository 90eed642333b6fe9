"""The provider interface: how the control plane asks operators' machines to do things.

Every call is idempotent and takes model instances that the lifecycle has just reloaded.
Long steps (join, install, readiness) answer with a StepOutcome: nodes still pending are
looked at again on the next pass, failed nodes carry a message a customer can act on.
"""

from __future__ import annotations

import abc
import contextlib
import datetime as dt
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clusters.image_facts import ImageFacts
    from clusters.models import Cluster, Node
    from clusters.network_test.node import NetworkTestReport, NetworkTestResult
    from clusters.nodeops.metrics import MetricsRound
    from offers.models import MachineType

log = logging.getLogger(__name__)


class BootState(enum.Enum):
    BOOTING = "booting"
    UP = "up"
    FAILED = "failed"


@dataclass(frozen=True)
class BootReport:
    state: BootState
    address: str = ""
    detail: str = ""


@dataclass
class StepOutcome:
    pending: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.pending and not self.failed

    @classmethod
    def done(cls) -> StepOutcome:
        return cls()


@dataclass(frozen=True)
class NodeHealthReport:
    health: str  # a clusters.models.NodeHealth value
    detail: str = ""


# A provider's answer to `news_at` when the machines waited on will have no news of their
# own (a machine that never joins): the lifecycle looks at the cluster's deadline instead.
NO_NEWS = dt.datetime.max.replace(tzinfo=dt.UTC)


def boot_due(node: Node) -> dt.datetime | None:
    """When a machine asked to boot is due up: its host's boot time after the request."""
    if node.boot_requested_at is None:
        return None
    from offers import lab  # models: not at import (`python -m clusters.providers.local.images` runs without Django)

    return node.boot_requested_at + dt.timedelta(seconds=lab.of(node.host).boot_seconds)


# (node name, step, output) — lets a provider stream each node's progress to the page.
OutputCallback = Callable[[str, str, str], None]


class Provider(abc.ABC):
    name: str = ""
    # Steps whose outcome arrives later (simulated delays) need the reconciler to look again.
    def __init__(self, on_output: OutputCallback | None = None) -> None:
        self.on_output: OutputCallback = on_output or (lambda node, step, text: None)
        # The wipe receipt of every machine this provider released, by host id.
        # None: the machine's host is down; it is released and wiped when the host returns.
        self.wipe_receipts: dict[int, dict[str, Any] | None] = {}

    def images(self, machine_type: MachineType) -> list[ImageFacts] | None:
        """The machine images this driver's machines of `machine_type` can start now, with their
        facts (clusters.images). None: its machines run their operator's own system and start
        no image."""
        return None

    def session(self) -> contextlib.AbstractContextManager[object]:
        """Steps called inside it (one pass of the lifecycle) may share what the provider keeps
        open between calls; it is all given back at its end."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def boot(self, node: Node) -> None:
        """Ask the machine to start. Safe to call again for a machine already booting."""

    def boot_all(self, nodes: list[Node]) -> None:
        """Ask each machine to start (a provider may start them at once)."""
        for node in nodes:
            self.boot(node)

    @abc.abstractmethod
    def boot_status(self, node: Node) -> BootReport:
        ...

    def boot_statuses(self, nodes: list[Node]) -> list[BootReport]:
        """`boot_status` of each node, in order (a provider may ask them at once)."""
        from offers import lab

        lab.load([node.host for node in nodes])
        return [self.boot_status(node) for node in nodes]

    def news_at(self, cluster: Cluster, nodes: list[Node]) -> dt.datetime | None:
        """When the machines a step waits on will next have news (a boot finishing, a join or
        an install settling), as far as this provider's runtime can tell; the lifecycle looks
        again then, not before. None: it cannot tell, and the lifecycle polls
        (CLUSTER_POLL_SECONDS)."""
        return None

    @abc.abstractmethod
    def join_network(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        """Names, private network and shared folder; ok only when every node reaches every other."""

    @abc.abstractmethod
    def install_software(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        ...

    @abc.abstractmethod
    def check_ready(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        ...

    @abc.abstractmethod
    def stop(self, cluster: Cluster, nodes: list[Node]) -> None:
        """Stop the machines (syncing an attached volume back first). Best effort, idempotent."""

    def drain(self, cluster: Cluster, nodes: list[Node], node: Node, *, resume: bool = False) -> list[str] | None:
        """The software gives `node` (one of the live `nodes`) no new work while a machine is
        swapped in for it; what runs keeps running. Returns the jobs still running on it ("id
        name"), or None when this driver cannot tell. `resume`: the swap was given up."""
        return None

    def check_health(self, cluster: Cluster, nodes: list[Node]) -> dict[str, NodeHealthReport] | None:
        """One round of the periodic health check of a ready cluster's `nodes` (clusters.node_health):
        each node's health and why. None: this driver has nothing it could check."""
        return None

    def collect_metrics(self, cluster: Cluster, nodes: list[Node]) -> MetricsRound | None:
        """One metrics round over a ready cluster's `nodes` (metrics.collection): each node's
        reading. None: this driver has no machines to read (it never makes figures up)."""
        return None

    # Whether released machines come back with a wipe receipt (clusters.services.wipe): a
    # machine of such a provider without a clean one stays out of sale.
    gives_wipe_receipts = False

    def release(self, node: Node) -> None:  # noqa: B027 - an optional hook, not abstract
        """Give the machine back to the operator's pool (nothing to do for most drivers)."""

    def release_all(self, nodes: list[Node]) -> None:
        """Give every machine back (a provider may release them at once). One machine's
        error is logged and never keeps the others reserved."""
        for node in nodes:
            try:
                self.release(node)
            except Exception:
                log.exception("releasing node %s failed", node.pk)

    def sync_volume(self, cluster: Cluster, nodes: list[Node]) -> VolumeSync:
        """Copy the head's volume folder into the attached volume while the cluster runs (a
        checkpoint); raises VolumeNotSynced, in the customer's words, when it could not."""
        raise VolumeNotSynced(f"The {self.name} provider has no machines to copy a volume from.")

    def network_test(self, cluster: Cluster, nodes: list[Node], report: NetworkTestReport) -> NetworkTestResult:
        """Measure what the private network carries between `nodes` (clusters.network_test).
        A driver without machines to measure says so; it never makes figures up."""
        from clusters.network_test.node import NetworkTestResult

        return NetworkTestResult("iperf3", error=f"The {self.name} provider has no network to measure.")


class StopNotice(RuntimeError):
    """Something the customer must know about a stop that otherwise went through (its message
    is in their words): the machines stop all the same."""


class VolumeNotSynced(StopNotice):
    """The head's volume folder could not be copied into the volume (its message is in the
    customer's words); the volume keeps its earlier data."""


@dataclass(frozen=True)
class VolumeSync:
    """A copy of the head's volume folder into the volume: how much it held, how long it took."""

    bytes: int | None
    seconds: float
