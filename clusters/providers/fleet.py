"""Machines on fleet hosts (offers.PhysicalHost): each slot's machine is booted, probed,
entered and released by the host runtime installed on its host, over SSH
(offers.hostruntime). The `local` provider hands every slot of a fleet host here;
the runtime and the request it boots from are the same as for this computer's machines.

What the control plane keeps of a booted machine (its underlay address, its customer's
address, its host key, or why it did not boot) is a record under the machines directory,
`fleet/<slot>.json`: node operations read it instead of asking the host each time.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusters.node_health.node import MACHINE_STOPPED
from clusters.nodeops.targets import NodeTarget
from clusters.providers.base import BootReport, BootState
from clusters.providers.local import realnodes
from clusters.services.hosts import mark_host_down
from offers.fleet import HOST_ANSWER_SECONDS, runtime_for
from offers.hostruntime import RuntimeFailed

if TYPE_CHECKING:
    from clusters.models import Node
    from offers.models import Host, PhysicalHost

log = logging.getLogger(__name__)
# The node's health detail while its host is down (customer words: no host name).
HOST_STOPPED = "{node}'s host stopped answering"


class MachineRecords:
    """Slots a host runtime boots machines on: `records` is where the control plane keeps
    what each booted machine answered, `client_key` its key to the machines."""

    def __init__(self, records: Path, client_key: Path) -> None:
        self.records = records
        self.client_key = client_key

    def _record_path(self, host: Host) -> Path:
        return self.records / f"{host.name}.json"

    def record(self, host: Host) -> dict[str, Any] | None:
        try:
            return json.loads(self._record_path(host).read_text())
        except (OSError, ValueError):
            return None

    def _save(self, host: Host, record: dict[str, Any]) -> None:
        self.records.mkdir(parents=True, exist_ok=True)
        path = self._record_path(host)
        path.with_suffix(".tmp").write_text(json.dumps(record))
        path.with_suffix(".tmp").replace(path)


class FleetMachines(MachineRecords):
    """The slots of fleet hosts, for the `local` provider, each host's runtime reached over SSH."""

    def known_hosts(self, physical: PhysicalHost) -> Path:
        """The host's key as onboarding saw it, for the proxy's ssh (HostKeyAlias: its name)."""
        path = self.records / "known_hosts" / physical.name
        line = f"{physical.name} {physical.host_key}\n"
        if not path.exists() or path.read_text() != line:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(line)
        return path

    @staticmethod
    def customer_address(host: Host) -> str:
        """The slot's own port on its host's address, where the host forwards it to the
        machine's sshd (the runtime's gateway listens there)."""
        assert host.physical_host is not None
        return f"{host.physical_host.address}:{host.port}"

    def target(self, node: Node) -> NodeTarget:
        host = node.host
        physical = host.physical_host
        assert physical is not None
        record = self.record(host) or {}
        return NodeTarget(
            name=node.name, index=node.index, host=record.get("address") or host.name, port=22, user="root",
            key_filename=str(self.client_key), root="", private_ip=node.private_ip,
            proxy_command=runtime_for(physical).proxy_command(host.name, self.known_hosts(physical)),
            site=physical.name, site_endpoint=record.get("endpoint") or "",
        )

    def boot(self, node: Node, request: dict[str, Any]) -> str:
        """Boot the slot's machine on its host; returns the line for the boot log."""
        host = node.host
        physical = host.physical_host
        assert physical is not None
        self._record_path(host).unlink(missing_ok=True)
        # The slot's port twice: its customers' SSH (TCP) and its WireGuard for peers on other
        # hosts (UDP), both forwarded by its host to the machine.
        request = {**request, "gateway": {"host": "0.0.0.0", "port": host.port}, "wireguard_port": host.port}
        try:
            answer = runtime_for(physical).call("boot", request)
        except RuntimeFailed as error:
            log.warning("machine %s did not boot: %s", host.name, error)
            self._save(host, {"running": False, "error": "The machine's host did not answer."})
            return str(error)
        self._save(host, answer)
        if not answer.get("running"):
            log.warning("machine %s did not boot: %s", host.name, answer.get("detail"))
            return str(answer.get("detail") or answer.get("error"))
        return (f"{host.name}: real node on {physical.name} (pid {answer['pid']}), eth0 {answer['address']}, "
                f"sshd reached at {self.customer_address(host)}")

    def boot_status(self, node: Node) -> BootReport:
        host = node.host
        record = self.record(host)
        if record is None:
            return BootReport(BootState.BOOTING)
        if not record.get("running"):
            return BootReport(BootState.FAILED, detail=record.get("error") or "The machine did not start.")
        assert host.physical_host is not None
        try:
            status = runtime_for(host.physical_host).call("status", {"key": host.name, "probe": True})
        except RuntimeFailed as error:
            log.info("machine %s: %s", host.name, error)
            return BootReport(BootState.BOOTING)
        if not status.get("running"):
            return BootReport(BootState.FAILED, detail="The machine stopped while it was starting.")
        # Up once the customer's own path works: through the host's port, to this node's key.
        customer = realnodes.NodeHandle(key=host.name, netns="", veth="", pid=0, address=status["address"],
                                        state_dir="", gateway=self.customer_address(host),
                                        host_key=status.get("host_key", ""))
        if status.get("sshd") and realnodes.gateway_serves(customer):
            return BootReport(BootState.UP, address=customer.gateway)
        return BootReport(BootState.BOOTING)

    def stopped(self, nodes: list[Node]) -> dict[str, str]:
        """Nodes whose machine is not running on a host that answered, and every node of a host
        that did not answer twice in a row: that host is marked down (out of sale)."""
        by_host: dict[int, list[Node]] = {}
        for node in nodes:
            by_host.setdefault(node.host.physical_host_id or 0, []).append(node)
        stopped: dict[str, str] = {}
        for group in by_host.values():
            physical = group[0].host.physical_host
            assert physical is not None
            # A host marked down is not asked again here: its machines are lost to their
            # clusters (unbilled from then on) even if it answers before the beat wipes them.
            answer = None if physical.state == physical.State.DOWN else self._listed(physical)
            if answer is None:
                mark_host_down(physical.pk)
                stopped |= {node.name: HOST_STOPPED.format(node=node.name) for node in group}
                continue
            running = {machine["key"] for machine in answer["machines"] if machine["running"]}
            stopped |= {node.name: MACHINE_STOPPED for node in group if node.host.name not in running}
        return stopped

    @staticmethod
    def _listed(physical: PhysicalHost) -> dict[str, Any] | None:
        """The host runtime's `list`, or None when the host did not answer twice: one slow
        login is no verdict on a host."""
        for attempt in (1, 2):
            try:
                return runtime_for(physical).call("list", timeout=HOST_ANSWER_SECONDS)
            except RuntimeFailed as error:
                log.warning("host %s, attempt %d: %s", physical.name, attempt, error)
        return None

    def release(self, host: Host) -> dict[str, Any] | None:
        """Release the slot's machine on its host; returns its wipe receipt, or None when the
        host is down (its machine is released and wiped when the host returns)."""
        physical = host.physical_host
        assert physical is not None
        if physical.state == physical.State.DOWN:
            return None
        answer = runtime_for(physical).call("release", {"key": host.name})
        self._record_path(host).unlink(missing_ok=True)
        return answer["receipt"]
