from __future__ import annotations

import pytest

from clusters.nodeops.targets import ClusterSpec, NodeTarget, node_name, private_ip


def target(index: int) -> NodeTarget:
    return NodeTarget(node_name(index), index, "127.0.0.1", 22, "root", None, "/tmp/x", private_ip(index))


def spec(*indexes: int) -> ClusterSpec:
    return ClusterSpec("c", "none", "vm", 8, tuple(target(i) for i in indexes), sandbox=True)


def test_a_released_worker_may_leave_a_gap():
    assert [n.name for n in spec(0, 1, 3).nodes] == ["node-0", "node-1", "node-3"]


@pytest.mark.parametrize("indexes", [(1, 2), (0, 2, 1), (0, 0)])
def test_the_head_comes_first_and_indexes_increase(indexes):
    with pytest.raises(ValueError):
        spec(*indexes)
