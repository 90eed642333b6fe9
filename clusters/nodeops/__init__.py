"""Node operations: the machine side of the cluster lifecycle, run over SSH with Fabric.

Standalone (no Django): the lifecycle tasks build a `ClusterSpec` and call the steps in
`operations`. See docs/nodeops.md.
"""

from .operations import (
    ClusterSecrets,
    StepResult,
    WireGuardKey,
    check_ready,
    generate_secrets,
    install_software,
    join_network,
    set_names,
    setup_shared,
    stop,
    sync_volume_in,
    sync_volume_out,
    write_fault,
)
from .parsers import NodeReadiness
from .runner import NodeResult, NodeRunner, RetryPolicy
from .targets import ClusterSpec, NodeTarget, make_targets, node_name, private_ip

__all__ = [
    "ClusterSecrets",
    "ClusterSpec",
    "NodeReadiness",
    "NodeResult",
    "NodeRunner",
    "NodeTarget",
    "RetryPolicy",
    "StepResult",
    "WireGuardKey",
    "check_ready",
    "generate_secrets",
    "install_software",
    "join_network",
    "make_targets",
    "node_name",
    "private_ip",
    "set_names",
    "setup_shared",
    "stop",
    "sync_volume_in",
    "sync_volume_out",
    "write_fault",
]
