from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from clusters.nodeops.parsers import (
    expand_hostlist,
    kubernetes_readiness,
    parse_kubectl_nodes,
    parse_ray_status,
    parse_sinfo,
    ray_readiness,
    slurm_readiness,
)

NAMES = ["node-0", "node-1", "node-2", "node-3"]

SINFO_FORMATTED = """\
node-0 idle
node-1 idle
node-2 idle*
node-3 down*
"""

SINFO_DEFAULT_N = """\
NODELIST   NODES PARTITION STATE
node-0         1      gpu* idle
node-0         1     debug idle
node-1         1      gpu* mixed
node-2         1      gpu* drain
node-3         1      gpu* idle~
"""

SINFO_SUMMARY = """\
PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST
gpu*         up   infinite      3   idle node-[0-1,3]
gpu*         up   infinite      1  down* node-2
"""


def test_sinfo_per_node_format_gives_each_node_its_state():
    assert parse_sinfo(SINFO_FORMATTED) == {
        "node-0": "idle",
        "node-1": "idle",
        "node-2": "idle*",
        "node-3": "down*",
    }


def test_only_idle_nodes_without_flags_are_ready_in_slurm():
    readiness = slurm_readiness(SINFO_FORMATTED, NAMES)
    assert [readiness[name].ready for name in NAMES] == [True, True, False, False]
    assert readiness["node-2"].state == "idle*"


def test_default_sinfo_table_is_read_by_its_header():
    states = parse_sinfo(SINFO_DEFAULT_N)
    assert states == {"node-0": "idle", "node-1": "mixed", "node-2": "drain", "node-3": "idle~"}
    assert [node.ready for node in slurm_readiness(SINFO_DEFAULT_N, NAMES).values()] == [True, False, False, False]


def test_partition_summary_hostlists_are_expanded():
    readiness = slurm_readiness(SINFO_SUMMARY, NAMES)
    assert {name for name, node in readiness.items() if node.ready} == {"node-0", "node-1", "node-3"}


def test_a_node_missing_from_sinfo_is_not_ready():
    readiness = slurm_readiness("node-0 idle\n", ["node-0", "node-1"])
    assert readiness["node-1"].ready is False
    assert readiness["node-1"].state == "not in sinfo"


def test_hostlists_expand_ranges_lists_and_zero_padding():
    assert expand_hostlist("node-[0-2,5],login") == ["node-0", "node-1", "node-2", "node-5", "login"]
    assert expand_hostlist("gpu[08-10]") == ["gpu08", "gpu09", "gpu10"]
    assert expand_hostlist("node-7") == ["node-7"]


@given(st.sets(st.integers(min_value=0, max_value=63), min_size=1))
def test_any_set_of_nodes_written_as_a_hostlist_expands_back(indexes):
    ordered = sorted(indexes)
    # Write runs as ranges the way Slurm does: node-[0-3,7,9-10]
    runs, start = [], ordered[0]
    for previous, current in zip(ordered, ordered[1:] + [None], strict=True):
        if current != previous + 1 if current is not None else True:
            runs.append(f"{start}-{previous}" if start != previous else f"{start}")
            start = current
    assert expand_hostlist(f"node-[{','.join(runs)}]") == [f"node-{i}" for i in ordered]


def kube_node(name, ready="True", gpus="8", unschedulable=False) -> dict[str, Any]:
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"podCIDR": "10.244.0.0/24"},
        "status": {
            "allocatable": {"cpu": "31800m", "memory": "257285400Ki", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "263680408Ki", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
                {"type": "Ready", "status": ready, "reason": "KubeletReady"},
            ],
            "nodeInfo": {"kubeletVersion": "v1.30.4"},
        },
    }
    if gpus is not None:
        node["status"]["allocatable"]["nvidia.com/gpu"] = gpus
        node["status"]["capacity"]["nvidia.com/gpu"] = gpus
    if unschedulable:
        node["spec"]["unschedulable"] = True
    return node


def kube_list(*nodes):
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(nodes), "metadata": {"resourceVersion": ""}})


def test_kubernetes_nodes_need_ready_and_their_gpus_allocatable():
    text = kube_list(
        kube_node("node-0"),
        kube_node("node-1", ready="False"),
        kube_node("node-2", gpus=None),  # device plugin not running yet
        kube_node("node-3", ready="Unknown"),
    )
    readiness = kubernetes_readiness(text, NAMES, gpus_per_node=8)
    assert [readiness[name].ready for name in NAMES] == [True, False, False, False]
    assert readiness["node-2"].state == "Ready, 0/8 GPUs allocatable"


def test_a_node_that_never_registered_is_not_ready_in_kubernetes():
    readiness = kubernetes_readiness(kube_list(kube_node("node-0")), ["node-0", "node-1"], gpus_per_node=8)
    assert readiness["node-1"].state == "not registered"


def test_a_cordoned_node_is_not_ready():
    readiness = kubernetes_readiness(kube_list(kube_node("node-0", unschedulable=True)), ["node-0"], 8)
    assert readiness["node-0"].ready is False


def test_a_single_node_document_is_accepted():
    assert parse_kubectl_nodes(json.dumps(kube_node("node-5")))["node-5"].gpus_allocatable == 8


RAY_STATUS = """\
======== Autoscaler status: 2024-08-20 10:11:12.123456 ========
Node status
---------------------------------------------------------------
Active:
 1 node_328da3b1e9273cf946f6ac3dfee9404dacf429566cd0809a7f04f01c
 1 node_ee0c1d4a5a4d4c4f9d6b1e2b7a3a9f0c11d2e3f4a5b6c7d8e9f0a1b2
Idle:
 1 node_0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 1.0/96.0 CPU
 0.0/24.0 GPU
 0B/600.00GiB memory
 0B/180.00GiB object_store_memory

Demands:
 (no resource demands)
"""

RAY_STATUS_OLD = """\
======== Autoscaler status: 2021-03-11 00:08:15.019832 ========
Node status
---------------------------------------------------------------
Healthy:
 2 cpu_4_ondemand
Pending:
 10.0.0.226: cpu_4_ondemand, setting-up
Recent failures:
 10.0.0.157: custom1

Resources
---------------------------------------------------------------

Usage:
 0.0/8.0 CPU
"""


def test_ray_status_counts_active_and_idle_nodes_as_alive():
    status = parse_ray_status(RAY_STATUS)
    assert status.alive == 3
    assert status.pending == [] and status.failures == []
    assert status.active[0] == "node_328da3b1e9273cf946f6ac3dfee9404dacf429566cd0809a7f04f01c"


def test_older_ray_status_with_healthy_counts_and_pending_nodes():
    status = parse_ray_status(RAY_STATUS_OLD)
    assert status.alive == 2
    assert status.pending == ["10.0.0.226: cpu_4_ondemand, setting-up"]
    assert status.failures == ["10.0.0.157: custom1"]


def test_ray_is_ready_only_when_every_node_is_alive():
    assert all(node.ready for node in ray_readiness(RAY_STATUS, ["node-0", "node-1", "node-2"]).values())
    readiness = ray_readiness(RAY_STATUS, NAMES)
    assert not any(node.ready for node in readiness.values())
    assert readiness["node-0"].state == "3/4 nodes alive in ray status"


@given(
    st.lists(st.text(alphabet="0123456789abcdef", min_size=56, max_size=56), max_size=64, unique=True),
    st.lists(st.text(alphabet="0123456789abcdef", min_size=56, max_size=56), max_size=8, unique=True),
)
def test_ray_status_with_any_number_of_active_and_idle_nodes(active, idle):
    lines = ["======== Autoscaler status: 2024-01-01 00:00:00.000000 ========", "Node status", "-" * 63]
    lines += ["Active:"] + ([f" 1 node_{node}" for node in active] or [" (no active nodes)"])
    lines += ["Idle:"] + ([f" 1 node_{node}" for node in idle] or [" (no idle nodes)"])
    lines += ["Pending:", " (no pending nodes)", "Recent failures:", " (no failures)", "", "Resources", "-" * 63]
    lines += ["Usage:", " 0.0/8.0 GPU"]
    status = parse_ray_status("\n".join(lines))
    assert status.alive == len(active) + len(idle)
    assert status.active == [f"node_{node}" for node in active]
