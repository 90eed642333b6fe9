"""A node reports its own size (clusters.providers.local.lxcfs): `free`, /proc/meminfo,
/proc/cpuinfo, `nproc`, `uptime` and the load inside a real node are the node's, through this
computer's LXCFS, and a dead LXCFS is brought back with every running node reading again."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clusters.providers.local import lxcfs, realnodes
from clusters.providers.local.provider import HostRuntimeProvider
from tests.providers.test_isolation import Run, sh

CAN, WHY = realnodes.capability()
pytestmark = [
    pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}"),
    pytest.mark.skipif(not lxcfs.available(), reason="lxcfs is not installed (bin/host-setup installs it)"),
]


@pytest.fixture
def run(tmp_path):
    nodes = Run(tmp_path / "run")
    yield nodes
    nodes.close()


def _mem_total_kb(text: str) -> int:
    return int(re.search(r"^MemTotal:\s+(\d+) kB", text, re.MULTILINE).group(1))  # type: ignore[union-attr]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a node of one CPU looks like this computer here")
def test_free_meminfo_nproc_and_cpuinfo_in_a_node_show_its_limits(run):
    node = run.boot("a", limits=realnodes.NodeLimits(memory_mb=1024, cpus=1))

    assert _mem_total_kb(sh(node, "cat /proc/meminfo").stdout) == 1024 * 1024
    free = sh(node, "free -m").stdout.splitlines()
    assert free[1].split()[:2] == ["Mem:", "1024"]
    assert sh(node, "nproc").stdout.strip() == "1"
    assert sh(node, "grep -c ^processor /proc/cpuinfo").stdout.strip() == "1"
    # What PyTorch's and Ray's defaults read: the CPUs it may run on, and the CPUs online.
    assert sh(node, "python3 -c 'import os; print(len(os.sched_getaffinity(0)), os.cpu_count())'").stdout.split() == ["1", "1"]
    # This computer's own figures are unchanged.
    assert _mem_total_kb(open("/proc/meminfo").read()) > 1024 * 1024


def test_uptime_and_load_in_a_node_are_its_own(run):
    started = time.monotonic()
    busy, idle = run.boot("busy"), run.boot("idle")
    booted_for = time.monotonic() - started

    uptime = float(sh(idle, "cat /proc/uptime").stdout.split()[0])
    assert uptime <= booted_for + 5
    assert re.search(r" up [01] min,", sh(idle, "uptime").stdout)
    # The load's process count is the node's own: a handful, not this computer's hundreds.
    processes = len([entry for entry in sh(idle, "ls /proc").stdout.split() if entry.isdigit()])
    running, total = sh(idle, "cat /proc/loadavg").stdout.split()[3].split("/")
    assert int(total) <= processes + 5
    # Two busy loops in one node raise its load, not the other's.
    sh(busy, "for i in 1 2; do setsid timeout 40 sh -c 'while :; do :; done' >/dev/null 2>&1 </dev/null & done")
    deadline = time.monotonic() + 40
    loads: tuple[float, float] = (0.0, 0.0)
    while time.monotonic() < deadline:
        loads = (float(sh(busy, "cat /proc/loadavg").stdout.split()[0]),
                 float(sh(idle, "cat /proc/loadavg").stdout.split()[0]))
        if loads[0] >= loads[1] + 0.3:
            break
        time.sleep(2)
    assert loads[0] >= loads[1] + 0.3, loads
    assert loads[1] < 0.5, loads


def test_a_dead_lxcfs_is_started_again_by_a_health_round_and_running_nodes_read_their_own_figures_again(
        run, settings):
    settings.LOCAL_NODES = "namespaces"
    node = run.boot("a", limits=realnodes.NodeLimits(memory_mb=768))
    assert _mem_total_kb(sh(node, "cat /proc/meminfo").stdout) == 768 * 1024
    pid = lxcfs.pid_of_daemon(realnodes.HOST_REGISTRY)
    if pid is None:
        pytest.skip("the LXCFS running here is not the one the runtime started")

    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while realnodes.lxcfs.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    dead = sh(node, "cat /proc/meminfo")
    assert dead.returncode != 0 and "Transport endpoint is not connected" in dead.stderr

    # A health round of the runtime (it asks which machines stopped before asking the others).
    provider = HostRuntimeProvider()
    assert provider.stopped_machines([]) == {}
    assert lxcfs.pid_of_daemon(realnodes.HOST_REGISTRY) not in (None, pid)
    assert _mem_total_kb(sh(node, "cat /proc/meminfo").stdout) == 768 * 1024
    assert sh(node, "free -m").stdout.splitlines()[1].split()[:2] == ["Mem:", "768"]
    assert float(sh(node, "cat /proc/uptime").stdout.split()[0]) < 300
    # Nothing is bound twice: one layer over each file, as at boot.
    mounts = sh(node, "grep -c ' /proc/meminfo ' /proc/self/mountinfo").stdout.strip()
    assert mounts == "1"
    # A node booted now gets the new daemon's files too.
    second = run.boot("b", limits=realnodes.NodeLimits(memory_mb=512))
    assert _mem_total_kb(sh(second, "cat /proc/meminfo").stdout) == 512 * 1024
    assert realnodes.keep_lxcfs() is False


def test_a_mount_namespace_of_its_own_runs_an_lxcfs_of_its_own_beside_this_computers(run):
    """A lab host is a mount namespace of this computer, with its own /var/lib/lxcfs: its runtime
    starts a daemon of its own there, and neither keeps the other from starting (one pid file
    for both did: its lock was the first daemon's)."""
    assert realnodes.keep_lxcfs() is not None
    registry = realnodes.HOST_REGISTRY
    # What a lab host's runtime does on its first boot: in its own mount namespace, where this
    # computer's daemon's mount is not (the host came up before it), it starts one.
    started = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-I", "-c", textwrap.dedent(f"""
            import subprocess, sys
            sys.path.insert(0, {str(Path(lxcfs.__file__).parent)!r})
            import lxcfs
            subprocess.run(["umount", "-l", str(lxcfs.MOUNT)], check=True)
            assert not lxcfs.alive()
            print(lxcfs.ensure(__import__("pathlib").Path({str(registry)!r})), lxcfs.pid_of_daemon(
                __import__("pathlib").Path({str(registry)!r})))
        """)],
        capture_output=True, text=True, timeout=60,
    )
    assert started.returncode == 0, started.stderr
    answer, other = started.stdout.split()
    assert answer == "True"
    try:
        ours = lxcfs.pid_of_daemon(registry)
        assert ours is not None and ours != int(other)
        # This computer's daemon dies; the runtime starts it again while the other still runs.
        os.kill(ours, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while lxcfs.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert realnodes.keep_lxcfs() is True
        assert lxcfs.pid_of_daemon(registry) not in (None, ours, int(other))
        node = run.boot("a", limits=realnodes.NodeLimits(memory_mb=640))
        assert _mem_total_kb(sh(node, "cat /proc/meminfo").stdout) == 640 * 1024
    finally:
        os.kill(int(other), signal.SIGKILL)
