"""Real Linux nodes on one computer: each machine an unprivileged container with its own sshd.

This is what a `container` offer is on a GPU host, and the code an operator runs on each
one (docs/nodeops.md, "Isolated machines"). A node is:

- **a user namespace** whose root is an unprivileged uid range of this computer, its own
  per node (`UidRanges`): root in the node owns the node's files and nothing else here. It
  is owned by that range's first uid, not this computer's root, and sits in an outer one
  (owned by the same uid) that holds the node's per-user kernel limits (`userns.py`):
  namespaces and inotify instances the node makes count against its own uid and limits;
- **its own root filesystem**: the machine image (images.py), mounted read-only and idmapped
  to the node's uid range, under a writable overlay layer on its disk, an ext4 filesystem in a
  sparse file of the disk's size on this computer's disk (not in its memory). The node
  `pivot_root`s into it and its old root is detached, so nothing of this computer's tree is
  reachable, `mount` tricks included, and nothing of this computer's software is in it: sshd,
  WireGuard, Slurm and Ray are the image's. A private `/dev` with only null, zero, random, tty,
  `net/tun` and `fuse`, a `/dev/shm` of half its memory, and `/shared`, a second such disk;
- **its own network, UTS, IPC, mount and PID namespaces**, owned by its user namespace (so
  wireguard-go, `ip` and fping work inside); `eth0` is one end of a veth whose other end is
  on its *cluster's* bridge (`Underlay.bridge`) inside a switch namespace with no link to the
  host's interfaces: nodes of different clusters share no segment;
- **cgroup limits** (`NodeLimits`): memory (its machine's; tmpfs pages included: an
  allocation past it is OOM-killed inside the node's cgroup), process count and CPU share,
  in one parent for every node of this computer whose memory and process limits leave this
  computer a reserve (`HostReserve`);
- its own sshd with a host key generated at boot;
- **nothing of this computer open**: stage one's and PID 1's output is a pipe boot() reads
  (capped) until the boot marker, then PID 1 and all it starts hold the node's own /dev/null.

The control plane never dials the node: `proxy_command()` enters only the node's network
namespace, by its bind mount under /run/netns (never by a pid, which this computer reuses),
and connects to the node's own loopback. The customer's gateway (`start_gateway`, the program
in gateway.py) listens on a loopback address of this computer drawn from a counter that is
never reused (`GatewayAddresses`), forwards each connection the same way, and closes when the
node's PID 1 exits (it holds a pidfd of it).

Names are unique per run (the machines directory) so parallel test runs, and `make run`,
never meet: switch `rcs-<run>`, node `rcn-<node>`, veth `rcv<node>`, bridge `rcb<cluster>`,
and an underlay subnet drawn from 172.16.0.0/12 by the run's id. Nothing here is Django.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import select
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from clusters.nodeops.targets import PRIVATE_NETWORK

from . import cdi, egress, images, lxcfs
from .hostkeys import find_sshd, write_host_key

TOOLS = ("ip", "unshare", "nsenter", "socat", "wg", "wg-quick", "fping", "losetup", "mkfs.ext4")
# Makes a node's user namespaces, owned by the node's uid (stage one runs it).
USERNS_HELPER = Path(__file__).with_name("userns.py")
# This computer's registry of what every run of the product holds here: uid ranges, guard
# routes (a tmpfs: none of it outlives a reboot, and neither do the nodes), and the gateway
# counter (on disk: a customer's known_hosts outlives a reboot).
HOST_REGISTRY = Path(os.environ.get("RUNCRATE_NODES_REGISTRY", "/run/runcrate-nodes"))
GATEWAY_COUNTER = Path(os.environ.get("RUNCRATE_GATEWAY_COUNTER", "/var/lib/runcrate-nodes/gateway-serial"))
# The nodes' disks: a folder per node on this computer's disk (a path that names nothing of
# the run or its machines: a node can read the file behind its own loop device in /sys).
DISKS_DIR = Path(os.environ.get("RUNCRATE_NODES_DISKS", "/var/lib/runcrate-nodes/disks"))
# A node's disks are made and mounted within its boot: a folder with no disk in use that is
# older than this is what a killed run (or a reboot) left, and the next boot removes it.
STALE_DISKS = 600
# Each node's root is this computer's FIRST_UID + index × RANGE_SIZE; /etc/subuid and
# /etc/subgid must delegate the block to root (`install_host_packages` writes the line).
FIRST_UID = 1_048_576
RANGE_SIZE = 65_536
RANGES = 4_096
SUBID_LINE = f"root:{FIRST_UID}:{RANGE_SIZE * RANGES}"
# Gateways: 127.64.0.0/10, one address per machine ever booted here, port 2222.
GATEWAY_NETWORK = ipaddress.IPv4Network("127.64.0.0/10")
GATEWAY_PORT = 2222
# The image every node boots from (images.py): its root filesystem is the node's, under a
# writable layer of the node's own.
NODE_IMAGE = "base"
IMAGES_HELPER = Path(__file__).with_name("images.py")
# Device nodes a node may open: name, major, minor.
DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0),
           ("net/tun", 10, 200), ("fuse", 10, 229))
# Node-local state of the daemons the scripts start; made at boot, as a package would.
NODE_DIRS = (
    "/etc/runcrate", "/etc/wireguard", "/etc/slurm", "/etc/munge", "/var/lib/munge", "/var/log/munge",
    "/var/spool/slurmd", "/var/spool/slurmctld", "/var/log/slurm",
)
CGROUP_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "cpuset", "devices", "systemd")
WIREGUARD_PORT = 51820
# What a node's PID 1 prints once sshd is started.
BOOTED = "runcrate: node booted"


@dataclass(frozen=True)
class HostReserve:
    """What this computer keeps for itself and the control plane, whatever its nodes do: every
    node of every run sits in one parent cgroup (`runcrate/`) limited to the computer's memory
    and process count less these."""

    memory_mb: int = 4096
    pids: int = 8192


@dataclass(frozen=True)
class NodeLimits:
    """What one node may use of this computer."""

    memory_mb: int = 4096
    pids: int = 4096
    cpu_shares: int = 1024
    # How many of this computer's CPUs the node may run on (its cpuset: `nproc`, and /proc/cpuinfo
    # through LXCFS, show this many); 0 for all of them.
    cpus: int = 0
    disk_mb: int = 4096
    shared_mb: int = 2048
    # What the kernel counts per user: namespaces the node may make of each kind, and its
    # inotify instances (docs/security.md, "Tenant-facing limits").
    namespaces: int = 1024
    inotify_instances: int = 128
    reserve: HostReserve = field(default_factory=HostReserve)

    @property
    def cgroup_memory_mb(self) -> int:
        """The machine's memory alone: its disk and /shared are filesystems on this computer's
        disk (`_write_mounts`), and every tmpfs it has (/dev/shm, /run, /dev) is sized and
        charged to this same cgroup, so it holds them inside this limit."""
        return self.memory_mb

    @property
    def shm_mb(self) -> int:
        """/dev/shm: half the machine's memory, as a tmpfs is by default on a Linux machine."""
        return max(1, self.memory_mb // 2)



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
    if images.cached(NODE_IMAGE) is None:
        return False, f"the machine image {NODE_IMAGE!r} is not built (make images)"
    if not os.path.exists("/dev/loop-control"):
        return False, "no /dev/loop-control for the machines' disks"
    if not Path("/sys/module/wireguard").exists() and shutil.which("wireguard-go") is None:
        return False, "no WireGuard kernel module and no wireguard-go"
    lacking = cgroup_lacks()
    if lacking:
        return False, (f"cgroup {'v2' if _cgroup_v2() else 'v1'} offers no {', '.join(lacking)} controller "
                       "for the machines' limits")
    for path in ("/etc/subuid", "/etc/subgid"):
        try:
            delegated = SUBID_LINE in Path(path).read_text().split()
        except OSError:
            delegated = False
        if not delegated:
            return False, f"{path} does not delegate {SUBID_LINE} (the node uid ranges)"
    probe = f"rcprobe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return False, f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    user = subprocess.run(
        [sys.executable, "-I", "-S", str(USERNS_HELPER), str(FIRST_UID), "1", "--", "unshare", "--mount", "true"],
        capture_output=True, text=True,
    )
    if user.returncode != 0:
        return False, f"cannot create a user namespace: {user.stderr.strip()}"
    return True, "Linux, root, user and network namespaces, WireGuard (%s)" % (
        "kernel" if Path("/sys/module/wireguard").exists() else "wireguard-go"
    )


def _short_id(text: str, length: int = 6) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:length]


def _ip(*args: str, check: bool = True, batch: str | None = None) -> subprocess.CompletedProcess:
    """One `ip` command; with `batch`, `ip -batch -` runs those lines (one process for all)."""
    if batch is not None:
        args = (*args, "-batch", "-")
    result = subprocess.run(["ip", *args], capture_output=True, text=True, input=batch)
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


# -- what every run on this computer shares: uid ranges, guard routes, gateway addresses -----


class UidRanges:
    """One uid range per running node, across every run of the product on this computer.

    A slot is a file `uids/<index>` naming the node's state directory; a slot whose node is
    no longer running (a run that was killed) is taken back."""

    @staticmethod
    def _dir() -> Path:
        return HOST_REGISTRY / "uids"

    @classmethod
    def claim(cls, state_dir: Path) -> int:
        owner = str(state_dir.resolve())
        with _locked(HOST_REGISTRY / ".uids.lock"):
            cls._dir().mkdir(parents=True, exist_ok=True)
            held = {int(slot.name): slot for slot in cls._dir().iterdir() if slot.name.isdigit()}
            # A never-used index first (one directory listing); a killed run's range is taken
            # back only when every one is held, so a boot reads no other node's state.
            index = next((i for i in range(RANGES) if i not in held), None)
            if index is None:
                index = next((i for i, slot in held.items() if cls._abandoned(slot)), None)
            if index is None:
                raise RuntimeError(f"all {RANGES} node uid ranges of this computer are in use")
            (cls._dir() / str(index)).write_text(owner)
            return FIRST_UID + index * RANGE_SIZE

    @staticmethod
    def _abandoned(slot: Path) -> bool:
        try:
            holder = Path(slot.read_text())
        except FileNotFoundError:
            return True
        return running(holder) is None and not _booting(holder)

    @classmethod
    def free(cls, state_dir: Path, base: int) -> None:
        slot = cls._dir() / str((base - FIRST_UID) // RANGE_SIZE)
        with _locked(HOST_REGISTRY / ".uids.lock"), contextlib.suppress(FileNotFoundError):
            if slot.read_text() == str(state_dir.resolve()):
                slot.unlink()


def _booting(state_dir: Path) -> bool:
    """A node between claiming its range and saving its handle (a boot in progress)."""
    try:
        return time.time() - (state_dir / "claimed").stat().st_mtime < 60
    except OSError:
        return False


class GuardRoutes:
    """Blackhole routes in this computer's namespace for the node ranges, kept while any run
    still holds one: every run registers itself, the last one out removes the route."""

    @staticmethod
    def _holders(network: str) -> Path:
        return HOST_REGISTRY / "guards" / network.replace("/", "_")

    @classmethod
    def hold(cls, run_id: str, networks: tuple[str, ...]) -> None:
        with _locked(HOST_REGISTRY / ".guards.lock"):
            cls.hold_locked(run_id, networks)

    @classmethod
    def hold_locked(cls, run_id: str, networks: tuple[str, ...]) -> None:
        """`hold`, for a caller that holds the guards' lock."""
        for network in networks:
            holders = cls._holders(network)
            holders.mkdir(parents=True, exist_ok=True)
            (holders / run_id).touch()
            _ip("route", "replace", "blackhole", network, check=False)

    @classmethod
    def release(cls, run_id: str, networks: tuple[str, ...]) -> None:
        with _locked(HOST_REGISTRY / ".guards.lock"):
            for network in networks:
                holders = cls._holders(network)
                with contextlib.suppress(FileNotFoundError):
                    (holders / run_id).unlink()
                if not holders.exists() or not any(holders.iterdir()):
                    _ip("route", "del", "blackhole", network, check=False)
                    # The folder goes with its last holder: runs come and go, each with a
                    # subnet of its own, and empty folders would pile up for every one.
                    with contextlib.suppress(FileNotFoundError):
                        holders.rmdir()

    @classmethod
    def left_empty(cls, network: str) -> bool:
        """The network's folder is there with nobody holding its route."""
        holders = cls._holders(network)
        return holders.is_dir() and not any(holders.iterdir())


class GatewayAddresses:
    """A loopback address per machine ever booted on this computer: a customer's known_hosts
    entry for an address never meets another machine's host key, and two runs of the product
    never share one."""

    @staticmethod
    def next() -> str:
        with _locked(GATEWAY_COUNTER.with_suffix(".lock")):
            try:
                serial = int(GATEWAY_COUNTER.read_text() or 0)
            except (FileNotFoundError, ValueError):
                serial = 0
            serial += 1
            GATEWAY_COUNTER.write_text(str(serial))
        # Skip .0 and .255 of every /24: some tools treat them as network or broadcast.
        hosts = GATEWAY_NETWORK.num_addresses // 256 * 254
        index = serial % hosts
        return str(GATEWAY_NETWORK.network_address + index // 254 * 256 + index % 254 + 1)


# -- a run's switch: a namespace with a bridge per cluster ---------------------------------


@dataclass(frozen=True)
class Underlay:
    """One run's switch: a namespace of its own holding one bridge per cluster (segment), and
    the run's subnet. Bridges are not joined: a node reaches only its own cluster's nodes."""

    run_dir: Path

    @property
    def run_id(self) -> str:
        return _short_id(str(self.run_dir.resolve()))

    @property
    def switch(self) -> str:
        return f"rcs-{self.run_id}"

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        """The run's subnet: drawn from its id, then the next one along that no other run of
        this computer holds (`_choose_subnet`): every node address is routed back to its own
        cluster's uplink from this computer's namespace (egress.py), so two runs never share one."""
        with contextlib.suppress(OSError, ValueError):
            return ipaddress.IPv4Network((self.run_dir / "underlay-subnet").read_text().strip())
        return self._drawn(0)

    def _drawn(self, step: int) -> ipaddress.IPv4Network:
        value = (int(self.run_id, 16) + step) % 4096
        return ipaddress.IPv4Network(f"172.{16 + value % 16}.{(value // 16) % 256}.0/24")

    def _choose_subnet(self) -> None:
        """Pick the run's subnet (under the guard routes' lock: what other runs hold is read there)."""
        chosen = self.run_dir / "underlay-subnet"
        if chosen.exists():
            return
        guards = HOST_REGISTRY / "guards"
        for step in range(4096):
            candidate = self._drawn(step)
            holders = guards / str(candidate).replace("/", "_")
            if not holders.is_dir() or not any(h.name != self.run_id for h in holders.iterdir()):
                chosen.write_text(str(candidate))
                return
        raise RuntimeError("every underlay subnet of this computer is held by another run")

    @property
    def gateway(self) -> str:
        """The address of every cluster's uplink, as its nodes see it: their default route."""
        return str(self.subnet.network_address + 1)

    @property
    def guarded(self) -> tuple[str, ...]:
        return (str(self.subnet), PRIVATE_NETWORK)

    def address(self, slot: int) -> str:
        return str(self.subnet.network_address + 10 + slot)

    def bridge(self, segment: str) -> str:
        return f"rcb{_short_id(f'{self.run_id}:{segment}', 8)}"

    def ensure(self, segment: str) -> str:
        """The switch, the segment's bridge and the host's guard routes; safe to call again,
        and from nodes booting at once. Returns the bridge."""
        bridge = self.bridge(segment)
        with _locked(self.run_dir / ".underlay.lock"):
            guards = self.run_dir / "guard-routes.json"
            if not guards.exists():
                with _locked(HOST_REGISTRY / ".guards.lock"):
                    self._choose_subnet()
                    GuardRoutes.hold_locked(self.run_id, self.guarded)
                guards.write_text(json.dumps(self.guarded))
            if not _netns_exists(self.switch):
                _ip("netns", "add", self.switch)
            self._make_bridge(bridge)
        return bridge

    def _make_bridge(self, bridge: str) -> None:
        """The segment's bridge, with its uplink to this computer (the nodes' way out) where this
        computer can give one; under the run's lock."""
        if _ip("-n", self.switch, "link", "show", bridge, check=False).returncode == 0:
            return
        _ip("-n", self.switch, "link", "add", bridge, "type", "bridge")
        _ip("-n", self.switch, "link", "set", bridge, "up")
        if not egress.available()[0]:
            return
        link, port = self.uplink(bridge)
        _ip("link", "del", link, check=False)  # what a killed run left of this name
        _ip("link", "add", link, "type", "veth", "peer", "name", port, "netns", self.switch)
        _ip("-n", self.switch, "link", "set", port, "master", bridge, "up")
        _ip("addr", "add", f"{self.gateway}/32", "dev", link)
        _ip("link", "set", link, "up")
        egress.open_link(link)

    @staticmethod
    def uplink(bridge: str) -> tuple[str, str]:
        """The segment's uplink: its end in this computer's namespace (a node link, holding the
        gateway address) and its port on the bridge."""
        return f"rcu{bridge[3:]}", f"rcg{bridge[3:]}"

    def route(self, address: str, bridge: str) -> None:
        """This computer's route back to a node of the segment, through the segment's uplink
        (replies to what it sent out). `add`, never `replace`: an address routed elsewhere
        would be another run's node, and stays its own."""
        link, _ = self.uplink(bridge)
        # Asked of this namespace: /sys shows the one that mounted it (a lab host's is not its own).
        with contextlib.suppress(OSError):
            socket.if_nametoindex(link)
            _ip("route", "add", f"{address}/32", "dev", link, "src", self.gateway)

    def unroute(self, address: str, bridge: str) -> None:
        link, _ = self.uplink(bridge)
        _ip("route", "del", f"{address}/32", "dev", link, check=False)

    def attach(self, veth: str, bridge: str, *, up: bool = True) -> None:
        """A node's port onto its segment's bridge (and up, unless told not to); under the
        run's lock, as `leave` removes a bridge whose last port has gone (a cluster's failed
        machine, while the others boot)."""
        port = ("-n", self.switch, "link", "set", veth, "master", bridge, *(("up",) if up else ()))
        with _locked(self.run_dir / ".underlay.lock"):
            if _ip(*port, check=False).returncode == 0:
                return
            self._make_bridge(bridge)
            _ip(*port)

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

    def leave(self, node_key: str, veth: str, bridge: str) -> None:
        """A node's port, its address slot, and its segment's bridge once it has no port."""
        slots_file = self.run_dir / "underlay-slots.json"
        with _locked(self.run_dir / ".underlay.lock"):
            if _netns_exists(self.switch):
                _ip("-n", self.switch, "link", "del", veth, check=False)
                ports = _ip("-n", self.switch, "-j", "link", "show", "master", bridge, check=False)
                link, uplink_port = self.uplink(bridge)
                if ports.returncode == 0 and not [port for port in json.loads(ports.stdout or "[]")
                                                  if port.get("ifname") != uplink_port]:
                    _ip("link", "del", link, check=False)  # its pair, the bridge's port, with it
                    _ip("-n", self.switch, "link", "del", bridge, check=False)
                    egress.close_links([link])
            slots = json.loads(slots_file.read_text()) if slots_file.exists() else {}
            slots.pop(node_key, None)
            slots_file.write_text(json.dumps(slots))

    def teardown(self) -> None:
        """The switch and this run's hold on the guard routes; only when no node of the run
        is left."""
        slots_file = self.run_dir / "underlay-slots.json"
        if slots_file.exists() and json.loads(slots_file.read_text()):
            return
        if _netns_exists(self.switch):
            links = [self.uplink(port["ifname"])[0] for port in json.loads(
                _ip("-n", self.switch, "-j", "link", "show", "type", "bridge", check=False).stdout or "[]")]
            for link in links:
                _ip("link", "del", link, check=False)
            _ip("netns", "del", self.switch, check=False)
            if links:
                egress.close_links(links)
        guards = self.run_dir / "guard-routes.json"
        if guards.exists():
            GuardRoutes.release(self.run_id, tuple(json.loads(guards.read_text())))
            guards.unlink(missing_ok=True)


# -- a node ---------------------------------------------------------------------------------


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
    uid_base: int = 0  # host uid of the node's root
    bridge: str = ""
    cgroup: str = ""  # the node's cgroup name under each controller's runcrate/
    gateway: str = ""  # "127.64.x.y:2222", the customer's way in
    host_key: str = field(default="", repr=False)  # the node's public host key line
    # The GPUs given to it (cdi.py): the spec's kind, its device names, their device nodes
    # ("/dev/nvidia0 195:0").
    gpu_kind: str = ""
    gpus: list[str] = field(default_factory=list)
    gpu_nodes: list[str] = field(default_factory=list)

    @property
    def proxy_command(self) -> str:
        return proxy_command(self.netns)

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


NETNS_DIR = Path("/run/netns")


def proxy_command(netns: str) -> str:
    """Reach the node's sshd: enter only its network namespace, dial its own loopback.

    The namespace is entered by its bind mount (`ip netns attach` at boot), which stays this
    node's until release deletes it, never by the host pid of the node's PID 1: once PID 1
    dies that pid is free, and the next process to get it may sit in this computer's network
    namespace or another tenant's. A node whose PID 1 died keeps its namespace, with nothing
    listening in it: the connection is refused."""
    return f"nsenter --net={NETNS_DIR / netns} socat - TCP:127.0.0.1:22,nodelay"


def _init_name(state_dir: Path) -> str:
    """The name the node's PID 1 runs under: it tells this node's init from any other process
    that reuses its pid, and says nothing of this computer (the node's root reads it)."""
    return f"runcrate-node-{_short_id(str(state_dir), 16)}"


def _is_node_init(pid: int, state_dir: Path) -> bool:
    """True if `pid` is still this node's PID 1 (pids get reused)."""
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return _init_name(state_dir).encode() in command_line


def _root_dir(node: str) -> Path:
    """Where the node's directory is (`_node_dir` makes it)."""
    return HOST_REGISTRY / "roots" / node


def _node_dir(node: str) -> Path:
    """The node's directory of this computer, where stage one mounts (in the node's own mount
    namespace) its disks, the idmapped image and its root; only empty mount points are ever
    seen here from this computer's namespace. Every directory on the way is searchable by the
    node's root, nothing in them listable."""
    roots = HOST_REGISTRY / "roots"
    if not roots.is_dir():
        roots.mkdir(parents=True, exist_ok=True)
        for path in (HOST_REGISTRY, roots):
            path.chmod(0o711)
    folder = _root_dir(node)
    _remove_node_dir(node)
    folder.mkdir(mode=0o711)
    folder.chmod(0o711)
    return folder


def _remove_node_dir(node: str) -> None:
    """The node's directory and its mount points, once its mount namespace is gone. Only
    `rmdir`: a directory that is not empty (a mount still there) is left alone."""
    folder = _root_dir(node)
    if not folder.is_dir():
        return
    for directory, _, _ in os.walk(folder, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _in_own_namespaces(pid: int) -> bool:
    """True once `pid` has left this computer's user and network namespaces."""
    try:
        return all(os.readlink(f"/proc/{pid}/ns/{kind}") != os.readlink(f"/proc/self/ns/{kind}") for kind in ("user", "net"))
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


# -- cgroups ----------------------------------------------------------------------------------


def _cgroup_v2() -> bool:
    """The host runs the unified hierarchy (cgroup v2) when its /sys/fs/cgroup is one: chosen
    by what it mounts, as Debian 11+ and Ubuntu 22.04+ do by default; v1 otherwise."""
    return Path("/sys/fs/cgroup/cgroup.controllers").exists()


# What a node's limits need of the hierarchy: without these a machine would run unlimited.
V2_CONTROLLERS = ("memory", "pids", "cpu")


def cgroup_lacks() -> list[str]:
    """The controllers a node's limits need that this host's hierarchy does not offer: on v2,
    those missing from the root's `cgroup.controllers` (bound to a v1 hierarchy, or not
    built); on v1, those without a mounted hierarchy."""
    if _cgroup_v2():
        offered = Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()
        return [controller for controller in V2_CONTROLLERS if controller not in offered]
    return [controller for controller in CGROUP_CONTROLLERS if controller in V2_CONTROLLERS
            and not Path("/sys/fs/cgroup", controller).is_dir()]


def _cgroup_dirs(name: str) -> list[Path]:
    if _cgroup_v2():
        return [Path("/sys/fs/cgroup/runcrate") / name]
    return [Path("/sys/fs/cgroup", controller, "runcrate", name)
            for controller in CGROUP_CONTROLLERS if Path("/sys/fs/cgroup", controller).is_dir()]


def host_share(reserve: HostReserve) -> tuple[int, int]:
    """(bytes, processes) every node of this computer may use together: its memory and its
    process count less what it keeps for itself. Limits, not reservations: the nodes' own
    limits may add up to more, and then the parent's limit is the one that holds."""
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
    memory = int(fields["MemTotal"].split()[0]) * 1024 - (reserve.memory_mb << 20)
    processes = min(int(Path("/proc/sys/kernel/pid_max").read_text()),
                    int(Path("/proc/sys/kernel/threads-max").read_text())) - reserve.pids
    if memory < 256 << 20 or processes < 1024:
        raise RuntimeError(f"this computer cannot keep {reserve.memory_mb} MB and {reserve.pids} processes "
                           "for itself and still run a node")
    return memory, processes


def _write_limits(path: Path, settings: dict[str, str], *, strict: bool = True) -> None:
    """Write `settings` in order, then once more those refused: v1 refuses a memory limit
    above its memory+swap twin (when raising) and the reverse (when lowering). Not `strict`
    (the parent), a limit below what is in use now (EBUSY) keeps the one in force, and the
    operator's log says so; a node's own limits must hold, or it does not boot."""
    refused = []
    for file, value in settings.items():
        if (path / file).exists():
            try:
                (path / file).write_text(value)
            except OSError:
                refused.append(file)
    for file in refused:
        try:
            (path / file).write_text(settings[file])
        except OSError as error:
            if strict:
                raise
            print(f"runcrate: {path / file} stays at {(path / file).read_text().strip()}: {error}", file=sys.stderr)


def _cpu_list(text: str) -> list[int]:
    """"0-3,6" → [0, 1, 2, 3, 6] (the kernel's CPU list format)."""
    cpus: list[int] = []
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return cpus


def _node_cpus(available: list[int], limits: NodeLimits, spread: int) -> str:
    """The CPUs of a node limited to `limits.cpus` of them: consecutive ones, starting where
    `spread` (its uid range's index) puts it, so that small nodes land on different CPUs."""
    if not limits.cpus or limits.cpus >= len(available):
        return ",".join(map(str, available))
    start = spread * limits.cpus % len(available)
    return ",".join(str(available[(start + i) % len(available)]) for i in range(limits.cpus))


def _make_cgroup(name: str, limits: NodeLimits, spread: int = 0, gpus: cdi.Edits | None = None) -> list[Path]:
    """The node's cgroup under every controller, with its limits written before any of its
    processes start, in the parent every node of this computer shares (`runcrate/`), whose
    limits leave this computer its reserve (`host_share`). Every boot writes the parent's
    limits again: a changed reserve holds from the next boot on."""
    lacking = cgroup_lacks()
    if lacking:
        raise RuntimeError(f"cgroup {'v2' if _cgroup_v2() else 'v1'} offers no {', '.join(lacking)} controller "
                           "for the machine's limits")
    memory = str(limits.cgroup_memory_mb * 1024 * 1024)
    shared_memory, shared_pids = host_share(limits.reserve)
    if _cgroup_v2():
        parent = Path("/sys/fs/cgroup/runcrate")
        parent.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):
            (parent / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        _write_limits(parent, {"memory.max": str(shared_memory), "memory.swap.max": "0", "pids.max": str(shared_pids)},
                      strict=False)
        with contextlib.suppress(OSError):
            (parent / "cgroup.subtree_control").write_text("+cpuset")
        # The cpuset controller is optional (a node then shares every CPU, weighted); the
        # limits that keep a tenant from hurting the host are not (cgroup_lacks, checked first).
        effective = Path("/sys/fs/cgroup/cpuset.cpus.effective")
        available = _cpu_list(effective.read_text()) if effective.exists() else []
        settings = {"memory.max": memory, "memory.swap.max": "0", "pids.max": str(limits.pids),
                    "cpu.weight": str(max(1, min(10_000, limits.cpu_shares * 100 // 1024))),
                    **({"cpuset.cpus": _node_cpus(available, limits, spread)} if available else {})}
    else:
        # v1: the memory hierarchy is always hierarchical on this kernel (use_hierarchy is
        # 1 and fixed since Linux 5.11), so the parent's limit counts every node's pages.
        for path in {path.parent for path in _cgroup_dirs(name)}:
            path.mkdir(exist_ok=True)
            _write_limits(path, {"memory.limit_in_bytes": str(shared_memory),
                                 "memory.memsw.limit_in_bytes": str(shared_memory), "pids.max": str(shared_pids)},
                          strict=False)
        # v1's cpuset: a new cgroup has no CPU and no memory node until given some, and
        # nothing can join it before.
        cpuset = Path("/sys/fs/cgroup/cpuset")
        available = _cpu_list((cpuset / "cpuset.cpus").read_text()) if cpuset.is_dir() else []
        if available:
            (cpuset / "runcrate").mkdir(exist_ok=True)
            for file in ("cpuset.cpus", "cpuset.mems"):
                if not (cpuset / "runcrate" / file).read_text().strip():
                    (cpuset / "runcrate" / file).write_text((cpuset / file).read_text())
        settings = {"memory.limit_in_bytes": memory, "memory.memsw.limit_in_bytes": memory,
                    "pids.max": str(limits.pids), "cpu.shares": str(limits.cpu_shares),
                    **({"cpuset.cpus": _node_cpus(available, limits, spread),
                        "cpuset.mems": (cpuset / "runcrate" / "cpuset.mems").read_text().strip()} if available else {})}
    dirs = _cgroup_dirs(name)
    for path in dirs:
        path.mkdir(parents=True, exist_ok=True)
    for path in dirs:
        _write_limits(path, settings)
    for path in dirs:
        if (path / "devices.deny").exists():
            # The device nodes it was given, and only those, even if one appeared in its /dev.
            (path / "devices.deny").write_text("a")
            for rule in [*(f"c {major}:{minor} rwm" for _, major, minor in DEVICES), *DEVICES_ALLOWED,
                         *(gpus.cgroup_rules() if gpus is not None else [])]:
                (path / "devices.allow").write_text(rule)
    return dirs


def _in_cgroup(dirs: list[Path], command: list[str]) -> list[str]:
    """`command` started in the cgroup `dirs`, so everything it starts is counted against the
    node: a shell writes its own pid there and execs it. Not a `preexec_fn`: Python code run
    between fork and exec in a process with threads (the worker boots a cluster's nodes from
    one thread each) can deadlock on a lock another thread held at the fork, and the node then
    never starts. A cgroup it cannot join stops it (status 125): nothing of a node runs
    outside its limits."""
    if not dirs:
        return command
    paths = " ".join(shlex.quote(str(path / "cgroup.procs")) for path in dirs)
    return ["sh", "-c", f'for procs in {paths}; do echo $$ > "$procs" || exit 125; done; exec "$@"', "sh", *command]


def _kill_cgroup(name: str) -> None:
    for path in _cgroup_dirs(name)[:1]:
        for _ in range(50):
            try:
                pids = [int(pid) for pid in (path / "cgroup.procs").read_text().split()]
            except OSError:
                return
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)


def _remove_cgroup(name: str) -> None:
    for path in _cgroup_dirs(name):
        deadline = time.monotonic() + 5
        while path.exists() and time.monotonic() < deadline:
            try:
                path.rmdir()
            except OSError:  # its last processes are still exiting
                time.sleep(0.05)


# -- boot -------------------------------------------------------------------------------------


# The whole environment a node's PID 1 starts with, and every command run in a node from here.
NODE_ENVIRONMENT = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

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
# The control plane's key sets SHLVL=1 (runcrate_control_plane_keys): Debian's bash, started
# by sshd as a top-level shell, would read /etc/bash.bashrc and ~/.bashrc first. Customers'
# sessions are unchanged.
PermitUserEnvironment SHLVL
MaxSessions 64
LogLevel ERROR
Subsystem sftp internal-sftp
"""

# A node's boot is one process (nodeboot.py, standard library only): stage one as this computer's
# root (disks, the idmapped image, what the node gets from this computer, its /dev, its
# namespaces), then stage two as the node's PID 1 (its root, pivot_root, /proc, /sys, cgroups,
# /run), which becomes the image's bash once sshd is started. The plan it follows is
# `_boot_plan`, passed on its stdin.
BOOT_HELPER = Path(__file__).with_name("nodeboot.py")


# How long a boot may take: seconds on a quiet computer; a computer booting 64 nodes at once
# beside other work may take many times that.
BOOT_WAIT = 45
# What a boot may print before its marker (a good one prints the marker line alone).
BOOT_OUTPUT_CAP = 64 * 1024


def _user_limits(limits: NodeLimits) -> dict[str, int]:
    """The node's limits in its outer user namespace's /proc/sys/user (userns.py). The node's
    own namespace of each kind counts one there, so the node itself may make `namespaces`."""
    kinds = ("user", "mnt", "net", "pid", "ipc", "uts", "cgroup", "time")
    return {**{f"max_{kind}_namespaces": limits.namespaces + 1 for kind in kinds},
            "max_inotify_instances": limits.inotify_instances}


def boot(
    run_dir: Path,
    state_dir: Path,
    *,
    key: str,
    hostname: str,
    authorized_keys: str,
    segment: str = "default",
    limits: NodeLimits | None = None,
    boot_fails: bool = False,
    drop_wireguard: bool = False,
    files: dict[str, str] | None = None,
    binds: dict[str, str] | None = None,
    image_name: str = NODE_IMAGE,
    gpus: list[str] | None = None,
    cdi_spec: str | None = None,
) -> NodeHandle:
    """Start one node (idempotent: an already running node is returned as it is).

    `segment` names the node's network: nodes of one segment (a cluster) share a bridge,
    nodes of different segments share nothing. `files` are written into the node's /etc or
    /var before it boots (a fault file); `binds` maps a node path to a host directory mounted
    there (an attached volume: handed to the node's root). `image_name` is the machine image
    (images.IMAGES) the node's root filesystem comes from. `gpus` are the names of the devices
    of the host's CDI spec (`cdi_spec`, else the one in /etc/cdi or /var/run/cdi for NVIDIA
    GPUs) the node is given, with the driver's files the spec lists, and nothing else of them."""
    existing = NodeHandle.load(state_dir)
    if existing and _is_node_init(existing.pid, state_dir):
        return existing
    if existing:
        release(run_dir, state_dir)
    image = images.cached(image_name)
    if image is None:
        raise RuntimeError(f"node {hostname} did not boot: the machine image {image_name!r} is not built "
                           f"(python -m clusters.providers.local.images build {image_name})")
    limits = limits or NodeLimits()
    given = None
    if gpus:
        try:
            spec_path = Path(cdi_spec) if cdi_spec else cdi.find_spec()
            if spec_path is None:
                raise cdi.CDIError("this host has no device spec for its GPUs (nvidia-ctk cdi generate)")
            given = cdi.edits(cdi.load(spec_path), [str(name) for name in gpus])
        except cdi.CDIError as error:
            raise RuntimeError(f"node {hostname} did not boot: its GPUs could not be given: {error}") from error
    underlay = Underlay(run_dir)
    bridge = underlay.ensure(segment)
    node_id = _short_id(f"{run_dir.resolve()}:{key}", 8)
    netns, veth = f"rcn-{node_id}", f"rcv{node_id}"
    cgroup = f"{underlay.run_id}-{node_id}"
    slot = underlay.slot_for(key)
    address = underlay.address(slot)

    # LXCFS is this computer's, not the node's: a host without it refuses before anything is held.
    lxcfs_binds = keep_lxcfs() is not None
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True)
    (state_dir / "claimed").touch()
    base = UidRanges.claim(state_dir)
    handle = NodeHandle(key=key, netns=netns, veth=veth, pid=0, address=address, state_dir=str(state_dir),
                        uid_base=base, bridge=bridge, cgroup=cgroup, host_key="",
                        gpu_kind=given.kind if given else "", gpus=given.devices if given else [],
                        gpu_nodes=[f"{node.path} {node.major}:{node.minor}" for node in given.device_nodes] if given else [])
    # From here on a failure releases what the boot held (its uid range first of all), so a
    # machine that did not start leaves nothing behind for its wipe receipt to find.
    handle.save()
    try:
        dirs, launcher = _launch(state_dir, handle, image, hostname=hostname, authorized_keys=authorized_keys,
                                 boot_fails=boot_fails, files=files or {}, binds=binds or {}, limits=limits,
                                 lxcfs_binds=lxcfs_binds, gpus=given)
    except BaseException:
        release(run_dir, state_dir)
        raise
    assert launcher.stdout is not None
    with _BootOutput(launcher.stdout) as output:
        _wait_for_boot(run_dir, handle, hostname, launcher, output, dirs, underlay, drop_wireguard=drop_wireguard)
    return handle


def _launch(state_dir: Path, handle: NodeHandle, image: Path, *, hostname: str, authorized_keys: str,
            boot_fails: bool, files: dict[str, str], binds: dict[str, str], limits: NodeLimits,
            lxcfs_binds: bool, gpus: cdi.Edits | None) -> tuple[list[Path], subprocess.Popen]:
    """Write the node's seed, make its cgroup and start its boot (nodeboot.py) with its plan
    (the handle gets the node's host key): the node's cgroup folders and the boot's process."""
    base, cgroup = handle.uid_base, handle.cgroup
    handle.host_key = _write_seed(state_dir / "seed", image, hostname=hostname, authorized_keys=authorized_keys,
                                  boot_fails=boot_fails, files=files, gpus=gpus)
    for host_path in binds.values():
        Path(host_path).mkdir(parents=True, exist_ok=True)
        # The volume is the node's now: its root owns every file (and the next node's root
        # takes it over on its attach).
        subprocess.run(["chown", "-R", f"{base}:{base}", host_path], check=True, capture_output=True)
    # The node's root is mounted (in a mount namespace of the node's own) in a directory of
    # this computer that its root may walk to: the state directory may sit in a folder only
    # this computer's root can enter (a test's tmp_path).
    node_dir = _node_dir(cgroup)
    dirs = _make_cgroup(cgroup, limits, spread=(base - FIRST_UID) // RANGE_SIZE, gpus=gpus)
    plan = _boot_plan(state_dir, node_dir, image, base=base, hostname=hostname, limits=limits, cgroup=cgroup,
                      binds=binds, lxcfs_binds=lxcfs_binds, gpus=gpus)
    # Its stdout and stderr (stage one's, then PID 1's) are a pipe read here, never a file of
    # this computer: a node's root can take a copy of any descriptor its PID 1 holds
    # (pidfd_getfd), and a host file would be this computer's disk to fill. Its environment is
    # the node's: the node's root reads PID 1's, and nothing of the control plane's is in it.
    launcher = subprocess.Popen(
        [sys.executable, "-I", "-S", str(BOOT_HELPER), _init_name(state_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        env=NODE_ENVIRONMENT,
    )
    assert launcher.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        launcher.stdin.write(json.dumps(plan).encode())
    launcher.stdin.close()
    return dirs, launcher


def _wait_for_boot(run_dir: Path, handle: NodeHandle, hostname: str, launcher: subprocess.Popen, output: _BootOutput,
                   dirs: list[Path], underlay: Underlay, *, drop_wireguard: bool) -> None:
    """Find the node's PID 1, wire it to its network and wait for its boot marker (or the
    deadline); a node that does not boot is released and the reason raised."""
    state_dir = Path(handle.state_dir)
    pid = 0
    deadline = time.monotonic() + BOOT_WAIT
    # The waits back off (to 0.1 s): 64 nodes booting at once each polling /proc every 10 ms
    # cost more of the computer than the boots.
    delay = 0.01
    while time.monotonic() < deadline and not pid:
        # The launcher's children are stage one's tools (mount, cp, userns.py's map writer), then PID 1.
        pid = next((child for child in _children(launcher.pid) if _is_node_init(child, state_dir)
                    and _in_own_namespaces(child)), 0)
        if launcher.poll() is not None:
            break
        if not pid:
            output.wait(delay)
            delay = min(delay * 1.5, 0.1)
    handle.pid = pid
    handle.save()
    (state_dir / "claimed").unlink()
    if pid:
        try:
            _plug(handle, underlay, drop_wireguard=drop_wireguard)
        except RuntimeError as error:
            # A PID 1 that ended before it was wired (sshd refused to start) is a boot that
            # failed: its own words say why, below.
            if _booting_init(pid, launcher):
                release(run_dir, state_dir)
                raise RuntimeError(f"node {hostname} could not be wired to its network: {error}") from error
    delay = 0.02
    while (time.monotonic() < deadline and pid and not output.booted and not output.over_cap
           and _booting_init(pid, launcher)):
        output.wait(delay)
        delay = min(delay * 1.5, 0.1)
    if not pid or not output.booted:
        facts = _why_not_booted(launcher, pid, state_dir, dirs, deadline, output)
        release(run_dir, state_dir)
        # Every writer is gone with the node: what they said last is all in the pipe now.
        output.drain()
        reason = "; ".join(filter(None, [output.tail(), facts]))
        raise RuntimeError(f"node {hostname} did not boot: {reason}")


class _BootOutput:
    """What a booting node's stage one and PID 1 print (their stdout and stderr, one pipe),
    read until the boot marker: a few lines on a good boot, the failing command and its
    program's words on a bad one. At most BOOT_OUTPUT_CAP bytes are read; a boot that says
    more never boots. Closing the pipe after the marker leaves nothing of it in the node (PID 1
    moved to the node's /dev/null before; a later write would only fail)."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self._pipe = pipe
        self._fd = pipe.fileno()
        self._read = bytearray()
        self.booted = False
        self.ended = False  # end of file, or the cap
        self.over_cap = False

    def __enter__(self) -> _BootOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pipe.close()

    def wait(self, timeout: float) -> None:
        """Read what arrives within `timeout` (or just wait, once the pipe has ended)."""
        if self.ended:
            time.sleep(timeout)
            return
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if ready:
            self._take()

    def _take(self) -> None:
        chunk = os.read(self._fd, min(65536, BOOT_OUTPUT_CAP - len(self._read)))
        self._read += chunk
        if not chunk or len(self._read) >= BOOT_OUTPUT_CAP:
            self.ended = True
            self.over_cap = bool(chunk)
        # The marker is PID 1's own line, printed once sshd runs; nothing of the customer's
        # runs before it.
        if not self.booted and (BOOTED + "\n").encode() in self._read:
            self.booted = True

    def drain(self, timeout: float = 2.0) -> None:
        """Read to the end of the pipe (or the cap, or `timeout`)."""
        deadline = time.monotonic() + timeout
        while not self.ended and time.monotonic() < deadline:
            self.wait(max(0.0, deadline - time.monotonic()))

    def tail(self, size: int = 400) -> str:
        said = self._read.decode(errors="replace")[-size:].strip()
        if self.over_cap:
            said = f"{said} [it printed more than {BOOT_OUTPUT_CAP} bytes]"
        return said


def _booting_init(pid: int, launcher: subprocess.Popen) -> bool:
    """True while the booting node's PID 1 runs. Not by its command line: PID 1 becomes the
    image's bash by execve, and while the kernel loads it the command line reads empty. Its
    parent is the launcher, which has not reaped it while it runs: the pid is still PID 1's."""
    if launcher.poll() is not None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _why_not_booted(launcher: subprocess.Popen, pid: int, state_dir: Path, dirs: list[Path], deadline: float,
                    output: _BootOutput) -> str:
    """What became of a boot that printed no marker, for the operator's log: the launcher's
    exit status, PID 1's fate, the wait, the output cap and the memory limit's kills."""
    status = launcher.poll()
    facts = [f"launcher exited with status {status}" if status is not None else "launcher still running"]
    if output.over_cap:
        facts.append(f"stopped reading its output at {BOOT_OUTPUT_CAP} bytes")
    if not pid and status is not None:
        facts.append("PID 1 was not seen running before the launcher exited")
    elif not pid:
        facts.append("PID 1 never started")
    elif not _booting_init(pid, launcher):
        facts.append(f"PID 1 ({pid}) exited")
    if time.monotonic() >= deadline:
        facts.append(f"gave up waiting after {BOOT_WAIT} s")
    # The memory controller comes first in `dirs`; v2 counts its kills in memory.events, v1
    # in memory.oom_control, both as an "oom_kill N" line.
    for events_file in ("memory.events", "memory.oom_control"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            events = dict(line.split() for line in (dirs[0] / events_file).read_text().splitlines())
            if events.get("oom_kill", "0") != "0":
                facts.append(f"{events['oom_kill']} processes killed at the memory limit")
            break
    return ", ".join(facts)


def _write_seed(seed: Path, image: Path, *, hostname: str, authorized_keys: str, boot_fails: bool,
                files: dict[str, str], gpus: cdi.Edits | None = None) -> str:
    """What the node's writable layer starts with over the image (stage one copies it there):
    its sshd's configuration with a host key made now, the control plane's key, fault files.
    Returns the public key."""
    ssh_dir = seed / "etc/ssh"
    ssh_dir.mkdir(parents=True)
    host_key = write_host_key(ssh_dir / "ssh_host_ed25519_key", f"root@{hostname}")
    gpu_env = gpus.env if gpus is not None else []
    # The GPUs' environment (their spec's `env`) in every session: sshd sets it, and login
    # shells read it too.
    (ssh_dir / "sshd_config").write_text(SSHD_CONFIG + "".join(f"SetEnv {shlex.quote(v)}\n" for v in gpu_env))
    if gpu_env:
        (seed / "etc/profile.d").mkdir(parents=True)
        (seed / "etc/profile.d/runcrate-gpus.sh").write_text(
            "".join(f"export {shlex.quote(v)}\n" for v in gpu_env))
    (ssh_dir / "runcrate_control_plane_keys").write_text(control_plane_keys(authorized_keys))
    if boot_fails:
        (seed / "etc/runcrate").mkdir()
        (seed / "etc/runcrate/boot-fault").write_text("boot_fails\n")
    for path in files:
        if not path.startswith(("/etc/", "/var/")):
            raise ValueError(f"{path} is not under /etc or /var")
    # The way out: this computer's resolvers, proxy and added certificate authorities (egress.py).
    for path, text in {**egress.node_files(image), **files}.items():
        (seed / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (seed / path.lstrip("/")).write_text(text)
    # A directory of the layer stands for the image's own in the node (overlay shows the upper
    # one's mode): keep the image's.
    for directory, _, _ in os.walk(seed):
        relative = os.path.relpath(directory, seed)
        try:
            os.chmod(directory, stat.S_IMODE(os.stat(image / relative).st_mode))
        except FileNotFoundError:
            os.chmod(directory, 0o755)
    return host_key


# What the control plane's sessions on a node read of the node: no ~/.ssh/rc, and a login
# shell that starts as if nested (bash reads no rc file then; see SSHD_CONFIG). A node's root
# can undo both (its sshd is its own): the runner's deadline and output cap are what hold.
CONTROL_PLANE_KEY_OPTIONS = 'no-user-rc,no-pty,no-agent-forwarding,no-X11-forwarding,environment="SHLVL=1"'


def control_plane_keys(authorized_keys: str) -> str:
    """The control plane's authorized_keys lines with CONTROL_PLANE_KEY_OPTIONS."""
    return "".join(f"{CONTROL_PLANE_KEY_OPTIONS} {line.strip()}\n" for line in authorized_keys.splitlines()
                   if line.strip() and not line.lstrip().startswith("#"))


# The links every Linux /dev has, made in the node's /dev at boot.
DEV_LINKS = (("ptmx", "pts/ptmx"), ("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"))
# What the node's devices cgroup (v1) lets it open besides DEVICES and its GPUs: its own
# terminals (devpts's ptmx and ptys).
DEVICES_ALLOWED = ("c 5:2 rwm", "c 136:* rwm")


def _boot_plan(state_dir: Path, node_dir: Path, image: Path, *, base: int, hostname: str, limits: NodeLimits,
               cgroup: str, binds: dict[str, str], lxcfs_binds: bool, gpus: cdi.Edits | None) -> dict[str, Any]:
    """What the node's boot (nodeboot.py) does, as data: its cgroups, its disks (image, size in
    MiB, mount point: its root's writable layer, then /shared), everything it gets from this
    computer (`mounts`, fstab's fields), its device nodes, and what its PID 1 binds.

    The disks are on this computer's disk, not in its memory: an ext4 filesystem in a sparse
    file of the machine's size, so the node's memory limit is its machine's memory alone and a
    full disk stops at the machine's size. The files are in the node's disks folder, which
    release removes."""
    ids = f"uid={base},gid={base}"
    disks = _disks_dir(cgroup)
    cgroup_dirs = _cgroup_dirs(cgroup)
    devices = [{"path": name, "major": major, "minor": minor, "mode": 0o666} for name, major, minor in DEVICES]
    if gpus is not None:
        devices += [{"path": node.path.removeprefix("/dev/"), "type": node.type, "major": node.major,
                     "minor": node.minor, "mode": node.mode, "uid": node.uid, "gid": node.gid}
                    for node in gpus.device_nodes]
    mounts = [
        # The node's own cgroups, read-only (it cannot raise its limits), where the node's
        # PID 1 finds them to put under its /sys/fs/cgroup.
        *((str(path), f"{node_dir}/cgroup/{path.parent.parent.name}", "none", ["bind", "ro"])
          for path in cgroup_dirs if not _cgroup_v2()),
        ("node-dev", f"{node_dir}/dev", "tmpfs", ["mode=0755", "size=64k", "nosuid", "noexec", ids]),
        ("node-dev-net", f"{node_dir}/dev/net", "tmpfs", ["mode=0755", "size=4k", "nosuid", "noexec"]),
        # Sized (half the machine's memory) and mounted from here, so the node's root cannot
        # remount it larger; only the node's processes reach it, so its pages are charged to
        # the node's memory cgroup (they outlive the process that wrote them, not the node).
        ("node-shm", f"{node_dir}/dev/shm", "tmpfs", ["mode=1777", "nosuid", "nodev", f"size={limits.shm_mb}m", ids]),
        *((host_path, f"{node_dir}/volumes/{index}", "none", ["bind", "nosuid", "nodev"])
          for index, host_path in enumerate(binds.values())),
    ]
    return {
        "base": base, "range": RANGE_SIZE, "node_dir": str(node_dir), "image": str(image),
        "seed": str(state_dir / "seed"), "hostname": hostname, "booted": BOOTED, "environment": NODE_ENVIRONMENT,
        "user_limits": _user_limits(limits),
        "cgroups": [str(path / "cgroup.procs") for path in cgroup_dirs if path.parent.parent.name != "devices"],
        "devices_cgroup": [str(path / "cgroup.procs") for path in cgroup_dirs if path.parent.parent.name == "devices"],
        "disks": [[str(disks / name), size, str(target)]
                  for name, size, target in (("disk.img", limits.disk_mb, node_dir / "layer"),
                                             ("shared.img", limits.shared_mb, node_dir / "shared"))],
        "mounts": [list(entry) for entry in mounts],
        "devices": devices,
        "links": [list(link) for link in DEV_LINKS],
        "node": {
            "volumes": list(binds),
            "host_mounts": [{"host_path": m.host_path, "container_path": m.container_path, "options": m.options}
                            for m in (gpus.mounts if gpus is not None else [])],
            "links": [list(link) for link in (gpus.links if gpus is not None else [])],
            "lxcfs": {"mount": str(lxcfs.MOUNT), "proc_dir": lxcfs.PROC_DIR, "cpu_dir": lxcfs.CPU_DIR}
            if lxcfs_binds else None,
            "dirs": list(NODE_DIRS),
        },
    }


def _plug(handle: NodeHandle, underlay: Underlay, *, drop_wireguard: bool) -> None:
    """The node's eth0, in the network namespace its PID 1 made, on its segment's bridge."""
    _ip("netns", "attach", handle.netns, str(handle.pid))
    # Both ends made where they belong: the port in the switch, eth0 in the node.
    _ip("link", "add", handle.veth, "netns", underlay.switch, "type", "veth", "peer", "name", "eth0",
        "netns", handle.netns)
    # Fault `never_joins`: the switch port stays down, so every WireGuard packet to or from
    # the node is dropped (the underlay carries nothing else: all the rest goes over wg0).
    # Routing rules cannot do it: wireguard-go pins the outgoing interface, and the kernel
    # then sends even where the routing table says blackhole.
    underlay.attach(handle.veth, handle.bridge, up=not drop_wireguard)
    # The default route: the segment's uplink, where this computer lets the node out (egress.py).
    way_out = f"route add default via {underlay.gateway} dev eth0\n" if egress.available()[0] else ""
    _ip("-n", handle.netns, batch=f"addr add {handle.address}/{underlay.subnet.prefixlen} dev eth0\n"
                                  f"link set eth0 up\n{way_out}")
    if way_out:
        underlay.route(handle.address, handle.bridge)


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


LXCFS_HELPER = Path(__file__).with_name("lxcfs.py")


def keep_lxcfs() -> bool | None:
    """LXCFS alive on this computer (lxcfs.py): started if it is not running, and if it had to
    be started while nodes ran, its files bound again into each of them (a dead daemon's files
    answer ENOTCONN). None where LXCFS is not installed (nodes then read this computer's
    figures); else whether it was started now. Every boot and every health round call it."""
    if not lxcfs.available():
        return None
    if not lxcfs.ensure(HOST_REGISTRY):
        return False
    for slot in UidRanges._dir().iterdir() if UidRanges._dir().is_dir() else ():
        with contextlib.suppress(OSError):
            handle = running(Path(slot.read_text()))
            if handle is not None:
                subprocess.run([sys.executable, "-I", "-S", str(LXCFS_HELPER), "rebind", str(handle.pid)],
                               capture_output=True, timeout=30)
    return True


def _top_mount(pid: int, path: str) -> str | None:
    """The device (major:minor) of the top mount on `path` in the node of PID 1 `pid`."""
    found = None
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
            fields = line.split()
            if fields[4] == path:
                found = fields[2]
    return found


def lend_shared(head: NodeHandle, worker: NodeHandle) -> bool:
    """Mount the head's /shared on the worker's /shared: the head's own filesystem, at the
    speed of this computer's disk, where a network mount of it would cross FUSE, SSH and the
    head's sftp server (docs/nodeops.md "/shared"). Both nodes are on this computer; the mount
    is idmapped from the head's uid range to the worker's. True when the worker has it (now
    or already); False when either node is gone."""
    device = _top_mount(head.pid, "/shared")
    if device is None or _top_mount(worker.pid, "/shared") is None:
        return False
    if _top_mount(worker.pid, "/shared") == device:
        return True
    lent = subprocess.run(
        [sys.executable, "-I", "-S", str(IMAGES_HELPER), "lend", str(head.pid), "/shared", str(worker.pid), "/shared",
         "--source-base", str(head.uid_base), "--target-base", str(worker.uid_base), "--size", str(RANGE_SIZE)],
        capture_output=True, text=True, timeout=30,
    )
    if lent.returncode != 0:
        raise RuntimeError(lent.stderr.strip() or f"lend exited with status {lent.returncode}")
    return True


def running(state_dir: Path) -> NodeHandle | None:
    handle = NodeHandle.load(state_dir)
    if handle and _is_node_init(handle.pid, state_dir) and _in_node_netns(handle):
        return handle
    return None


def _in_node_netns(handle: NodeHandle) -> bool:
    """True if the node's PID 1 pid is a process in the node's own network namespace: a
    process of another node that reused the pid and took PID 1's name is not this node.
    (Before boot attaches the namespace there is nothing to compare: the name decides.)"""
    try:
        attached = (NETNS_DIR / handle.netns).stat()
    except OSError:
        return True
    try:
        own = os.stat(f"/proc/{handle.pid}/ns/net")
    except OSError:
        return False
    return (own.st_dev, own.st_ino) == (attached.st_dev, attached.st_ino)


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
    """Run a command inside the node as its root would (every namespace of it, its cgroup,
    its limits): tests and the bench."""
    dirs = _cgroup_dirs(handle.cgroup) if handle.cgroup else []
    kwargs.setdefault("env", NODE_ENVIRONMENT)  # nothing of the caller's environment
    return subprocess.run(
        _in_cgroup(dirs, ["nsenter", "-t", str(handle.pid), "-a", *command]), capture_output=True, text=True,
        timeout=timeout, **kwargs,
    )


def release(run_dir: Path, state_dir: Path) -> None:
    """Kill the node's PID 1 (every process of the node dies with it, and its disk with its
    mount namespace), delete its namespaces, cgroup, uid range and state. Idempotent;
    touches only what this node's boot made."""
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
        if handle.cgroup:
            # Whatever is left of a boot that failed half-way (its launcher, a PID 1 never
            # recognised): every process the node's cgroup counts is one of the node's.
            _kill_cgroup(handle.cgroup)
        if _netns_exists(handle.netns):
            _ip("netns", "del", handle.netns, check=False)
        Underlay(run_dir).unroute(handle.address, handle.bridge)
        Underlay(run_dir).leave(handle.key, handle.veth, handle.bridge)
        if handle.cgroup:
            _remove_cgroup(handle.cgroup)
            _wait_for_disks(handle.cgroup)
        if handle.uid_base:
            UidRanges.free(state_dir, handle.uid_base)
        if handle.cgroup:
            _remove_node_dir(handle.cgroup)
    shutil.rmtree(state_dir, ignore_errors=True)


def _disks_dir(node: str) -> Path:
    """The node's (new, empty) folder for its disks; folders that a killed run or a reboot
    left (no disk of theirs in use, older than STALE_DISKS) go first. The loop devices are read
    once: every running node's folder older than STALE_DISKS is looked at on every boot."""
    DISKS_DIR.mkdir(parents=True, exist_ok=True)
    DISKS_DIR.chmod(0o700)
    backings = None
    for folder in DISKS_DIR.iterdir():
        with contextlib.suppress(OSError):
            if time.time() - folder.stat().st_mtime > STALE_DISKS:
                backings = _loop_backings() if backings is None else backings
                if not _loop_devices(folder, backings):
                    shutil.rmtree(folder)
    folder = DISKS_DIR / node
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    return folder


def _loop_backings() -> dict[str, str]:
    """Every loop device of this computer and the file behind it."""
    found = {}
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            found[backing.parent.parent.name] = backing.read_text().strip()
    return found


def _loop_devices(under: Path, backings: dict[str, str] | None = None) -> list[str]:
    """Loop devices of this computer whose file is under `under` (a node's disks)."""
    prefix = f"{under.resolve()}/"
    return [name for name, path in (_loop_backings() if backings is None else backings).items()
            if path.startswith(prefix)]


def _wait_for_disks(node: str) -> None:
    """Remove the node's disks once they are detached: the kernel unmounts them when the
    node's last process is gone, a moment after it died (a file removed before that would
    keep its space until then)."""
    folder = DISKS_DIR / node
    deadline = time.monotonic() + 10
    while _loop_devices(folder) and time.monotonic() < deadline:
        time.sleep(0.02)
    shutil.rmtree(folder, ignore_errors=True)


# -- the customer's gateway ---------------------------------------------------------------


GATEWAY_PROGRAM = Path(__file__).resolve().parent / "gateway.py"


def _is_gateway(pid: int, state_dir: Path) -> bool:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(GATEWAY_PROGRAM).encode() in words and str(state_dir).encode() in words


class GatewayError(RuntimeError):
    """The customer's way in could not be opened."""


def start_gateway(handle: NodeHandle, listen_host: str | None = None, listen_port: int = GATEWAY_PORT, *,
                  public: bool = False) -> str:
    """A loopback port of this computer that forwards every connection into the node's
    sshd, the way a site gateway forwards to machines without an address of their own.
    Its address is new (`GatewayAddresses`) unless one is given; returns "host:port", or
    raises GatewayError saying why it cannot.

    The port is bound and listening here, before the gateway program starts: nothing waits
    for it to listen (no scan of this computer's sockets), and a port another program holds
    fails now. The program gets a pidfd of the node's PID 1, checked to be that process
    after it was opened, and closes the port when it exits (gateway.py)."""
    state_dir = Path(handle.state_dir)
    if handle.gateway_pid and _is_gateway(handle.gateway_pid, state_dir) and handle.gateway:
        return handle.gateway
    listen_host = listen_host or GatewayAddresses.next()
    # On this computer the customer comes in over loopback; a fleet host's gateway (`public`)
    # listens on the host's own addresses, where its machines' customers reach it.
    if not public and not ipaddress.ip_address(listen_host).is_loopback:
        raise ValueError(f"the gateway listens on loopback only, not {listen_host}")
    try:
        pidfd = os.pidfd_open(handle.pid)
    except OSError as error:
        raise GatewayError("the SSH gateway could not open: the machine is not running") from error
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # Opened first, checked second: the pidfd now names this node's PID 1 for good.
        if not (_is_node_init(handle.pid, state_dir) and _in_node_netns(handle)):
            raise GatewayError("the SSH gateway could not open: the machine is not running")
        # No SO_REUSEADDR: a port another program holds must fail here, not be shared.
        try:
            listener.bind((listen_host, listen_port))
            listener.listen(128)
        except OSError as error:
            raise GatewayError(
                f"the SSH gateway could not listen on {listen_host}:{listen_port}: {error.strerror}"
            ) from error
        with open(state_dir / "gateway.log", "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(GATEWAY_PROGRAM), "--node", str(state_dir),
                 "--netns", str(NETNS_DIR / handle.netns), "--listen-fd", str(listener.fileno()),
                 "--pidfd", str(pidfd)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                pass_fds=(listener.fileno(), pidfd), env=NODE_ENVIRONMENT,
            )
    finally:
        listener.close()
        os.close(pidfd)
    handle.gateway_pid = process.pid
    handle.gateway = f"{listen_host}:{listen_port}"
    handle.save()
    return handle.gateway


def gateway_serves(handle: NodeHandle, timeout: float = 5.0) -> bool:
    """True when the customer's path reaches this very node: the host key that answers on
    the gateway is the one this node made at boot. Only the key exchange runs, with
    curve25519: `ssh-keyscan` offers OpenSSH's post-quantum exchange first, ~65 ms of this
    computer's CPU a node against ~3 ms here."""
    # Imported here: the host runtime runs this module where no paramiko is installed, and
    # only the control plane asks this.
    import paramiko

    if not handle.gateway or not handle.host_key:
        return False
    host, port = handle.gateway.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock, \
                paramiko.Transport(sock) as transport:
            options = transport.get_security_options()
            options.kex = ("curve25519-sha256@libssh.org",)
            options.key_types = ("ssh-ed25519",)
            transport.start_client(timeout=timeout)
            key = transport.get_remote_server_key()
    except (OSError, EOFError, paramiko.SSHException):
        return False
    return key.get_base64() == handle.host_key.split()[1]


def leftovers(run_dir: Path) -> list[str]:
    """What of this run is still on the computer: namespaces, processes, cgroups, uid
    ranges, its guard route's folder (tests)."""
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
    underlay = Underlay(run_dir)
    run_id = underlay.run_id
    found += [f"disks {folder}" for folder in DISKS_DIR.glob(f"{run_id}-*")]
    # The way out: a route back to one of its nodes, an uplink of its bridges (egress.py).
    routes = _ip("-j", "-4", "route", "show", "root", str(underlay.subnet), check=False).stdout
    found += [f"route {route['dst']} dev {route.get('dev')}" for route in json.loads(routes or "[]")
              if route.get("type") != "blackhole"]
    found += [f"uplink {link}" for link in egress.links() if Path("/sys/class/net", link).exists()
              and _ip("-j", "-4", "addr", "show", "dev", link, "to", str(underlay.subnet), check=False).stdout.strip()
              not in ("", "[]", "[{}]")]
    if GuardRoutes.left_empty(str(underlay.subnet)):
        found.append(f"guard folder {GuardRoutes._holders(str(underlay.subnet))}")
    for path in _cgroup_dirs(f"{run_id}-*"):
        found += [f"cgroup {match}" for match in path.parent.glob(path.name)]
    uids = UidRanges._dir()
    if uids.is_dir():
        for slot in uids.iterdir():
            # Another run's node may free its slot between the listing and the read.
            with contextlib.suppress(FileNotFoundError):
                if slot.read_text().startswith(f"{run_dir}/"):
                    found.append(f"uid range {slot.name}")
    return found


def namespaces(handle: NodeHandle) -> dict[str, str]:
    """The node's namespace ids ("pid:[4026...]"), to look for its processes after release."""
    ids = {}
    for kind in ("pid", "net", "mnt", "uts", "user"):
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
