"""In-process provider for tests and fast demos.

Time drives it: a machine is up `lab.of(host).boot_seconds` after it was asked to boot, joined
`lab.of(host).join_seconds` after it was up, installed `lab.of(host).install_seconds` after installing
began. `lab.of(host).fault` makes a machine fail to boot, never join, or fail its install.
SIMULATED_JOIN_WORK_SECONDS makes each join call work that long inside the worker, as a real
join over SSH does, so a pass can be caught (and a worker killed) mid-join.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING

from django.conf import settings
from django.utils import timezone

from clusters.image_facts import ImageFacts
from clusters.models import Node
from clusters.providers.base import NO_NEWS, BootReport, BootState, NodeHealthReport, Provider, StepOutcome, boot_due
from offers import lab
from offers.models import HostFault

if TYPE_CHECKING:
    from clusters.models import Cluster
    from offers.models import MachineType

# What the simulated machines say they start: the images a real host of the product builds
# (Debian 12, its Python, a PyTorch release), fixed. Its machines have no GPUs (offers.models
# .MachineType.gives_gpus), so PyTorch is a CPU build.
SIMULATED_IMAGES = (
    ImageFacts(name="base", os="Debian 12 (bookworm)", python="3.11.2"),
    ImageFacts(name="pytorch", os="Debian 12 (bookworm)", python="3.11.2", pytorch="2.13.0"),
)


def _elapsed(since: dt.datetime | None, seconds: float) -> bool:
    return since is not None and timezone.now() >= since + dt.timedelta(seconds=seconds)


class SimulatedProvider(Provider):
    name = "simulated"

    def images(self, machine_type: MachineType) -> list[ImageFacts]:
        return list(SIMULATED_IMAGES)

    def boot(self, node: Node) -> None:
        self.on_output(node.name, "boot", f"boot requested on {node.host.name}")

    def boot_status(self, node: Node) -> BootReport:
        host = node.host
        if not _elapsed(node.boot_requested_at, lab.of(host).boot_seconds):
            return BootReport(BootState.BOOTING)
        if lab.of(host).fault == HostFault.BOOT_FAILS:
            return BootReport(BootState.FAILED, detail=f"{host.name} did not power on (hardware fault reported)")
        return BootReport(BootState.UP, address=f"sim://{host.name}")

    def news_at(self, cluster: Cluster, nodes: list[Node]) -> dt.datetime | None:
        lab.load([node.host for node in nodes])
        # Time is this provider's runtime: each machine's news is due at a known instant. A
        # machine that never joins has none (the cluster's deadline is looked at instead).
        due = [boot_due(node) for node in nodes if node.state == Node.State.BOOTING]
        due += [node.up_at + dt.timedelta(seconds=lab.of(node.host).join_seconds) for node in nodes
                if node.state == Node.State.UP and node.up_at is not None and lab.of(node.host).fault != HostFault.NEVER_JOINS]
        if any(node.state in (Node.State.JOINED, Node.State.INSTALLING) for node in nodes):
            due += [cluster.status_changed_at + dt.timedelta(seconds=lab.of(node.host).install_seconds) for node in nodes
                    if node.state in (Node.State.JOINED, Node.State.INSTALLING)]
        return min((at for at in due if at is not None), default=NO_NEWS)

    def join_network(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        lab.load([node.host for node in nodes])
        if settings.SIMULATED_JOIN_WORK_SECONDS:
            self.on_output(nodes[0].name, "network", "joining the private network")
            time.sleep(settings.SIMULATED_JOIN_WORK_SECONDS)
        outcome = StepOutcome()
        for node in nodes:
            if lab.of(node.host).fault == HostFault.NEVER_JOINS or not _elapsed(node.up_at, lab.of(node.host).join_seconds):
                outcome.pending.add(node.name)
        for node in nodes:
            if node.name not in outcome.pending:
                self.on_output(node.name, "network", f"{node.name} reaches all {len(nodes) - 1} peers over wg0")
        return outcome

    def install_software(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        lab.load([node.host for node in nodes])
        outcome = StepOutcome()
        for node in nodes:
            if not _elapsed(cluster.status_changed_at, lab.of(node.host).install_seconds):
                outcome.pending.add(node.name)
            elif lab.of(node.host).fault == HostFault.INSTALL_FAILS:
                outcome.failed[node.name] = f"The {cluster.get_software_display()} install failed on {node.name}; its log has the details."
            else:
                self.on_output(node.name, "install", f"{cluster.get_software_display()} installed")
        return outcome

    def check_ready(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        return StepOutcome.done()

    def check_health(self, cluster: Cluster, nodes: list[Node]) -> dict[str, NodeHealthReport]:
        lab.load([node.host for node in nodes])
        # Simulated machines have no daemons to lose: what a host's fault says, nothing more.
        return {
            node.name: NodeHealthReport("network_down", "wg0 is down")
            if lab.of(node.host).fault == HostFault.NEVER_JOINS else NodeHealthReport("healthy", "simulated machine")
            for node in nodes
        }

    def stop(self, cluster: Cluster, nodes: list[Node]) -> None:
        for node in nodes:
            self.on_output(node.name, "stop", "stopped")
