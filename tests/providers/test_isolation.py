"""Attacks on real nodes from the inside, as a customer with root on a node would make them.

Every node here is a real one (clusters.providers.local.realnodes): the commands run in the node as its
root, in its namespaces and its cgroup (`run_in`), and what they reach is checked from this
computer's side. Skipped where this computer cannot run namespaces.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusters.providers.local import realnodes
from clusters.providers.local.sandbox import write_ed25519_keypair

CAN, WHY = realnodes.capability()
pytestmark = pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}")


class Run:
    """Nodes of one run of the product (one machines directory), released whatever happens."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.public = write_ed25519_keypair(path / "client", "isolation-test")
        self.booted: list[Path] = []

    def boot(self, name: str, *, segment: str = "cluster-a", limits: realnodes.NodeLimits | None = None,
             binds: dict[str, str] | None = None, files: dict[str, str] | None = None) -> realnodes.NodeHandle:
        state = self.path / name
        self.booted.append(state)
        return realnodes.boot(self.path, state, key=name, hostname=name, authorized_keys=self.public + "\n",
                              segment=segment, limits=limits, binds=binds, files=files)

    def release(self, name: str) -> None:
        realnodes.release(self.path, self.path / name)

    def close(self) -> None:
        for state in self.booted:
            realnodes.release(self.path, state)
        realnodes.Underlay(self.path).teardown()
        assert realnodes.leftovers(self.path) == []


@pytest.fixture
def run(tmp_path):
    nodes = Run(tmp_path / "run")
    yield nodes
    nodes.close()


def sh(handle: realnodes.NodeHandle, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return realnodes.run_in(handle, ["bash", "-c", command], timeout=timeout)


def test_root_in_a_node_is_an_unprivileged_uid_of_its_own_on_this_computer(run):
    first, second = run.boot("a"), run.boot("b", segment="cluster-b")

    for handle in (first, second):
        assert sh(handle, "id -u").stdout.strip() == "0"
        # As this computer sees the node's root: its uid range's first uid, not 0.
        uid_line = next(line for line in Path(f"/proc/{handle.pid}/status").read_text().splitlines()
                        if line.startswith("Uid:"))
        assert set(uid_line.split()[1:]) == {str(handle.uid_base)}
        assert handle.uid_base >= realnodes.FIRST_UID
        assert sh(handle, "cat /proc/self/uid_map").stdout.split() == ["0", str(handle.uid_base), "65536"]
    assert first.uid_base != second.uid_base, "every node has a range of its own"
    # Root of the node holds no capability over this computer: it cannot load a module, set the
    # clock, or reach a device it was not given.
    assert sh(first, "date -s '2001-01-01'").returncode != 0
    assert sh(first, "cat /dev/vda >/dev/null 2>&1 || ls /dev/vda").returncode != 0
    assert sh(first, "ls /dev").stdout.split() == sorted(
        ["fd", "full", "fuse", "net", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty",
         "urandom", "zero"])


def test_nothing_of_this_computers_tree_is_reachable_from_a_node_mount_tricks_included(run, tmp_path):
    # A world-readable file of this computer, and a secret the way the control plane keeps its key.
    marker = f"runcrate-host-{random.getrandbits(40):010x}"
    public_file = Path("/tmp") / marker
    public_file.write_text("host\n")
    public_file.chmod(0o644)
    secret = run.path / "client"  # the control plane's private key of this run
    try:
        node = run.boot("a")
        # Its cgroup files show its own limits, and it cannot raise them.
        assert sh(node, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes").stdout.strip() == str(realnodes.NodeLimits().cgroup_memory_mb << 20)
        assert sh(node, "echo -1 >/sys/fs/cgroup/memory/memory.limit_in_bytes").returncode != 0
        attempts = [
            f"cat {public_file}", f"cat {secret}", f"ls {run.path}", f"ls {tmp_path}", "ls /work /home/*/",
            "ls /var/lib/postgresql /var/run/postgresql /run/redis",
            # Unmount what the node was given, to see what lies beneath.
            f"umount -l /usr 2>/dev/null; umount -l /sys 2>/dev/null; cat {public_file}",
            # Bind the root elsewhere, mount a fresh proc and look at PID 1's root.
            f"mkdir -p /mnt/x && mount --bind / /mnt/x 2>/dev/null; cat /mnt/x{public_file}",
            f"mkdir -p /mnt/p && mount -t proc proc /mnt/p 2>/dev/null; cat /mnt/p/1/root{public_file}",
            # The classic chroot escape.
            "python3 -c \"import os; os.makedirs('/tmp/j', exist_ok=True); os.chroot('/tmp/j'); "
            f"[os.chdir('..') for _ in range(64)]; os.chroot('.'); print(open('{public_file}').read())\"",
            # Another filesystem type that would show the host's disk.
            f"mkdir -p /mnt/d && mount /dev/vda /mnt/d 2>/dev/null; cat /mnt/d{public_file}",
        ]
        for command in attempts:
            result = sh(node, command)
            assert "host" not in result.stdout and "PRIVATE KEY" not in result.stdout, command
        found = sh(node, f"find / -xdev -name {marker} 2>/dev/null; find /proc/1/root/ -maxdepth 1").stdout
        assert marker not in found
        # The host's shadow file and host keys are not the node's: the kernel would not let the
        # node's root copy them.
        assert sh(node, "grep -c '\\$' /etc/shadow").stdout.strip() == "0"
        assert sh(node, "ls /etc/ssh/ssh_host_rsa_key /etc/ssh/ssh_host_ecdsa_key").returncode != 0
        assert sh(node, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.strip() == node.host_key
    finally:
        public_file.unlink()


def test_a_node_reads_none_of_the_control_planes_environment_or_paths(run, monkeypatch):
    # The control plane's process holds its secrets in its environment (SECRET_KEY, the
    # database's password, Stripe's key): what it starts a node with must carry none of them,
    # and no process of the node may name where this computer keeps the node.
    secret = f"runcrate-secret-{random.getrandbits(40):010x}"
    monkeypatch.setenv("RUNCRATE_TEST_SECRET", secret)
    node = run.boot("a")
    seen = sh(node, "for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; readlink $p/cwd $p/exe; echo; done "
                    "2>/dev/null | tr '\\0' '\\n'").stdout
    assert "sshd" in seen and "runcrate-node" in seen, "every process of the node was read"
    assert secret not in seen
    for host_path in (run.path, node.state_dir, realnodes.HOST_REGISTRY):
        assert str(host_path) not in seen, host_path
    # PID 1 is still recognised as the node's own, so release finds and ends it.
    run.release("a")
    assert not Path(f"/proc/{node.pid}").exists()


def test_nodes_of_different_clusters_cannot_exchange_a_packet(run):
    a0, a1 = run.boot("a0"), run.boot("a1")
    b0 = run.boot("b0", segment="cluster-b")

    # The same cluster's machines reach each other on the underlay (WireGuard's path) ...
    assert sh(a0, f"ping -c1 -W2 {a1.address}").returncode == 0
    # ... another cluster's are on no segment of theirs: no ping, no TCP, no ARP answer.
    assert sh(a0, f"ping -c2 -W1 {b0.address}").returncode != 0
    assert sh(b0, f"ping -c2 -W1 {a0.address}").returncode != 0
    assert sh(a0, f"timeout 3 bash -c 'exec 3<>/dev/tcp/{b0.address}/22'").returncode != 0
    assert sh(a0, f"ip neigh show {b0.address}").stdout.find("lladdr") == -1
    # A node has no interface of this computer's, and its loopback is its own: this computer's
    # Redis and PostgreSQL on 127.0.0.1 are not there.
    assert sorted(sh(a0, "ls /sys/class/net").stdout.split()) == ["eth0", "lo"]
    for port in (6379, 5432):
        assert sh(a0, f"timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'").returncode != 0


def test_a_fork_loop_a_memory_hog_and_a_full_disk_stop_at_the_nodes_limits(run):
    small = realnodes.NodeLimits(memory_mb=160, pids=96, disk_mb=64, shared_mb=32)
    hog, neighbour = run.boot("hog", limits=small), run.boot("neighbour", segment="cluster-b")

    # Memory: the allocation is killed inside the node's cgroup; the node itself lives on.
    eaten = sh(hog, "python3 -c 'b = bytearray(400 << 20); print(len(b))'")
    assert eaten.returncode in (137, -9) and eaten.stdout == ""
    oom = Path(f"/sys/fs/cgroup/memory/runcrate/{hog.cgroup}/memory.oom_control").read_text().split()
    assert int(oom[oom.index("oom_kill") + 1]) >= 1, "killed by the node's own cgroup"
    assert realnodes.sshd_answers(hog)

    # Processes: a fork loop hits the node's own count, not this computer's.
    fork_loop = (
        "import os, time\n"
        "forked = 0\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(5)\n"
        "            os._exit(0)\n"
        "    except OSError:\n"
        "        break\n"
        "    forked += 1\n"
        "print(forked, flush=True)\n"
        "os._exit(0)\n"
    )
    forked = realnodes.run_in(hog, ["python3", "-c", fork_loop], timeout=60)
    assert 0 < int(forked.stdout) < small.pids, forked.stderr
    counted = Path(f"/sys/fs/cgroup/pids/runcrate/{hog.cgroup}/pids.max").read_text().strip()
    assert counted == str(small.pids)
    assert subprocess.run(["true"]).returncode == 0, "this computer still starts processes"
    assert realnodes.sshd_answers(neighbour), "another cluster's node still answers"
    time.sleep(6)  # the loop's children end on their own

    # Disk: the node's root and /shared have the node's sizes, and fill up at them.
    sizes = sh(hog, "df -m --output=size / /shared | tail -2").stdout.split()
    assert sizes == ["64", "32"]
    full = sh(hog, "dd if=/dev/zero of=/srv/fill bs=1M count=200 2>&1")
    assert "No space left on device" in full.stdout
    assert "No space left on device" in sh(hog, "dd if=/dev/zero of=/shared/fill bs=1M count=100 2>&1").stdout
    assert sh(neighbour, "df -m --output=avail / | tail -1").stdout.strip() not in ("0", "")


def test_everything_a_node_wrote_is_gone_after_release_and_never_seen_by_another_cluster(run):
    marker = f"runcrate-wrote-{random.getrandbits(40):010x}"
    node, other = run.boot("a"), run.boot("other", segment="cluster-b")
    places = [f"/{marker}", f"/srv/{marker}", f"/data-1/{marker}", f"/var/{marker}", f"/etc/{marker}",
              f"/root/{marker}", f"/usr/local/{marker}", f"/opt/{marker}", f"/shared/{marker}", f"/tmp/{marker}",
              f"/home/{marker}", f"/dev/shm/{marker}"]
    wrote = sh(node, "mkdir -p /data-1 && " + " && ".join(f"echo secret >{place}" for place in places))
    assert wrote.returncode == 0, wrote.stderr
    for place in places:
        assert sh(other, f"test -e {place}").returncode == 1, place
        assert not Path(place).exists(), place
    root = realnodes._root_dir(node.cgroup)

    run.release("a")
    again = run.boot("a")
    assert sh(again, " || ".join(f"test -e {place}" for place in places)).returncode == 1
    # Nothing of it is anywhere on this computer's disk either.
    for tree in (run.path, realnodes.HOST_REGISTRY):
        found = subprocess.run(["find", str(tree), "-name", marker], capture_output=True, text=True).stdout
        assert found == "", found
    assert not root.exists() or root == realnodes._root_dir(again.cgroup)


def test_two_runs_of_the_product_never_share_a_gateway_and_an_address_is_never_handed_out_twice(tmp_path):
    first, second = Run(tmp_path / "one"), Run(tmp_path / "two")
    try:
        a, b = first.boot("node"), second.boot("node")
        gateways = [realnodes.start_gateway(a), realnodes.start_gateway(b)]
        assert gateways[0] != gateways[1]
        assert realnodes.gateway_serves(a) and realnodes.gateway_serves(b)
        assert a.host_key != b.host_key
        # A gateway that led to another machine is not this node's path.
        crossed = dataclasses.replace(a, gateway=b.gateway)
        assert not realnodes.gateway_serves(crossed)
        # A machine released and booted again gets a new address: a customer's known_hosts line
        # for the old one never meets another host key.
        first.release("node")
        again = first.boot("node")
        assert realnodes.start_gateway(again) not in gateways
    finally:
        first.close()
        second.close()


def test_a_gateway_that_cannot_listen_fails_with_its_reason_and_is_never_shared(run):
    node = run.boot("a")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(realnodes.GatewayError, match="could not listen on 127.0.0.1:"):
            realnodes.start_gateway(node, "127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()
    saved = realnodes.NodeHandle.load(Path(node.state_dir))
    assert saved is not None and saved.gateway == "" and not realnodes.gateway_serves(saved)


# A process listening on 127.0.0.1:22 in a network namespace of its own, which records every
# connection: whatever enters it came through a way into a node that led somewhere else.
IMPOSTOR = r"""
import socket, subprocess, sys
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
listener = socket.socket()
listener.bind(("127.0.0.1", 22))
listener.listen(16)
print("listening", flush=True)
while True:
    connection, _ = listener.accept()
    with open(sys.argv[1], "a") as log:
        log.write("reached\n")
    connection.sendall(b"SSH-2.0-impostor\r\n")
    connection.close()
"""


def _spawn_with_pid(pid: int, command: list[str]) -> subprocess.Popen | None:
    """`command` started as process `pid` (this computer's root picks the next pid through
    ns_last_pid, as checkpoint/restore tools do), or None if another process keeps taking it."""
    for _ in range(50):
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        if process.pid == pid:
            return process
        process.kill()
        process.wait()
    return None


def test_a_node_whose_pid_1_dies_closes_its_gateway_and_its_pid_taken_again_leads_nowhere(run, tmp_path):
    """The node's root can end its own PID 1 (through ptrace); once it is gone its host pid is
    free, and the next process to get it may sit in this computer's network namespace or in
    another tenant's. Neither the customer's gateway nor the control plane's proxy may follow
    the pid there: the gateway closes, and the proxy enters the node's own (dead) namespace."""
    node = run.boot("a")
    gateway = realnodes.start_gateway(node)
    node = realnodes.NodeHandle.load(Path(node.state_dir))
    assert node is not None and realnodes.gateway_serves(node)
    host, port = gateway.rsplit(":", 1)

    os.kill(node.pid, 9)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{node.pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert realnodes.running(Path(node.state_dir)) is None
    # The pid, taken again by a process in a namespace of this test's own with a listener
    # where the node's sshd was.
    reached = tmp_path / "reached"
    reached.touch()
    impostor = _spawn_with_pid(node.pid, ["unshare", "--net", sys.executable, "-c", IMPOSTOR, str(reached)])
    try:
        assert impostor is None or (impostor.stdout is not None and impostor.stdout.readline().strip() == "listening")
        # The gateway closed by itself: its port refuses.
        deadline = time.monotonic() + 30
        while realnodes._is_gateway(node.gateway_pid, Path(node.state_dir)) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ConnectionRefusedError), socket.create_connection((host, int(port)), timeout=5):
            pass
        assert not realnodes.gateway_serves(node)
        # The control plane's way in reaches nothing either.
        proxied = subprocess.run(node.proxy_command.split(), input=b"", capture_output=True, timeout=30)
        assert b"SSH-" not in proxied.stdout
        assert not realnodes.sshd_answers(node)
        assert reached.read_text() == "", "a way into the node led into another namespace"
    finally:
        if impostor is not None:
            impostor.kill()
            impostor.wait()


def test_nothing_starts_outside_a_cgroup_it_cannot_join(tmp_path):
    """A node's launcher and the commands run in a node join its cgroup before they exec:
    when the cgroup cannot be joined the command never runs, so nothing of a node escapes
    its limits."""
    marker = tmp_path / "ran"
    gone = tmp_path / "no-such-cgroup"
    result = subprocess.run(realnodes._in_cgroup([gone], ["touch", str(marker)]), capture_output=True, text=True)
    assert result.returncode == 125 and not marker.exists(), result
    assert subprocess.run(realnodes._in_cgroup([], ["touch", str(marker)])).returncode == 0 and marker.exists()


def test_a_node_that_cannot_start_says_why_and_leaves_nothing(run):
    """The operator's log says what stopped a boot: the failing command, its program's own
    words and what became of the node's PID 1; nothing of the node is left."""
    with pytest.raises(RuntimeError) as failed:
        run.boot("a", files={"/etc/ssh/sshd_config": "NoSuchOption yes\n"})
    reason = str(failed.value)
    assert "Bad configuration option: NoSuchOption" in reason, reason
    # The launcher (unshare, waiting on PID 1) may not have seen its child end yet.
    assert ("launcher exited with status 1" in reason or "launcher still running" in reason), reason
    assert re.search(r"PID 1 \(\d+\) exited", reason), reason
    assert realnodes.leftovers(run.path) == []
    # The same name boots once the fault is gone.
    assert realnodes.sshd_answers(run.boot("a"))


def test_a_volume_is_the_heads_alone_and_its_root_owns_it(run, tmp_path):
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "data.txt").write_text("dataset\n")
    head = run.boot("head", binds={"/mnt/runcrate-volume": str(volume)})
    worker = run.boot("worker")
    assert sh(head, "cat /mnt/runcrate-volume/data.txt").stdout == "dataset\n"
    assert sh(head, "echo more >/mnt/runcrate-volume/new.txt").returncode == 0
    assert sh(worker, "ls /mnt/runcrate-volume").stdout == ""
    # On this computer the volume's files belong to the head's unprivileged root, never to root.
    assert {os.stat(path).st_uid for path in volume.iterdir()} == {head.uid_base}
