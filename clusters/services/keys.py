"""The machines' keys: the cluster's sealed node secrets (WireGuard keys, the munge key) and
the SSH host key each machine presented."""

from __future__ import annotations

from clusters.models import Cluster, Node
from config.sealing import seal


def save_node_secrets(cluster: Cluster, secrets: dict) -> None:
    sealed = seal(secrets)
    Cluster.objects.filter(pk=cluster.pk).update(node_secrets=sealed)
    cluster.node_secrets = sealed


def record_host_keys(cluster: Cluster, nodes: list[Node], keys: dict[str, str]) -> None:
    """The SSH host key each machine presented (set_names): what the customer's known_hosts
    holds for its node. `nodes` are the machines the keys were read from, under the node names
    they ran as (a machine being swapped in runs as the node it replaces)."""
    for node in nodes:
        key = keys.get(node.name, "")
        if key and key != node.host_key:
            Node.objects.filter(pk=node.pk).update(host_key=key)
            node.host_key = key
