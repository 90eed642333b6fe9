"""Machines on this computer, booted, probed, joined and released by this computer's host
runtime (offers.hostruntime.LocalRuntime): the same program and requests as a fleet host's
(clusters.providers.fleet), run as root through one sudo rule while the control plane itself
is not root (docs/nodeops.md, "The control plane holds no root").

What the control plane keeps of a booted machine (its underlay address, its gateway, its host
key, or why it did not boot) is a record under the machines directory, `this-host/<slot>.json`,
as for a fleet slot: node operations read it instead of asking the runtime each time. Node
operations reach a machine through its loopback gateway, as its customer does: nothing of
them needs root either.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusters.node_health.node import MACHINE_STOPPED
from clusters.nodeops.targets import NodeTarget
from clusters.providers.base import BootReport, BootState
from clusters.providers.fleet import MachineRecords
from clusters.providers.local import realnodes
from offers.hostruntime import LocalRuntime, RuntimeFailed

if TYPE_CHECKING:
    from clusters.models import Node
    from offers.models import Host

log = logging.getLogger(__name__)


class ThisHostMachines(MachineRecords):
    """The slots of this computer, booted by its own runtime (`runtime`)."""

    def __init__(self, runtime: LocalRuntime, records: Path, client_key: Path) -> None:
        super().__init__(records, client_key)
        self.runtime = runtime

    def target(self, node: Node) -> NodeTarget:
        record = self.record(node.host) or {}
        gateway = record.get("gateway") if record.get("running") else ""
        if not gateway:
            # A machine that is not running is reached by nothing: the connection fails at once.
            return NodeTarget(name=node.name, index=node.index, host=node.host.name, port=22, user="root",
                              key_filename=str(self.client_key), root="", private_ip=node.private_ip,
                              proxy_command="false")
        host, port = gateway.rsplit(":", 1)
        return NodeTarget(
            name=node.name, index=node.index, host=host, port=int(port), user="root",
            key_filename=str(self.client_key), root="", private_ip=node.private_ip,
            # The other machines send WireGuard to its underlay address, not to its gateway.
            endpoint=record.get("address", ""),
        )

    def boot(self, nodes: list[Node], requests: list[dict[str, Any]]) -> list[str]:
        """Boot the slots' machines at once; returns each one's line for the boot log."""
        for node in nodes:
            self._record_path(node.host).unlink(missing_ok=True)
        try:
            answers = self.runtime.call("boot", {"machines": requests})["machines"]
        except RuntimeFailed as error:
            log.warning("machines %s did not boot: %s", ", ".join(n.host.name for n in nodes), error)
            answers = [{"running": False, "error": "The machine did not start.", "detail": str(error)}] * len(nodes)
        lines = []
        for node, answer in zip(nodes, answers, strict=True):
            host = node.host
            self._save(host, answer)
            if not answer.get("running"):
                log.warning("machine %s did not boot: %s", host.name, answer.get("detail"))
                lines.append(str(answer.get("detail") or answer.get("error")))
                continue
            lines.append(f"{host.name}: real node (pid {answer['pid']}), eth0 {answer['address']}, "
                         f"sshd reached at {answer['gateway']}")
        return lines

    def boot_statuses(self, nodes: list[Node]) -> list[BootReport]:
        """Up once the customer's own path works: through the gateway, to the machine's key."""
        try:
            statuses = self.runtime.call("status", {"keys": [n.host.name for n in nodes], "probe": True})["machines"]
        except RuntimeFailed as error:
            log.info("machines' status: %s", error)
            return [BootReport(BootState.BOOTING)] * len(nodes)
        reports = []
        for node, status in zip(nodes, statuses, strict=True):
            record = self.record(node.host)
            if record is not None and not record.get("running"):
                reports.append(BootReport(BootState.FAILED, detail=record.get("error") or "The machine did not start."))
            elif not status.get("running"):
                reports.append(BootReport(BootState.BOOTING) if record is None else
                               BootReport(BootState.FAILED, detail="The machine stopped while it was starting."))
            else:
                self._save(node.host, status)
                customer = realnodes.NodeHandle(key=node.host.name, netns="", veth="", pid=0,
                                                address=status["address"], state_dir="", gateway=status["gateway"],
                                                host_key=status.get("host_key", ""))
                up = status.get("sshd") and realnodes.gateway_serves(customer)
                reports.append(BootReport(BootState.UP, address=status["gateway"]) if up
                               else BootReport(BootState.BOOTING))
        return reports

    def stopped(self, nodes: list[Node]) -> dict[str, str]:
        """Nodes whose machine is not running (its root can end its PID 1). LXCFS, which serves
        every machine's /proc figures, is started again by the same call when it died."""
        listed = self.runtime.call("list", {"tend": True})["machines"]
        running = {machine["key"] for machine in listed if machine["running"]}
        return {node.name: MACHINE_STOPPED for node in nodes if node.host.name not in running}

    def join(self, nodes: list[Node], *, shared_from: Node | None) -> None:
        """This computer's part of the join: every machine's neighbours pinned, and with
        `shared_from` (the head) its /shared lent to each worker (the runtime's `join`)."""
        request: dict[str, Any] = {"keys": [node.host.name for node in nodes]}
        if shared_from is not None:
            request["shared_from"] = shared_from.host.name
        for key, why in self.runtime.call("join", request)["not_lent"].items():
            log.warning("machine %s: the head's /shared could not be mounted from this computer: %s", key, why)

    def write_files(self, files: dict[Node, dict[str, str | None]]) -> None:
        """Write (None: remove) files in each node's machine as its root would, all at once."""
        if files:
            self.runtime.call("files", {"machines": [{"key": node.host.name, "files": written}
                                                     for node, written in files.items()]}, timeout=120)

    def release(self, hosts: list[Host]) -> dict[int, dict[str, Any]]:
        """Release the slots' machines at once; returns each one's wipe receipt, by host id."""
        answers = self.runtime.call("release", {"keys": [host.name for host in hosts]})["machines"]
        for host in hosts:
            self._record_path(host).unlink(missing_ok=True)
        return {host.pk: answer["receipt"] for host, answer in zip(hosts, answers, strict=True)}
