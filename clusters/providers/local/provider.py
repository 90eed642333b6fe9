"""`local`: the machines of this computer (and of the fleet hosts onboarded beside it).

The driver named `local` is one of two providers, chosen once per process (`mode()`; setting
`LOCAL_NODES`: auto, namespaces, sandbox), each by what its machines are:

- **HostRuntimeProvider** (namespaces: Linux, the packages, this computer's host runtime
  reachable): each slot boots as a *real* Linux node (clusters.providers.local.realnodes):
  its own network, UTS, mount and PID namespaces, eth0 on an underlay bridge with no link to
  the host's interfaces, its own sshd with a host key made at boot. The node scripts run
  unchanged, as on a production machine: wg-quick, Slurm, Ray, the /shared mount. Every
  machine is booted, probed and released by a host's runtime: this computer's
  (`ThisHostMachines`, through one sudo rule: the control plane is not root) or a fleet
  host's (`FleetMachines`, over SSH). Node operations and customers reach a machine of this
  computer through its gateway port on a loopback address.
- **SandboxProvider** (macOS, no namespaces): each host is an SSH server on its loopback
  address with a sandbox root the node scripts act under, and stand-ins for what cannot run.

Whole hosts sold as one bare-metal machine are the `ssh` driver (clusters.providers.ssh).

Per-host delays and faults work in both: `boot_seconds`, and `fault` (fails to boot,
never joins — its WireGuard traffic is dropped —, install fails).
"""

from __future__ import annotations

import abc
import dataclasses
import datetime as dt
import fcntl
import getpass
import hashlib
import ipaddress
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.db import connection
from django.utils import timezone

from clusters.models import Node
from clusters.nodeops import operations
from clusters.nodeops.runner import RetryPolicy
from clusters.nodeops.targets import NodeTarget
from clusters.providers.base import BootReport, BootState, StepOutcome, boot_due
from clusters.providers.fabric import FabricProvider
from clusters.providers.fleet import FleetMachines
from clusters.providers.local import image_facts, realnodes, sandbox
from clusters.providers.local import images as machine_images
from clusters.providers.local.thishost import ThisHostMachines
from offers import lab
from offers.hostruntime import HOST_STATE, LocalRuntime, RuntimeFailed
from offers.models import HostFault

if TYPE_CHECKING:
    from clusters.image_facts import ImageFacts
    from clusters.models import Cluster
    from clusters.nodeops.targets import ClusterSpec
    from clusters.providers.base import OutputCallback
    from offers.models import Host, MachineType

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

# Real nodes booted (and released) at once by one pass.
BOOT_THREADS = 16


def _at_once(work: Callable[[T], R], items: list[T], name: str) -> list[R]:
    """`work` on every item in threads of its own (up to BOOT_THREADS); returns the results in
    order once all are done. A thread's database connection is closed after each item: what the
    work reads is read before (the callers load it), and a thread left holding one would keep it."""

    def one(item: T) -> R:
        try:
            return work(item)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=min(BOOT_THREADS, len(items)), thread_name_prefix=name) as pool:
        return list(pool.map(one, items))


def node_limits(machine_type: MachineType) -> realnodes.NodeLimits:
    """A real machine's limits: its machine type's memory, disk and CPUs, capped to what
    this computer can give each of 64 machines (settings LOCAL_NODE_*), and what this
    computer keeps for itself from all of them (LOCAL_NODES_*_RESERVE)."""
    return realnodes.NodeLimits(
        memory_mb=min(machine_type.memory_gb * 1024, settings.LOCAL_NODE_MEMORY_MB),
        disk_mb=min(machine_type.disk_gb * 1024, settings.LOCAL_NODE_DISK_MB),
        shared_mb=settings.LOCAL_NODE_SHARED_MB,
        pids=settings.LOCAL_NODE_PIDS,
        namespaces=settings.LOCAL_NODE_NAMESPACES,
        inotify_instances=settings.LOCAL_NODE_INOTIFY_INSTANCES,
        # CPU time is shared by weight: a 32-vCPU machine weighs twice a 16-vCPU one.
        cpu_shares=max(2, 1024 * machine_type.vcpus // 16),
        # Its vCPUs, where this computer has more: `nproc` in the node says how many it has.
        cpus=machine_type.vcpus if machine_type.vcpus < (os.cpu_count() or 1) else 0,
        reserve=realnodes.HostReserve(memory_mb=settings.LOCAL_NODES_MEMORY_RESERVE_MB,
                                      pids=settings.LOCAL_NODES_PIDS_RESERVE),
    )


def machines_dir() -> Path:
    return Path(settings.LOCAL_MACHINES_DIR)


def instance() -> str:
    """This control plane's name for its machines in this computer's runtime: other checkouts
    on the same computer have their own machines directory, so their own instance."""
    return hashlib.sha256(str(machines_dir().resolve()).encode()).hexdigest()[:12]


def run_dir() -> Path:
    """Where this computer's runtime keeps this control plane's machines (root's alone)."""
    return Path(HOST_STATE) / "local" / instance()


def this_host() -> LocalRuntime:
    return LocalRuntime(instance())


def runtime_capability() -> tuple[bool, str]:
    """Whether this computer's runtime can boot machines, and why, as the runtime itself says:
    the control plane (not root) cannot tell by looking."""
    try:
        answer = this_host().call("check", timeout=60)
    except RuntimeFailed as error:
        return False, str(error)
    return bool(answer["machines"]), str(answer["why"])


_MODE: dict[str, tuple[str, str]] = {}


def mode() -> tuple[str, str]:
    """("namespaces" | "sandbox", why): how this computer runs local machines."""
    wanted = settings.LOCAL_NODES
    if wanted not in _MODE:
        if wanted == "sandbox":
            _MODE[wanted] = ("sandbox", "LOCAL_NODES=sandbox")
        else:
            can, why = runtime_capability()
            if wanted == "namespaces" and not can:
                raise RuntimeError(f"LOCAL_NODES=namespaces, but this computer cannot run real nodes: {why}")
            _MODE[wanted] = ("namespaces", why) if can else ("sandbox", f"no real nodes here: {why}")
    return _MODE[wanted]


def describe_mode() -> str:
    """The one line `make run` prints about its machines."""
    kind, why = mode()
    if kind == "namespaces":
        return (f"Local machines: real Linux nodes in namespaces, booted by this computer's host runtime as root "
                f"({why}); the control plane runs as {getpass.getuser()} (uid {os.geteuid()}).")
    return f"Local machines: loopback SSH sandboxes with stand-in software ({why})."


def _keys() -> Path:
    """One control-plane client key and one host key for every local machine, made once."""
    keys = machines_dir() / "keys"
    if (keys / "authorized_keys").exists():
        return keys
    keys.mkdir(parents=True, exist_ok=True)
    # Web, worker and beat may all get here first: the lock makes exactly one of them write.
    with open(keys / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (keys / "authorized_keys").exists():
            public = sandbox.write_ed25519_keypair(keys / "client_ed25519", "runcrate-control-plane")
            sandbox.write_ed25519_keypair(keys / "ssh_host_ed25519_key", "runcrate-local-host")
            (keys / "authorized_keys.tmp").write_text(public + "\n")
            os.replace(keys / "authorized_keys.tmp", keys / "authorized_keys")
    return keys


def local_provider(on_output: OutputCallback | None = None) -> FabricProvider:
    """The `local` driver: this computer's machines as what they are here (`mode()`)."""
    if mode()[0] == "namespaces":
        return HostRuntimeProvider(on_output=on_output)
    return SandboxProvider(on_output=on_output)


class _ThisComputer(FabricProvider):
    """What both kinds of machine of this computer share."""

    name = "local"
    # Local machines are on this computer; a site's gateway is for customers.
    through_gateway = False
    retry_policy = RetryPolicy(connect_timeout=5.0, attempts=3, backoff=0.5)

    def measures_with_nccl(self, cluster: Cluster) -> bool:
        # This computer's machines have no GPUs, whatever the catalogue says: iperf3 over wg0.
        return False

    def news_at(self, cluster: Cluster, nodes: list[Node]) -> dt.datetime | None:
        # A host's boot delay is known; past it, a machine's sshd coming up, a join settling
        # or a readiness check have no instant of their own: poll them.
        now = timezone.now()
        waiting = [node for node in nodes if node.state not in Node.SETTLED_STATES]
        lab.load([node.host for node in waiting])
        due = [boot_due(node) for node in waiting if node.state == Node.State.BOOTING]
        if not due or len(due) < len(waiting) or any(at is None or at <= now for at in due):
            return None
        return min(at for at in due if at is not None)

    def _booting_or_failed(self, node: Node) -> BootReport | None:
        """The host's injected delay and boot fault, before anything is asked of the machine."""
        host = node.host
        booted_for = timezone.now() - (node.boot_requested_at or timezone.now())
        if booted_for < dt.timedelta(seconds=lab.of(host).boot_seconds):
            return BootReport(BootState.BOOTING)
        if lab.of(host).fault == HostFault.BOOT_FAILS:
            return BootReport(BootState.FAILED, detail=f"{host.name} did not power on (hardware fault reported)")
        return None

    def install_software(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        # The install reads its injected fault from the machine: make it say what the host
        # says now, so a fault an operator cleared in /admin/ is gone for a retried install
        # (it was written once, at boot), and one set since then is there.
        lab.load([node.host for node in nodes], fresh=True)
        self._sync_install_faults(nodes)
        return super().install_software(cluster, nodes)

    @abc.abstractmethod
    def _sync_install_faults(self, nodes: list[Node]) -> None:
        """Write each machine's injected install fault as its host says it is now."""


class HostRuntimeProvider(_ThisComputer):
    """Real machines booted by a host's runtime: this computer's (ThisHostMachines) or a
    fleet host's (FleetMachines), from the same boot request."""

    sandbox = False
    # Real machines are checked clean after their release (the wipe receipt, by host id).
    gives_wipe_receipts = True
    # Real nodes on one bridge answer within a second; a pass must not block for minutes.
    join_wait_seconds = 10

    def images(self, machine_type: MachineType) -> list[ImageFacts]:
        """Real nodes start the images built on this computer (an image not built yet is not
        offered: a boot never waits for a build)."""
        found = []
        for name in machine_images.IMAGES:
            try:
                rootfs = machine_images.cached(name)
            except machine_images.ImageError:
                return []
            if rootfs is not None:
                found.append(image_facts.read(name, rootfs))
        return found

    @property
    def fleet(self) -> FleetMachines:
        """The slots of fleet hosts: booted by each host's runtime over SSH."""
        return FleetMachines(machines_dir() / "fleet", _keys() / "client_ed25519")

    @property
    def this_host(self) -> ThisHostMachines:
        """The slots of this computer: booted by its runtime, as root, through one sudo rule."""
        return ThisHostMachines(this_host(), machines_dir() / "this-host", _keys() / "client_ed25519")

    @staticmethod
    def _on_fleet(node: Node) -> bool:
        return node.host.physical_host_id is not None

    def _dir(self, host: Host) -> Path:
        """Where this computer's runtime keeps the slot's machine (root's alone: for tests)."""
        return run_dir() / host.name

    def target_for(self, node: Node) -> NodeTarget:
        if self._on_fleet(node):
            return self.fleet.target(node)
        return self.this_host.target(node)

    def spec_for(self, cluster: Cluster, nodes: list[Node]) -> ClusterSpec:
        spec = super().spec_for(cluster, nodes)
        if cluster.machine_type.shares_folder:
            # Workers find the head's /shared mounted by this computer (the runtime's join).
            spec = dataclasses.replace(spec, extra_env=(*spec.extra_env, ("RUNCRATE_SHARED_FROM_HOST", "1")))
        if cluster.software == "kubernetes":
            # No kubelet package reaches this computer: the one stand-in on real nodes.
            spec = dataclasses.replace(spec, extra_env=(*spec.extra_env, ("RUNCRATE_KUBELET_STANDIN", "1")))
        return spec

    def boot(self, node: Node) -> None:
        self.boot_all([node])

    def boot_all(self, nodes: list[Node]) -> None:
        # A real node takes a fraction of a second of namespaces, mounts and sshd, mostly
        # waiting: boot them at once, so 32 machines come up about as soon as 2. What each
        # boot reads of the database is read here first; the threads touch none of it.
        for node in nodes:
            _ = node.host.machine_type, node.host.physical_host, node.cluster.volume
        lab.load([node.host for node in nodes])
        here = [node for node in nodes if not self._on_fleet(node)]
        if here:
            # One start of this computer's runtime boots them all.
            for node, line in zip(here, self.this_host.boot(here, [self._boot_request(n) for n in here]), strict=True):
                self._emit(node.name, "boot", line)
        on_fleet = [node for node in nodes if self._on_fleet(node)]
        if on_fleet:
            def boot_there(node: Node) -> None:
                self._emit(node.name, "boot", self.fleet.boot(node, self._boot_request(node)))

            _at_once(boot_there, on_fleet, "boot")

    def _boot_request(self, node: Node) -> dict[str, Any]:
        """What the host runtime boots the node's machine from, on this computer or a fleet host."""
        host = node.host
        files = {}
        fault = lab.of(host).fault
        if fault == HostFault.INSTALL_FAILS:
            files["/etc/runcrate/fault"] = "install_fails\n"
        binds = {}
        volume = node.cluster.volume if node.index == 0 else None
        if volume is not None and volume.source_path and not self._on_fleet(node):
            # Attached the way a block device would be: its data appears at VOLUME_MOUNT.
            Path(volume.source_path).mkdir(parents=True, exist_ok=True)
            binds[self.VOLUME_MOUNT] = volume.source_path
        return {
            "key": host.name, "hostname": host.name, "authorized_keys": (_keys() / "authorized_keys").read_text(),
            # One network per cluster: its machines share a bridge, other clusters' never.
            "segment": f"cluster-{node.cluster_id}", "limits": dataclasses.asdict(node_limits(host.machine_type)),
            "boot_fails": fault == HostFault.BOOT_FAILS, "drop_wireguard": fault == HostFault.NEVER_JOINS,
            "files": files, "binds": binds, "image": node.cluster.image,
        }

    def boot_status(self, node: Node) -> BootReport:
        return self.boot_statuses([node])[0]

    def boot_statuses(self, nodes: list[Node]) -> list[BootReport]:
        # A real node is up once the customer's path reaches it (an SSH banner through its
        # proxy, its host key through its gateway): asked at once, as boot_all boots them;
        # the threads read nothing of the database (each node's host is read here first).
        for node in nodes:
            _ = node.host.physical_host
        lab.load([node.host for node in nodes])
        reports: dict[int, BootReport] = {}
        asked = []
        for node in nodes:
            early = self._booting_or_failed(node)
            if early is not None:
                reports[node.pk] = early
            else:
                asked.append(node)
        here = [node for node in asked if not self._on_fleet(node)]
        if here:
            reports |= dict(zip((n.pk for n in here), self.this_host.boot_statuses(here), strict=True))
        on_fleet = [node for node in asked if self._on_fleet(node)]
        if on_fleet:
            reports |= dict(zip((n.pk for n in on_fleet), _at_once(self.fleet.boot_status, on_fleet, "boot-status"),
                                strict=True))
        return [reports[node.pk] for node in nodes]

    def stopped_machines(self, nodes: list[Node]) -> dict[str, str]:
        """Real nodes whose PID 1 is gone (its root can end it): the health round says "The
        machine stopped" instead of asking a dead namespace over SSH; and on a fleet host that
        stopped answering, that their host did."""
        on_fleet = [node for node in nodes if self._on_fleet(node)]
        here = [node for node in nodes if not self._on_fleet(node)]
        stopped = self.fleet.stopped(on_fleet) if on_fleet else {}
        # The list also keeps LXCFS alive on this computer (it serves every node's /proc figures).
        return stopped | self.this_host.stopped(here)

    def _sync_install_faults(self, nodes: list[Node]) -> None:
        # One call of this computer's runtime for every machine here.
        self.this_host.write_files({
            node: {"/etc/runcrate/fault": "install_fails\n" if lab.of(node.host).fault == HostFault.INSTALL_FAILS else None}
            for node in nodes if not self._on_fleet(node)
        })

    def join_network(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        # The underlay's switch learns every machine of the cluster at once (static ARP),
        # as a provider's network does (realnodes.pin_neighbours); where head and workers are
        # on this computer, each joining worker gets the head's /shared filesystem itself
        # (realnodes.lend_shared): setup_shared then finds the head's files there and mounts
        # nothing over the network. A worker that cannot have it mounts /shared with sshfs,
        # as a machine on another computer does.
        here = [node for node in nodes if not self._on_fleet(node)]
        head = next((n for n in self._live_nodes(cluster, nodes) if n.index == 0), None)
        if here:
            lend_from = head if cluster.machine_type.shares_folder and head is not None and not self._on_fleet(head) \
                else None
            self.this_host.join(here, shared_from=lend_from)
        return super().join_network(cluster, nodes)

    def release(self, node: Node) -> None:
        self.release_all([node])

    def release_all(self, nodes: list[Node]) -> None:
        # Killing a node's PID 1 and deleting its namespaces is mostly waiting on the
        # kernel: this computer's runtime releases them at once, and its underlay once.
        hosts = [node.host for node in nodes]
        for host in hosts:
            _ = host.physical_host
        here = [host for host in hosts if host.physical_host_id is None]
        if here:
            try:
                self.wipe_receipts |= self.this_host.release(here)
            except Exception:  # the fleet's machines are released all the same
                log.exception("releasing machines %s failed", ", ".join(host.name for host in here))

        def release_there(host: Host) -> None:
            try:
                self.wipe_receipts[host.pk] = self.fleet.release(host)
            except Exception:  # one node's error must not keep the others
                log.exception("releasing machine %s failed", host.name)

        on_fleet = [host for host in hosts if host.physical_host_id is not None]
        if on_fleet:
            _at_once(release_there, on_fleet, "release")


class SandboxProvider(_ThisComputer):
    """Loopback SSH endpoints with sandbox roots, where this computer cannot run namespaces:
    the node scripts act under each machine's root folder, with stand-ins for what cannot run."""

    sandbox = True

    def _dir(self, host: Host) -> Path:
        return machines_dir() / host.name

    def images(self, machine_type: MachineType) -> list[ImageFacts]:
        """Sandbox machines run this computer's own system, offered as `base`."""
        return [image_facts.read("base", Path("/"))]

    def target_for(self, node: Node) -> NodeTarget:
        host = node.host
        return NodeTarget(
            name=node.name, index=node.index, host=host.address, port=host.port, user=getpass.getuser(),
            key_filename=str(_keys() / "client_ed25519"), root=str(self._dir(host) / "root"),
            private_ip=node.private_ip,
        )

    def boot(self, node: Node) -> None:
        host = node.host
        if not ipaddress.ip_address(host.address).is_loopback:
            raise ValueError(f"local host {host.name} must have a loopback address, not {host.address!r}")
        if lab.of(host).fault == HostFault.BOOT_FAILS:
            self._emit(node.name, "boot", f"{host.name}: power-on requested")
            return
        if self._running(host):
            return
        machine = self._dir(host)
        root = machine / "root"
        # A freshly booted machine has a clean disk.
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        if lab.of(host).fault in operations.FAULTS:
            operations.write_fault(root, lab.of(host).fault)
        keys = _keys()
        log = open(machine / "ssh.log", "ab")  # noqa: SIM115 - handed to the child process
        sshd = sandbox.find_sshd() if settings.LOCAL_SSH_SERVER != "asyncssh" else None
        if sshd:
            if os.geteuid() == 0:
                Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
            config = machine / "sshd_config"
            config.write_text(sandbox.SSHD_CONFIG.format(
                host=host.address, port=host.port, host_key=keys / "ssh_host_ed25519_key",
                authorized_keys=keys / "authorized_keys", set_env=sandbox.SKIP_USER_RC,
            ))
            # Started exactly as the sandbox endpoints of the tests and the bench are.
            command = sandbox.sshd_command(sshd, config)
        else:
            command = [sys.executable, str(sandbox.ASYNCSSH_SERVER), "--host-key", str(keys / "ssh_host_ed25519_key"),
                       "--authorized-keys", str(keys / "authorized_keys"), f"{host.address}:{host.port}"]
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        (machine / "pid").write_text(str(process.pid))
        self._emit(node.name, "boot", f"{host.name}: {'sshd' if sshd else 'asyncssh'} on {host.address}:{host.port}")

    def stopped_machines(self, nodes: list[Node]) -> dict[str, str]:
        return {}

    def _sync_install_faults(self, nodes: list[Node]) -> None:
        for node in nodes:
            root = self._dir(node.host) / "root"
            if root.is_dir():
                fault = lab.of(node.host).fault
                operations.write_fault(root, fault if fault in operations.FAULTS else None)

    def join_network(self, cluster: Cluster, nodes: list[Node]) -> StepOutcome:
        self._attach_volume(cluster, nodes)
        return super().join_network(cluster, nodes)

    def _attach_volume(self, cluster: Cluster, nodes: list[Node]) -> None:
        """Attach the volume to the head the way a block device would be: its data appears
        at VOLUME_MOUNT on node-0 (here a link into the volume's directory)."""
        volume = cluster.volume
        head = next((n for n in nodes if n.index == 0), None)
        if volume is None or head is None or not volume.source_path:
            return
        mount = self._dir(head.host) / "root" / self.VOLUME_MOUNT.lstrip("/")
        if not mount.is_symlink():
            Path(volume.source_path).mkdir(parents=True, exist_ok=True)
            mount.parent.mkdir(parents=True, exist_ok=True)
            mount.symlink_to(volume.source_path)

    def boot_status(self, node: Node) -> BootReport:
        early = self._booting_or_failed(node)
        if early is not None:
            return early
        host = node.host
        if not self._running(host):
            return BootReport(BootState.FAILED, detail=f"{host.name}'s SSH server exited; see {self._dir(host) / 'ssh.log'}")
        return super().boot_status(node)

    def release(self, node: Node) -> None:
        host = node.host
        pid = self._pid(host)
        if pid:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        shutil.rmtree(self._dir(host), ignore_errors=True)

    def _pid(self, host: Host) -> int | None:
        try:
            return int((self._dir(host) / "pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _running(self, host: Host) -> bool:
        pid = self._pid(host)
        if not pid:
            return False
        try:
            # Reap it if it is our exited child, so a dead server is not mistaken for alive.
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return False
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
