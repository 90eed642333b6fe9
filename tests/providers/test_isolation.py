"""Attacks on real nodes from the inside, as a customer with root on a node would make them.

Every node here is a real one (clusters.providers.local.realnodes): the commands run in the node as its
root, in its namespaces and its cgroup (`run_in`), and what they reach is checked from this
computer's side. Skipped where this computer cannot run namespaces.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
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
        # Its map, as this computer reads it: the node's 65,536 ids are the range's. (Read in the
        # node, the map is "0 0 65536": relative to the namespace above the node's, which
        # holds its limits and maps the same range.)
        assert Path(f"/proc/{handle.pid}/uid_map").read_text().split() == ["0", str(handle.uid_base), "65536"]
        assert Path(f"/proc/{handle.pid}/gid_map").read_text().split() == ["0", str(handle.uid_base), "65536"]
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

    # Disk: the node's root and /shared have the node's sizes (less the filesystem's own
    # records, as on any disk), and fill up at them.
    root_size, shared_size = map(int, sh(hog, "df -m --output=size / /shared | tail -2").stdout.split())
    assert 0.85 * 64 <= root_size <= 64 and 0.85 * 32 <= shared_size <= 32, (root_size, shared_size)
    full = sh(hog, "dd if=/dev/zero of=/srv/fill bs=1M count=200 2>&1")
    assert "No space left on device" in full.stdout
    assert "No space left on device" in sh(hog, "dd if=/dev/zero of=/shared/fill bs=1M count=100 2>&1").stdout
    assert sh(neighbour, "df -m --output=avail / | tail -1").stdout.strip() not in ("0", "")


def test_a_nodes_memory_is_its_machines_alone_and_its_dev_shm_is_bounded_and_counted_in_it(run):
    limits = realnodes.NodeLimits(memory_mb=256, pids=256, disk_mb=512, shared_mb=64)
    node = run.boot("a", limits=limits)
    cgroup = Path("/sys/fs/cgroup/memory/runcrate", node.cgroup)

    # Its memory limit is its machine's memory: nothing else of it lives in this computer's memory.
    assert int((cgroup / "memory.limit_in_bytes").read_text()) == 256 << 20
    # /dev/shm is half of it, fills up there, and its pages count against the node.
    assert sh(node, "df -m --output=size /dev/shm | tail -1").stdout.strip() == "128"
    before = int((cgroup / "memory.usage_in_bytes").read_text())
    assert "No space left on device" in sh(node, "dd if=/dev/zero of=/dev/shm/fill bs=1M count=400 2>&1").stdout
    assert int((cgroup / "memory.usage_in_bytes").read_text()) - before >= 120 << 20
    # The node's root cannot make it larger.
    assert sh(node, "mount -o remount,size=8g /dev/shm").returncode != 0
    assert sh(node, "df -m --output=size /dev/shm | tail -1").stdout.strip() == "128"
    # With /dev/shm full, what is left of its memory is 128 MiB: an allocation of 200 MiB is
    # killed inside its cgroup.
    eaten = sh(node, "python3 -c 'b = b\"x\" * (200 << 20); print(len(b))'")
    assert eaten.returncode in (137, -9) and eaten.stdout == "", eaten

    # Its disk is on this computer's disk: what it writes there takes none of its memory (the
    # page cache of it is reclaimed) and lands in the file behind its disk.
    image = realnodes.DISKS_DIR / node.cgroup / "disk.img"
    allocated = image.stat().st_blocks * 512
    wrote = sh(node, "dd if=/dev/urandom of=/srv/data bs=1M count=300 conv=fsync 2>&1")
    assert wrote.returncode == 0, wrote.stdout
    assert image.stat().st_blocks * 512 - allocated >= 300 << 20
    # What it deletes is given back to this computer's disk.
    assert sh(node, "rm /srv/data && sync").returncode == 0
    deadline = time.monotonic() + 30
    while image.stat().st_blocks * 512 - allocated > 32 << 20 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert image.stat().st_blocks * 512 - allocated <= 32 << 20


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
    # A PID 1 that failed at once may end before the runtime saw it.
    assert re.search(r"PID 1 \(\d+\) exited|PID 1 was not seen running before the launcher exited", reason), reason
    assert realnodes.leftovers(run.path) == []
    # The same name boots once the fault is gone.
    assert realnodes.sshd_answers(run.boot("a"))


def test_what_a_boot_prints_is_read_up_to_a_cap_and_its_end_kept_for_the_reason():
    """A boot's output is a pipe the runtime reads, never a file: a flood stops being read at
    the cap (the writer then blocks on a full pipe, it fills nothing of this computer)."""
    flood = subprocess.Popen(["sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' x; echo last words"],
                             stdout=subprocess.PIPE)
    assert flood.stdout is not None
    with realnodes._BootOutput(flood.stdout) as output:
        output.drain(timeout=30)
        assert output.over_cap and not output.booted
        assert output.tail().endswith(f"[it printed more than {realnodes.BOOT_OUTPUT_CAP} bytes]")
    flood.kill()
    flood.wait()
    said = subprocess.Popen(["sh", "-c", f"echo 'cp: cannot stat x'; echo '{realnodes.BOOTED}'; sleep 30"],
                            stdout=subprocess.PIPE)
    assert said.stdout is not None
    with realnodes._BootOutput(said.stdout) as output:
        while not output.booted:
            output.wait(1)
        assert output.tail() == f"cp: cannot stat x\n{realnodes.BOOTED}" and not output.over_cap
    said.kill()
    said.wait()


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


# -- nothing of this computer is open in a node ----------------------------------------------

# Where a socket of a network namespace is listed (/proc/<pid>/net/<table>), and the column of
# its inode there.
SOCKET_TABLES = {"tcp": 9, "tcp6": 9, "udp": 9, "udp6": 9, "udplite": 9, "udplite6": 9, "raw": 9, "raw6": 9,
                 "icmp": 9, "icmp6": 9, "unix": 6, "netlink": 9, "packet": 8}
NAMESPACE_KINDS = ("cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts")


def node_processes(handle: realnodes.NodeHandle) -> set[int]:
    """Host pids of every process in the node's PID namespace."""
    own = os.readlink(f"/proc/{handle.pid}/ns/pid")
    found = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.readlink(proc / "ns" / "pid") == own:
                    found.add(int(proc.name))
            except OSError:
                continue
    return found


class NodeView:
    """What belongs to a node, as this computer sees it: its processes, the sockets its network
    namespace lists, the namespaces its processes are in, its own in-memory filesystems, and
    which processes of this computer hold each pipe."""

    def __init__(self, handle: realnodes.NodeHandle) -> None:
        self.root = f"/proc/{handle.pid}/root"
        self.processes = node_processes(handle)
        self.sockets: set[str] = set()
        for table, column in SOCKET_TABLES.items():
            with contextlib.suppress(OSError):
                lines = Path(f"/proc/{handle.pid}/net/{table}").read_text().splitlines()[1:]
                self.sockets |= {cols[column] for cols in (line.split() for line in lines) if len(cols) > column}
        self.namespaces = {os.readlink(f"/proc/{pid}/ns/{kind}") for pid in self.processes for kind in NAMESPACE_KINDS
                           if os.path.exists(f"/proc/{pid}/ns/{kind}")}
        self.filesystems = set()
        for line in Path(f"/proc/{handle.pid}/mountinfo").read_text().splitlines():
            fields = line.split()
            if fields[fields.index("-") + 1] in ("tmpfs", "devpts", "mqueue"):
                major, minor = fields[2].split(":")
                self.filesystems.add(os.makedev(int(major), int(minor)))
        self.pipe_holders: dict[str, set[int]] = {}
        for fd in Path("/proc").glob("[0-9]*/fd/*"):
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("pipe:"):
                    self.pipe_holders.setdefault(target, set()).add(int(fd.parent.parent.name))

    def outside(self, pid: int, fd: Path, target: str, seen: os.stat_result) -> str:
        """Why this descriptor refers to something outside the node ("" if it does not)."""
        if target.startswith("/"):
            try:
                inside = os.stat(self.root + target.removesuffix(" (deleted)"))
                if (inside.st_dev, inside.st_ino) == (seen.st_dev, seen.st_ino):
                    return ""
            except OSError:
                pass
            if target.endswith(" (deleted)") and seen.st_dev in self.filesystems:
                return ""
            return "not this file in the node's tree"
        if target.startswith("socket:["):
            return "" if target[len("socket:["):-1] in self.sockets else "a socket of another network namespace"
        if target.startswith("pipe:"):
            others = self.pipe_holders.get(target, set()) - self.processes
            return f"a pipe also held by {sorted(others)}" if others else ""
        if target == "anon_inode:[pidfd]":
            info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
            process = int(re.search(r"^Pid:\s*(-?\d+)", info, re.M).group(1))  # type: ignore[union-attr]
            return f"a pidfd of process {process}" if process > 0 and process not in self.processes else ""
        if target.startswith("anon_inode:"):
            return ""
        return "" if target in self.namespaces else "a namespace no process of the node is in"


def outside_descriptors(handle: realnodes.NodeHandle) -> list[str]:
    """Every descriptor of every process of the node that refers to something outside it.

    A file, directory or device counts as the node's when its path, looked up in the node's own
    tree, is that very inode (this computer's /dev/null is not the node's; a host file is not in
    its tree at all); a socket when the node's network namespace lists it; a pipe when every
    process of this computer that holds it is the node's; a pidfd when its process is the
    node's; a namespace when a process of the node is in it. Other anonymous inodes (eventfd,
    epoll, inotify, timerfd, signalfd) are made by the process that holds them."""
    view = NodeView(handle)
    found = []
    for pid in sorted(view.processes):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target, seen = os.readlink(fd), os.stat(fd)
            except OSError:
                continue  # closed meanwhile
            why = view.outside(pid, fd, target, seen)
            if why:
                found.append(f"{name} ({pid}) fd {fd.name} -> {target}: {why}")
    return found


def test_no_descriptor_of_any_node_process_refers_to_anything_outside_the_node(run):
    node = run.boot("a")
    # A customer's session (their key, a terminal) open while the node is looked at: sshd's
    # own processes and the shell it started hold their descriptors too. The run's key is the
    # control plane's, which gets no terminal.
    customer = run.path / "customer"
    customer_public = write_ed25519_keypair(customer, "customer")
    installed = realnodes.run_in(node, ["sh", "-c", f"mkdir -p /root/.ssh && echo '{customer_public}' >> /root/.ssh/authorized_keys"])
    assert installed.returncode == 0, installed.stderr
    session = subprocess.Popen(
        ["ssh", "-F", "/dev/null", "-i", str(customer), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o",
         f"ProxyCommand={node.proxy_command}", "-tt", "root@node", "echo session-open; exec sleep 120"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        assert session.stdout is not None and session.stderr is not None
        opened = session.stdout.readline()
        assert b"session-open" in opened, session.stderr.read()  # stdout ended: ssh has exited
        names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in node_processes(node)}
        assert {"sshd", "sleep"} <= names, names
        found = outside_descriptors(node)
        assert found == [], "\n".join(found)
    finally:
        session.kill()
        session.wait()


ATTACK = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
pidfd = os.pidfd_open(1)
for number in (0, 1, 2):
    fd = libc.syscall(438, pidfd, number, 0)  # pidfd_getfd: a copy of PID 1's descriptor
    if fd < 0:
        print(number, "getfd", os.strerror(ctypes.get_errno()))
        continue
    print(number, "target", os.readlink(f"/proc/self/fd/{fd}"))
    try:
        os.write(fd, sys.argv[1].encode() + b"\n")
        print(number, "wrote")
    except OSError as error:
        print(number, "write", error.strerror)
    try:
        os.posix_fallocate(fd, 0, 64 << 20)
        print(number, "fallocated")
    except OSError as error:
        print(number, "fallocate", error.strerror)
"""


def test_root_in_a_node_taking_pid_1s_stdio_reaches_nothing_of_this_computer(run):
    """The attack that took 6 GiB of this computer's disk: PID 1's stdout was a host file."""
    marker = f"runcrate-stdio-{random.getrandbits(40):010x}"
    node = run.boot("a")
    attack = realnodes.run_in(node, ["python3", "-c", ATTACK, marker])
    assert attack.returncode == 0, attack.stderr
    said = attack.stdout.splitlines()
    # The node's root may take the descriptors (they are its PID 1's) ...
    assert [line for line in said if "target" in line] == [f"{n} target /dev/null" for n in (0, 1, 2)], said
    # ... and they are the node's own /dev/null: nothing to fill, nothing of this computer.
    assert not [line for line in said if "fallocated" in line], said
    null = os.stat(f"/proc/{node.pid}/root/dev/null")
    for number in (0, 1, 2):
        held = os.stat(f"/proc/{node.pid}/fd/{number}")
        assert (held.st_dev, held.st_ino) == (null.st_dev, null.st_ino), number
    for tree in (run.path, realnodes.HOST_REGISTRY):
        found = subprocess.run(["grep", "-rl", marker, str(tree)], capture_output=True, text=True).stdout
        assert found == "", found


# -- what a node creates counts against its own uid, never this computer's root ---------------

NS_GET_PARENT = 0xB702
NS_GET_OWNER_UID = 0xB704


def user_namespace_owners(pid: int) -> list[int]:
    """The owner uid of the process's user namespace and of each one above it, to this
    computer's own (whose owner is 0). The kernel charges what a namespace's processes create
    to each owner up this chain."""
    owners = []
    fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    try:
        while True:
            uid = bytearray(4)
            fcntl.ioctl(fd, NS_GET_OWNER_UID, uid, True)
            owners.append(int.from_bytes(uid, sys.byteorder))
            try:
                parent = fcntl.ioctl(fd, NS_GET_PARENT)
            except PermissionError:  # this computer's own namespace has no parent
                return owners
            os.close(fd)
            fd = parent
    finally:
        os.close(fd)


@contextlib.contextmanager
def holding(handle: realnodes.NodeHandle, program: str, *args: str) -> Iterator[str]:
    """Run `program` in the node; yield the line it prints once it holds what it made, and
    end it afterwards (closing its stdin)."""
    process = subprocess.Popen(
        realnodes._in_cgroup(realnodes._cgroup_dirs(handle.cgroup),
                             ["nsenter", "-t", str(handle.pid), "-a", "python3", "-c", program, *args]),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=realnodes.NODE_ENVIRONMENT,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        yield process.stdout.readline().strip()
    finally:
        process.stdin.close()
        process.wait(timeout=60)


# Make user namespaces (siblings, each held by a descriptor) until the kernel refuses one or
# `cap` are made; print how many and why it stopped; hold them until stdin closes.
MAKE_USER_NAMESPACES = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
held, why = [], ""
for _ in range(int(sys.argv[1])):
    made_r, made_w = os.pipe()
    done_r, done_w = os.pipe()
    child = os.fork()
    if child == 0:
        answer = b"0" if libc.unshare(0x10000000) == 0 else str(ctypes.get_errno()).encode()
        os.write(made_w, answer)
        os.read(done_r, 1)
        os._exit(0)
    answer = os.read(made_r, 16)
    if answer == b"0":
        held.append(os.open(f"/proc/{child}/ns/user", os.O_RDONLY))
    else:
        why = os.strerror(int(answer))
    os.write(done_w, b"x")
    os.waitpid(child, 0)
    for fd in (made_r, made_w, done_r, done_w):
        os.close(fd)
    if why:
        break
print(len(held), why, flush=True)
sys.stdin.read()
"""

MAKE_INOTIFY_INSTANCES = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
held, why = [], ""
for _ in range(int(sys.argv[1])):
    fd = libc.inotify_init1(0)
    if fd < 0:
        why = os.strerror(ctypes.get_errno())
        break
    held.append(fd)
print(len(held), why, flush=True)
sys.stdin.read()
"""


def test_a_nodes_user_namespaces_count_against_its_own_uid_and_stop_at_its_own_limit(run):
    limits = dataclasses.replace(realnodes.NodeLimits(), namespaces=24)
    node, neighbour = run.boot("a", limits=limits), run.boot("b", segment="cluster-b")
    # Every user namespace above the node's, to this computer's own, is owned by the node's
    # uid: nothing the node makes is charged to this computer's root.
    for handle in (node, neighbour):
        owners = user_namespace_owners(handle.pid)
        assert owners[-1] == 0 and len(owners) > 1
        assert set(owners[:-1]) == {handle.uid_base}, owners
    # Its root may raise the limit it sees (its own namespace's); the one above it holds.
    assert sh(node, "echo 1000000 >/proc/sys/user/max_user_namespaces").returncode == 0
    with holding(node, MAKE_USER_NAMESPACES, str(limits.namespaces + 8)) as made:
        assert made == f"{limits.namespaces} No space left on device", made
        # This computer's root and another node still make theirs.
        assert subprocess.run(["unshare", "--user", "true"], capture_output=True).returncode == 0
        assert sh(neighbour, "unshare --user true").returncode == 0
        assert realnodes.sshd_answers(node), "the node itself keeps working"


def test_a_nodes_inotify_instances_stop_at_its_own_limit_and_never_starve_this_computers_root(run):
    limits = dataclasses.replace(realnodes.NodeLimits(), inotify_instances=16)
    node, neighbour = run.boot("a", limits=limits), run.boot("b", segment="cluster-b")
    assert sh(node, "echo 100000 >/proc/sys/user/max_inotify_instances").returncode == 0
    libc = ctypes.CDLL(None, use_errno=True)
    with holding(node, MAKE_INOTIFY_INSTANCES, str(limits.inotify_instances + 8)) as made:
        assert made == f"{limits.inotify_instances} Too many open files", made
        mine = libc.inotify_init1(0)
        assert mine >= 0, os.strerror(ctypes.get_errno())
        os.close(mine)
        assert realnodes.run_in(neighbour, ["python3", "-c", MAKE_INOTIFY_INSTANCES, "8"], input="").stdout.strip() == "8"


def test_a_released_run_leaves_no_folder_in_the_guard_registry(tmp_path):
    """Every run of the product holds a guard route for its own subnet; the last one out takes
    the route and its holders' folder away, so runs that come and go leave nothing behind."""
    nodes = Run(tmp_path / "run")
    nodes.boot("a")
    folder = realnodes.HOST_REGISTRY / "guards" / str(realnodes.Underlay(nodes.path).subnet).replace("/", "_")
    assert folder.is_dir()
    nodes.close()
    assert not folder.exists()
