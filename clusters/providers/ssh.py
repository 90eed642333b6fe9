"""`ssh`: a pool of real machines an operator brought (bring-your-own bare metal).

Each host in the inventory carries its address, port, user and the path of the operator's
private key (`ssh_key_ref`). Machines are already on: "booting" is waiting until SSH
answers. The node scripts run against the real root of each machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clusters.nodeops.targets import NodeTarget
from clusters.providers.fabric import FabricProvider

if TYPE_CHECKING:
    from clusters.models import Node


class SSHPoolProvider(FabricProvider):
    name = "ssh"
    sandbox = False

    def target_for(self, node: Node) -> NodeTarget:
        host = node.host
        return NodeTarget(
            name=node.name, index=node.index, host=host.address, port=host.port, user=host.ssh_user or "root",
            key_filename=host.ssh_key_ref or None, root="", private_ip=node.private_ip,
        )

    def boot(self, node: Node) -> None:
        self._emit(node.name, "boot", f"waiting for SSH on {node.host.address}:{node.host.port}")
