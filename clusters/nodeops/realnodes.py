"""Real Linux nodes on one computer: each machine a set of namespaces with its own sshd.

A node is network + UTS + mount + PID namespaces (shared/recipes/real-nodes-on-one-machine.md):

- its `eth0` is one end of a veth pair whose other end sits on a bridge inside a *switch*
  namespace of its own, so node traffic has no link to the host's interfaces at all; the
  host namespace gets blackhole routes for the underlay and for 10.77.0.0/24, so nothing
  on this computer can ever send those addresses out;
- its own `/etc`, `/var`, `/usr`, `/opt` (copy-on-write overlays of the host's, so the packages installed
  on this computer are there and every write stays on the node), `/root`, `/tmp` — every
  write on a tmpfs of the node's own mount namespace, its "disk", gone with the node — a
  tmpfs `/run`, and its own `/shared` (a directory of its state on this computer's disk); its own hostname; PID 1 is a small reaper, and every daemon the node
  scripts start (sshd, wireguard-go, munged, slurmd, raylets) is one of its processes;
- its own sshd with a host key generated at boot, listening on the node's 0.0.0.0:22.

The control plane never dials the node: `proxy_command()` enters only the node's network
namespace and connects to the node's own loopback. The customer's gateway (`Gateway`)
listens on a loopback address of this computer and forwards each connection the same way.

Names are unique per run (the machines directory) so parallel test runs, and `make run`,
never meet: switch `rcs-<run>`, node `rcn-<node>`, veth `rcv<node>`, and an underlay subnet
drawn from 172.16.0.0/12 by the run's id. Nothing here is Django.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .sandbox import find_sshd, write_ed25519_keypair
from .targets import PRIVATE_NETWORK

TOOLS = ("ip", "unshare", "nsenter", "socat", "wg", "wg-quick", "fping")
# Host directories each node gets a private copy-on-write view of.
# Copy-on-write over the host's own: a node installs packages (apt writes /usr and /var
# together, /opt holds Ray) and changes its configuration without touching this computer.
OVERLAID = ("/etc", "/var", "/usr", "/opt")
# Mount points a node needs that a Debian host may not have (created empty, once).
MOUNT_POINTS = ("/shared", "/mnt/runcrate-volume")
# Node-local state of the daemons the scripts start; made at boot, as a package would.
NODE_DIRS = (
    "/etc/runcrate", "/etc/wireguard", "/etc/slurm", "/etc/munge", "/var/lib/munge", "/var/log/munge",
    "/var/spool/slurmd", "/var/spool/slurmctld", "/var/log/slurm",
)
CGROUP_V1 = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "pids")
WIREGUARD_PORT = 51820
# What a node's PID 1 prints once sshd is started (its /tmp hides state under /tmp).
BOOTED = "runcrate: node booted"


def capability() -> tuple[bool, str]:
    """Whether this computer can run real nodes, and why (one line for `make run`)."""
    if not sys.platform.startswith("linux"):
        return False, f"{sys.platform} has no Linux namespaces"
    if os.geteuid() != 0:
        return False, f"namespaces need root (running as uid {os.geteuid()})"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if find_sshd() is None:
        missing.append("sshd")
    if missing:
        return False, "missing " + ", ".join(missing)
    if not os.path.exists("/dev/net/tun"):
        return False, "no /dev/net/tun for WireGuard"
    if not Path("/sys/module/wireguard").exists() and shutil.which("wireguard-go") is None:
        return False, "no WireGuard kernel module and no wireguard-go"
    probe = f"rcprobe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return False, f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return True, "Linux, root, network namespaces, WireGuard (%s)" % (
        "kernel" if Path("/sys/module/wireguard").exists() else "wireguard-go"
    )


def _short_id(text: str, length: int = 6) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:length]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def _netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class Underlay:
    """One run's switch: a bridge in a namespace of its own, and its subnet."""

    run_dir: Path

    @property
    def run_id(self) -> str:
        return _short_id(str(self.run_dir.resolve()))

    @property
    def switch(self) -> str:
        return f"rcs-{self.run_id}"

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        value = int(self.run_id, 16)
        return ipaddress.IPv4Network(f"172.{16 + value % 16}.{(value // 16) % 256}.0/24")

    def address(self, slot: int) -> str:
        return str(self.subnet.network_address + 10 + slot)

    def ensure(self) -> None:
        """The switch and the host's guard routes; safe to call again, and from nodes
        booting at once."""
        with _locked(self.run_dir / ".underlay.lock"):
            self._ensure()

    def _ensure(self) -> None:
        if not _netns_exists(self.switch):
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
        routes = self.run_dir / "guard-routes.json"
        if routes.exists():
            return
        added = []
        for network in (str(self.subnet), PRIVATE_NETWORK):
            # Another run may hold the same guard already: it stays theirs to remove.
            if _ip("route", "add", "blackhole", network, check=False).returncode == 0:
                added.append(network)
        routes.write_text(json.dumps(added))

    def slot_for(self, node_key: str) -> int:
        """A stable underlay address slot per node of this run (under the run's lock)."""
        slots_file = self.run_dir / "underlay-slots.json"
        with _locked(self.run_dir / ".underlay.lock"):
            slots = json.loads(slots_file.read_text()) if slots_file.exists() else {}
            if node_key not in slots:
                used = set(slots.values())
                slots[node_key] = next(i for i in range(240) if i not in used)
                slots_file.write_text(json.dumps(slots))
            return slots[node_key]

    def free_slot(self, node_key: str) -> None:
        slots_file = self.run_dir / "underlay-slots.json"
        with _locked(self.run_dir / ".underlay.lock"):
            slots = json.loads(slots_file.read_text()) if slots_file.exists() else {}
            slots.pop(node_key, None)
            slots_file.write_text(json.dumps(slots))

    def teardown(self) -> None:
        """The switch and the routes this run added; only when no node of the run is left."""
        slots_file = self.run_dir / "underlay-slots.json"
        if slots_file.exists() and json.loads(slots_file.read_text()):
            return
        if _netns_exists(self.switch):
            _ip("netns", "del", self.switch, check=False)
        routes = self.run_dir / "guard-routes.json"
        if routes.exists():
            for network in json.loads(routes.read_text()):
                _ip("route", "del", "blackhole", network, check=False)
            routes.unlink()


@dataclass
class NodeHandle:
    """A booted node as the host sees it (saved in <state>/node.json)."""

    key: str
    netns: str
    veth: str
    pid: int  # the node's PID 1, as a host pid
    address: str  # eth0 on the underlay
    state_dir: str
    gateway_pid: int = 0

    @property
    def proxy_command(self) -> str:
        return proxy_command(self.pid)

    def save(self) -> None:
        path = Path(self.state_dir) / "node.json"
        path.with_suffix(".tmp").write_text(json.dumps(asdict(self)))
        path.with_suffix(".tmp").replace(path)

    @classmethod
    def load(cls, state_dir: Path) -> NodeHandle | None:
        try:
            return cls(**json.loads((state_dir / "node.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None


def proxy_command(pid: int) -> str:
    """Reach the node's sshd: enter only its network namespace, dial its own loopback."""
    return f"nsenter -t {pid} -n socat - TCP:127.0.0.1:22,nodelay"


def _is_node_init(pid: int, state_dir: Path) -> bool:
    """True if `pid` is still this node's PID 1 (pids get reused)."""
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return str(state_dir / "init.sh") in command_line


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


SSHD_CONFIG = """\
# Written by Runcrate when this node booted.
ListenAddress 0.0.0.0:22
HostKey /etc/ssh/ssh_host_ed25519_key
# The control plane's key, then the customer's keys (set_names writes them).
AuthorizedKeysFile /etc/ssh/runcrate_control_plane_keys .ssh/authorized_keys
PidFile /run/sshd.pid
UsePAM no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
PrintMotd no
X11Forwarding no
AllowTcpForwarding yes
# The control plane opens a session per step and every node at once.
MaxStartups 200:30:400
MaxSessions 64
LogLevel ERROR
Subsystem sftp internal-sftp
"""

# PID 1 of a node: its own /run, /etc, /var, /root, /tmp, cgroups and hostname, then sshd,
# then reap orphans forever. It ignores SIGTERM (PID 1 of a namespace): release kills it.
INIT = r"""#!/bin/bash
set -euo pipefail
STATE="$1" HOSTNAME_AT_BOOT="$2" SSHD="$3"
# The node's disk: a tmpfs in its own mount namespace, seeded with what boot() wrote, gone
# with the node. Every step writes files, and creating a file on this computer's ext4 costs
# ~0.35 ms of kernel time (its inode allocator skips recently deleted inodes) against ~15 µs
# on tmpfs: thousands of files when 32 nodes join at once. Each fstab is one `mount` process
# (fifteen mounts, one by one, were a tenth of a 32-node boot's CPU).
mount -a -T "$STATE/fstab.disk"
# Best effort: a controller this kernel lacks is simply not there.
mount -a -T "$STATE/fstab.cgroups" 2>/dev/null || true
mkdir -p /run/sshd /run/munge /run/wireguard /run/lock
cp -a "$STATE/seed/." "$STATE/disk/"
# Last: its /tmp may hide $STATE (a machines directory under /tmp).
mount -a -T "$STATE/fstab.layers"
hostname "$HOSTNAME_AT_BOOT"
ip link set lo up
if [ -f /etc/runcrate/boot-fault ]; then
    echo "boot fault injected: sshd is not started" >&2
else
    # -r: no re-exec per connection (~10 ms of CPU each, and a step opens one per node)
    "$SSHD" -r -f /etc/ssh/sshd_config -E /var/log/sshd.log
fi
echo "%(booted)s"
trap '' TERM
while :; do
    sleep 3600 &
    wait || true
done
"""


def boot(
    run_dir: Path,
    state_dir: Path,
    *,
    key: str,
    hostname: str,
    authorized_keys: str,
    boot_fails: bool = False,
    drop_wireguard: bool = False,
    files: dict[str, str] | None = None,
    binds: dict[str, str] | None = None,
) -> NodeHandle:
    """Start one node (idempotent: an already running node is returned as it is).

    `files` are written into the node's /etc or /var before it boots (a fault file);
    `binds` maps a node path to a host directory mounted there (an attached volume)."""
    existing = NodeHandle.load(state_dir)
    if existing and _is_node_init(existing.pid, state_dir):
        return existing
    if existing:
        release(run_dir, state_dir)
    underlay = Underlay(run_dir)
    underlay.ensure()
    node_id = _short_id(f"{run_dir.resolve()}:{key}", 8)
    netns, veth = f"rcn-{node_id}", f"rcv{node_id}"
    slot = underlay.slot_for(key)
    address = underlay.address(slot)

    shutil.rmtree(state_dir, ignore_errors=True)
    # What the node's disk starts with; its PID 1 copies it onto the node's own tmpfs.
    seed = state_dir / "seed"
    for dir in (*OVERLAID, *NODE_DIRS):
        (seed / f"upper{dir}").mkdir(parents=True, exist_ok=True)
    for dir in OVERLAID:
        (seed / f"work{dir}").mkdir(parents=True)
    (state_dir / "disk").mkdir()
    (seed / "home" / "root").mkdir(parents=True, mode=0o700)
    for name in (".bashrc", ".profile"):
        if Path("/etc/skel", name).exists():
            shutil.copy(Path("/etc/skel", name), seed / "home" / "root" / name)
    (seed / "tmp").mkdir(mode=0o1777)
    (seed / "tmp").chmod(0o1777)
    # The node's /shared: on this computer's disk (it holds the customer's datasets), and
    # its own — the host's /shared is only the mount point every node's is bound to.
    (state_dir / "shared").mkdir()
    for point in MOUNT_POINTS:
        Path(point).mkdir(exist_ok=True)
    ssh_dir = seed / "upper/etc/ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    write_ed25519_keypair(ssh_dir / "ssh_host_ed25519_key", f"root@{hostname}")
    (ssh_dir / "sshd_config").write_text(SSHD_CONFIG)
    (ssh_dir / "runcrate_control_plane_keys").write_text(authorized_keys)
    if boot_fails:
        (seed / "upper/etc/runcrate/boot-fault").write_text("boot_fails\n")
    for path, text in (files or {}).items():
        if not path.startswith(OVERLAID):
            raise ValueError(f"{path} is not under {' or '.join(OVERLAID)}")
        (seed / f"upper{path}").parent.mkdir(parents=True, exist_ok=True)
        (seed / f"upper{path}").write_text(text)
    for host_path in (binds or {}).values():
        Path(host_path).mkdir(parents=True, exist_ok=True)
    (state_dir / "init.sh").write_text(
        INIT % {"booted": BOOTED}
    )
    disk = state_dir / "disk"
    _write_fstab(state_dir / "fstab.disk", [
        # Sources no host mount has: `mount -a` skips an entry it finds mounted already.
        ("node-run", "/run", "tmpfs", "mode=0755"),
        ("node-disk", str(disk), "tmpfs", "mode=0755"),
        ("cgroup", "/sys/fs/cgroup", "tmpfs", "mode=0755"),
    ])
    _write_fstab(state_dir / "fstab.layers", [
        *((f"node{dir.replace('/', '-')}", dir, "overlay",
           f"lowerdir={dir},upperdir={disk}/upper{dir},workdir={disk}/work{dir}") for dir in OVERLAID),
        (f"{disk}/home/root", "/root", "none", "bind"),
        (str(state_dir / "shared"), "/shared", "none", "bind"),
        *((host_path, node_path, "none", "bind,X-mount.mkdir") for node_path, host_path in (binds or {}).items()),
        (f"{disk}/tmp", "/tmp", "none", "bind"),
    ])
    _write_fstab(state_dir / "fstab.cgroups", [
        *(("cgroup", f"/sys/fs/cgroup/{controller}", "cgroup", f"{controller},X-mount.mkdir") for controller in CGROUP_V1),
        ("cgroup", "/sys/fs/cgroup/systemd", "cgroup", "none,name=systemd,X-mount.mkdir"),
    ])

    _ip("netns", "add", netns)
    _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
    _ip("link", "set", veth, "netns", underlay.switch)
    _ip("-n", underlay.switch, "link", "set", veth, "master", "br0")
    if not drop_wireguard:
        _ip("-n", underlay.switch, "link", "set", veth, "up")
    _ip("-n", netns, "addr", "add", f"{address}/{underlay.subnet.prefixlen}", "dev", "eth0")
    _ip("-n", netns, "link", "set", "eth0", "up")
    # Fault `never_joins`: the switch port stays down, so every WireGuard packet to or from
    # the node is dropped (the underlay carries nothing else: all the rest goes over wg0).
    # Routing rules cannot do it: wireguard-go pins the outgoing interface, and the kernel
    # then sends even where the routing table says blackhole.

    log = open(state_dir / "init.log", "ab")  # noqa: SIM115 - handed to the child
    launcher = subprocess.Popen(
        ["ip", "netns", "exec", netns, "unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc",
         "--propagation", "private", "bash", str(state_dir / "init.sh"), str(state_dir), hostname, find_sshd() or "sshd"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    log.close()
    pid = 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = _children(launcher.pid)
        if children:
            pid = children[0]
            if _booted(state_dir):
                break
        if launcher.poll() is not None:
            break
        time.sleep(0.02)
    handle = NodeHandle(key=key, netns=netns, veth=veth, pid=pid, address=address, state_dir=str(state_dir))
    handle.save()
    if not pid or not _booted(state_dir):
        reason = (state_dir / "init.log").read_text(errors="replace")[-400:]
        release(run_dir, state_dir)
        raise RuntimeError(f"node {hostname} did not boot: {reason.strip() or 'no output'}")
    return handle


def _write_fstab(path: Path, entries: list[tuple[str, str, str, str]]) -> None:
    """fstab(5) lines: source, target, type, options; blanks escaped as fstab wants."""
    def field(value: str) -> str:
        return value.replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")

    path.write_text("".join(" ".join(map(field, entry)) + " 0 0\n" for entry in entries))


def pin_neighbours(handles: list[NodeHandle]) -> None:
    """Give every node a permanent neighbour entry for every other node's underlay address,
    as a switch with static ARP would: without them, a 40-node join floods the bridge with
    40 × 39 ARP requests, packets queue behind neighbours still resolving, wireguard-go's
    socket runs out of send buffer (`UdpSndbufErrors`) and handshakes are dropped."""
    macs = {}
    for handle in handles:
        shown = _ip("-j", "-n", handle.netns, "link", "show", "eth0", check=False)
        if shown.returncode == 0:  # a node that is gone fails its join on its own
            macs[handle.address] = json.loads(shown.stdout)[0]["address"]
    for handle in handles:
        lines = "".join(f"neigh replace {address} lladdr {mac} dev eth0 nud permanent\n"
                        for address, mac in macs.items() if address != handle.address)
        if handle.address in macs and lines:
            subprocess.run(["ip", "-n", handle.netns, "-batch", "-"], input=lines, capture_output=True, text=True)


def _booted(state_dir: Path) -> bool:
    try:
        return BOOTED in (state_dir / "init.log").read_text(errors="replace")
    except OSError:
        return False


def running(state_dir: Path) -> NodeHandle | None:
    handle = NodeHandle.load(state_dir)
    if handle and _is_node_init(handle.pid, state_dir):
        return handle
    return None


def sshd_answers(handle: NodeHandle, timeout: float = 3.0) -> bool:
    """True when the node's sshd sends its banner through the proxy command."""
    try:
        process = subprocess.Popen(
            handle.proxy_command.split(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except OSError:
        return False
    try:
        out, _ = process.communicate(input=b"", timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    return out.startswith(b"SSH-")


def run_in(handle: NodeHandle, command: list[str], timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command inside the node (every namespace of it): tests and the bench."""
    return subprocess.run(
        ["nsenter", "-t", str(handle.pid), "-a", *command], capture_output=True, text=True, timeout=timeout, **kwargs
    )


def release(run_dir: Path, state_dir: Path) -> None:
    """Kill the node's PID 1 (every process of the node dies with it), delete its
    namespaces and its state. Idempotent; touches only what this node's boot made."""
    handle = NodeHandle.load(state_dir)
    if handle is not None:
        if handle.gateway_pid and _is_gateway(handle.gateway_pid, state_dir):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(handle.gateway_pid, signal.SIGKILL)
        if handle.pid and _is_node_init(handle.pid, state_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(handle.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while Path(f"/proc/{handle.pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        if _netns_exists(handle.netns):
            _ip("netns", "del", handle.netns, check=False)
        underlay = Underlay(run_dir)
        if _netns_exists(underlay.switch):
            _ip("-n", underlay.switch, "link", "del", handle.veth, check=False)
        underlay.free_slot(handle.key)
    shutil.rmtree(state_dir, ignore_errors=True)


# -- the customer's gateway ---------------------------------------------------------------


def _is_gateway(pid: int, state_dir: Path) -> bool:
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return str(state_dir / "gateway.sh") in command_line


def start_gateway(handle: NodeHandle, listen_host: str, listen_port: int) -> None:
    """A loopback port of this computer that forwards every connection into the node's
    sshd, the way a site gateway forwards to machines without an address of their own."""
    if not ipaddress.ip_address(listen_host).is_loopback:
        raise ValueError(f"the gateway listens on loopback only, not {listen_host}")
    state_dir = Path(handle.state_dir)
    if handle.gateway_pid and _is_gateway(handle.gateway_pid, state_dir):
        return
    script = state_dir / "gateway.sh"
    script.write_text(f"#!/bin/sh\nexec {handle.proxy_command}\n")
    script.chmod(0o755)
    log = open(state_dir / "gateway.log", "ab")  # noqa: SIM115 - handed to the child
    process = subprocess.Popen(
        ["socat", f"TCP-LISTEN:{listen_port},bind={listen_host},reuseaddr,fork,nodelay", f"EXEC:{script}"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    log.close()
    handle.gateway_pid = process.pid
    handle.save()


def leftovers(run_dir: Path) -> list[str]:
    """What of this run is still on the computer: namespaces, processes (tests)."""
    run_dir = run_dir.resolve()
    found = []
    names = set(os.listdir("/run/netns")) if Path("/run/netns").exists() else set()
    for state in run_dir.glob("*/node.json"):
        handle = NodeHandle.load(state.parent)
        if handle and handle.netns in names:
            found.append(f"netns {handle.netns}")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command_line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(run_dir) in command_line:
            found.append(f"process {proc.name}: {command_line[:120]}")
    return found


def namespaces(handle: NodeHandle) -> dict[str, str]:
    """The node's namespace ids ("pid:[4026...]"), to look for its processes after release."""
    ids = {}
    for kind in ("pid", "net", "mnt", "uts"):
        with contextlib.suppress(OSError):
            ids[kind] = os.readlink(f"/proc/{handle.pid}/ns/{kind}")
    return ids


def processes_in(ids: dict[str, str]) -> list[int]:
    """Host pids of every process still in any of these namespaces."""
    wanted = set(ids.values())
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        for kind in ids:
            try:
                if os.readlink(proc / "ns" / kind) in wanted:
                    found.append(int(proc.name))
                    break
            except OSError:
                continue
    return found
