"""`local`: every machine is a sandboxed SSH endpoint on this computer.

Booting a host starts its own SSH server (OpenSSH `sshd` when installed, else the pure
Python asyncssh server) on the host's loopback address, with a fresh sandbox root that the
node scripts act under. So the whole Fabric path — names, WireGuard config, /shared,
Slurm/Kubernetes/Ray install and readiness — runs exactly as in production, on one
computer, dialing nothing but 127.0.0.0/8. Per-host delays and faults work as in
`simulated`: `boot_seconds`, and `fault` (fails to boot, never joins, install fails).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import getpass
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.utils import timezone

from clusters.nodeops import operations, sandbox
from clusters.nodeops.runner import RetryPolicy
from clusters.nodeops.targets import NodeTarget
from clusters.providers.base import BootReport, BootState, StepOutcome
from clusters.providers.fabric import FabricProvider
from offers.models import HostFault

if TYPE_CHECKING:
    from clusters.models import Cluster, Node
    from offers.models import Host


def machines_dir() -> Path:
    return Path(settings.LOCAL_MACHINES_DIR)


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


class LocalProvider(FabricProvider):
    name = "local"
    sandbox = True
    # Local machines are on this computer's loopback; a site's gateway is for customers.
    through_gateway = False
    retry_policy = RetryPolicy(connect_timeout=5.0, attempts=3, backoff=0.5)

    def _dir(self, host: Host) -> Path:
        return machines_dir() / host.name

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
        if host.fault == HostFault.BOOT_FAILS:
            self._emit(node.name, "boot", f"{host.name}: power-on requested")
            return
        if self._running(host):
            return
        machine = self._dir(host)
        root = machine / "root"
        # A freshly booted machine has a clean disk.
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        if host.fault in operations.FAULTS:
            operations.write_fault(root, host.fault)
        keys = _keys()
        log = open(machine / "ssh.log", "ab")  # noqa: SIM115 - handed to the child process
        sshd = sandbox.find_sshd() if settings.LOCAL_SSH_SERVER != "asyncssh" else None
        if sshd:
            if os.geteuid() == 0:
                Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
            config = machine / "sshd_config"
            config.write_text(sandbox.SSHD_CONFIG.format(
                host=host.address, port=host.port, host_key=keys / "ssh_host_ed25519_key",
                authorized_keys=keys / "authorized_keys", set_env="",
            ))
            command = [sshd, "-D", "-e", "-f", str(config)]
        else:
            command = [sys.executable, str(sandbox.ASYNCSSH_SERVER), "--host-key", str(keys / "ssh_host_ed25519_key"),
                       "--authorized-keys", str(keys / "authorized_keys"), f"{host.address}:{host.port}"]
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        (machine / "pid").write_text(str(process.pid))
        self._emit(node.name, "boot", f"{host.name}: {'sshd' if sshd else 'asyncssh'} on {host.address}:{host.port}")

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
        host = node.host
        booted_for = timezone.now() - (node.boot_requested_at or timezone.now())
        if booted_for < dt.timedelta(seconds=host.boot_seconds):
            return BootReport(BootState.BOOTING)
        if host.fault == HostFault.BOOT_FAILS:
            return BootReport(BootState.FAILED, detail=f"{host.name} did not power on (hardware fault reported)")
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
