"""Local SSH endpoints that stand in for cluster machines (tests and the `local` provider).

Each endpoint is a real SSH server on its own loopback address (127.B.x.y) and a free
port, with its own sandbox root directory that the node-side scripts act under. Two
server kinds:

- "openssh": one `sshd -D -e -f <generated config>` per endpoint (Debian openssh-server);
- "asyncssh": one Python process (pip only) listening on every endpoint address, running
  each SSH exec request with bash in a subprocess.

Nothing here dials anything but 127.0.0.0/8.
"""

from __future__ import annotations

import getpass
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from clusters.nodeops.targets import ClusterSpec, NodeTarget, node_name, private_ip

from .hostkeys import find_sshd

ASYNCSSH_SERVER = Path(__file__).resolve().parent / "_asyncssh_server.py"


def write_ed25519_keypair(private_path: Path, comment: str = "runcrate-sandbox") -> str:
    """Write an OpenSSH-format ed25519 private key (0600) and its .pub; return the pub line."""
    key = Ed25519PrivateKey.generate()
    private_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    private_path.chmod(0o600)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()
    line = f"{public} {comment}"
    Path(f"{private_path}.pub").write_text(line + "\n")
    return line


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def loopback_address(block: int, index: int) -> str:
    """A distinct 127.<block>.x.y address for endpoint `index` (never .0 or .255)."""
    return f"127.{block}.{index // 254}.{index % 254 + 1}"


def wait_for_banner(host: str, port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5) as sock:
                sock.settimeout(1.0)
                if sock.recv(64).startswith(b"SSH-"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


@dataclass(frozen=True)
class Endpoint:
    name: str
    index: int
    host: str
    port: int
    user: str
    key_filename: str
    root: str

    def target(self) -> NodeTarget:
        return NodeTarget(
            name=self.name,
            index=self.index,
            host=self.host,
            port=self.port,
            user=self.user,
            key_filename=self.key_filename,
            root=self.root,
            private_ip=private_ip(self.index),
        )


@dataclass
class EndpointPool:
    kind: str
    workdir: Path
    endpoints: list[Endpoint]
    client_key: str
    known_hosts_line: str
    skip_user_rc: bool = True
    _processes: list[subprocess.Popen] = field(default_factory=list, repr=False)
    _logs: list = field(default_factory=list, repr=False)
    # Server processes this object did not start (a pool re-attached with `load`).
    _foreign_pids: list[int] = field(default_factory=list, repr=False)

    def targets(self) -> tuple[NodeTarget, ...]:
        return tuple(endpoint.target() for endpoint in self.endpoints)

    def spec(
        self,
        *,
        cluster_id: str = "sandbox",
        software: str = "none",
        machine_kind: str = "vm",
        gpus_per_machine: int = 8,
        volume_source: str | None = None,
        count: int | None = None,
    ) -> ClusterSpec:
        """A sandbox ClusterSpec over the first `count` endpoints (all by default)."""
        return ClusterSpec(
            cluster_id=cluster_id,
            software=software,
            machine_kind=machine_kind,
            gpus_per_machine=gpus_per_machine,
            nodes=self.targets()[: count or len(self.endpoints)],
            sandbox=True,
            volume_source=volume_source,
            gateway=None,
        )

    def reset_roots(self) -> None:
        """Empty every sandbox root (a fresh set of machines, same endpoints)."""
        for endpoint in self.endpoints:
            shutil.rmtree(endpoint.root, ignore_errors=True)
            Path(endpoint.root).mkdir(parents=True)

    def save(self) -> None:
        """Write <workdir>/pool.json so another process can `load` (re-attach to) the pool."""
        state = {
            "kind": self.kind,
            "client_key": self.client_key,
            "known_hosts_line": self.known_hosts_line,
            "skip_user_rc": self.skip_user_rc,
            "endpoints": [endpoint.__dict__ for endpoint in self.endpoints],
            "pids": [process.pid for process in self._processes] + self._foreign_pids,
        }
        tmp = self.workdir / "pool.json.tmp"
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.workdir / "pool.json")

    @classmethod
    def load(cls, workdir: str | os.PathLike[str], timeout: float = 2.0) -> EndpointPool | None:
        """The pool saved in `workdir` if every endpoint still answers, else None.

        For the `local` provider: endpoints outlive the worker process that started them
        (they run in their own session) and the next worker re-attaches here.
        """
        workdir = Path(workdir).resolve()
        try:
            state = json.loads((workdir / "pool.json").read_text())
        except (OSError, ValueError):
            return None
        pool = cls(
            kind=state["kind"],
            workdir=workdir,
            endpoints=[Endpoint(**endpoint) for endpoint in state["endpoints"]],
            client_key=state["client_key"],
            known_hosts_line=state["known_hosts_line"],
            skip_user_rc=state["skip_user_rc"],
            _foreign_pids=[pid for pid in state["pids"] if _is_our_server(pid, workdir)],
        )
        deadline = time.monotonic() + timeout
        if not all(wait_for_banner(e.host, e.port, deadline) for e in pool.endpoints):
            return None
        return pool

    def stop(self) -> None:
        for pid in self._foreign_pids:
            if _is_our_server(pid, self.workdir):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        self._foreign_pids.clear()
        for process in self._processes:
            if process.poll() is None:
                process.terminate()
        for process in self._processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> EndpointPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# Debian's bash reads ~/.bashrc for every command sshd runs (SSH_SOURCE_BASHRC) unless
# it is a nested shell. Sandbox nodes share the developer's account, whose ~/.bashrc may
# be slow (pyenv init costs ~130 ms of CPU per session on the build machine), so the
# sandbox sshd starts sessions as if nested. Real machines run their own rc files.
SKIP_USER_RC = "SetEnv SHLVL=1\n"

SSHD_CONFIG = """\
ListenAddress {host}:{port}
HostKey {host_key}
AuthorizedKeysFile {authorized_keys}
PidFile none
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
# A sandbox node can be the jump host (ClusterSpec.gateway) for the others.
AllowTcpForwarding local
# The control plane opens every node at once; the default 10:30:100 would drop some.
MaxStartups 200:30:400
MaxSessions 64
LogLevel ERROR
Subsystem sftp internal-sftp
{set_env}"""


def sshd_command(sshd: str, config: Path) -> list[str]:
    """How every sandbox sshd is started (tests, the bench and the `local` provider alike):
    in the foreground, logging to stderr, and -r: no re-exec per connection (~15% less CPU
    per connect). The config carries SKIP_USER_RC so sessions skip the user's ~/.bashrc."""
    return [sshd, "-D", "-e", "-r", "-f", str(config)]


def start_endpoints(
    count: int,
    workdir: str | os.PathLike[str],
    kind: str = "openssh",
    *,
    block: int | None = None,
    start_timeout: float = 20.0,
    skip_user_rc: bool = True,
) -> EndpointPool:
    """Start `count` local SSH endpoints under `workdir`; `stop()` the pool when done.

    Each endpoint gets the address 127.<block>.x.y, a free port and the sandbox root
    `<workdir>/nodes/node-i`. One client key (ed25519) logs in to all of them as the
    current user. `skip_user_rc` keeps Debian's bash from reading the user's ~/.bashrc
    for every session (see SKIP_USER_RC).
    """
    if kind not in ("openssh", "asyncssh"):
        raise ValueError(f"unknown endpoint kind {kind!r}")
    workdir = Path(workdir).resolve()
    (workdir / "nodes").mkdir(parents=True, exist_ok=True)
    keys = workdir / "keys"
    keys.mkdir(exist_ok=True)
    client_key = keys / "client_ed25519"
    authorized = write_ed25519_keypair(client_key, "runcrate-control-plane")
    (keys / "authorized_keys").write_text(authorized + "\n")
    host_key = keys / "ssh_host_ed25519_key"
    host_pub = write_ed25519_keypair(host_key, "runcrate-sandbox-host")
    user = getpass.getuser()
    block = block if block is not None else random.randint(64, 250)

    endpoints = []
    for index in range(count):
        host = loopback_address(block, index)
        root = workdir / "nodes" / node_name(index)
        root.mkdir(parents=True, exist_ok=True)
        endpoints.append(
            Endpoint(
                name=node_name(index),
                index=index,
                host=host,
                port=free_port(host),
                user=user,
                key_filename=str(client_key),
                root=str(root),
            )
        )
    pool = EndpointPool(
        kind=kind,
        workdir=workdir,
        endpoints=endpoints,
        client_key=str(client_key),
        known_hosts_line=" ".join(host_pub.split()[:2]),
        skip_user_rc=skip_user_rc,
    )
    try:
        if kind == "openssh":
            _start_openssh(pool, host_key, keys / "authorized_keys")
        else:
            _start_asyncssh(pool, host_key, keys / "authorized_keys")
        deadline = time.monotonic() + start_timeout
        for endpoint in endpoints:
            if not wait_for_banner(endpoint.host, endpoint.port, deadline):
                raise RuntimeError(
                    f"{kind} endpoint {endpoint.host}:{endpoint.port} did not start; "
                    f"see logs in {workdir / 'logs'}"
                )
    except BaseException:
        pool.stop()
        raise
    pool.save()
    return pool


def _start_openssh(pool: EndpointPool, host_key: Path, authorized_keys: Path) -> None:
    sshd = find_sshd()
    if sshd is None:
        raise RuntimeError("OpenSSH sshd is not installed (apt-get install openssh-server)")
    if os.geteuid() == 0:
        # sshd refuses to start without its privilege-separation directory.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    configs = pool.workdir / "sshd"
    configs.mkdir(exist_ok=True)
    logs = pool.workdir / "logs"
    logs.mkdir(exist_ok=True)
    for endpoint in pool.endpoints:
        config = configs / f"{endpoint.name}.conf"
        config.write_text(
            SSHD_CONFIG.format(
                host=endpoint.host,
                port=endpoint.port,
                host_key=host_key,
                authorized_keys=authorized_keys,
                set_env=SKIP_USER_RC if pool.skip_user_rc else "",
            )
        )
        log = open(logs / f"sshd-{endpoint.name}.log", "ab")  # noqa: SIM115 - closed in stop()
        pool._logs.append(log)
        pool._processes.append(
            subprocess.Popen(
                sshd_command(sshd, config),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )


def _start_asyncssh(pool: EndpointPool, host_key: Path, authorized_keys: Path) -> None:
    logs = pool.workdir / "logs"
    logs.mkdir(exist_ok=True)
    log = open(logs / "asyncssh.log", "ab")  # noqa: SIM115 - closed in stop()
    pool._logs.append(log)
    listen = [f"{endpoint.host}:{endpoint.port}" for endpoint in pool.endpoints]
    pool._processes.append(
        subprocess.Popen(
            [
                sys.executable,
                str(ASYNCSSH_SERVER),
                "--host-key",
                str(host_key),
                "--authorized-keys",
                str(authorized_keys),
                *listen,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    )


def _is_our_server(pid: int, workdir: Path) -> bool:
    """True if `pid` is still a server started for `workdir` (pids get reused)."""
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return str(workdir) in command_line


def ensure_endpoints(count: int, workdir: str | os.PathLike[str], kind: str = "openssh") -> EndpointPool:
    """Re-attach to the pool saved in `workdir` if it is alive and big enough, else stop
    whatever is left of it and start a fresh one. Sandbox roots are kept on re-attach."""
    pool = EndpointPool.load(workdir)
    if pool is not None and pool.kind == kind and len(pool.endpoints) >= count:
        return pool
    # Whatever is left of an older pool (some servers dead, or too few) goes first.
    workdir = Path(workdir).resolve()
    try:
        pids = json.loads((workdir / "pool.json").read_text()).get("pids", [])
    except (OSError, ValueError):
        pids = []
    for pid in pids:
        if _is_our_server(pid, workdir):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    return start_endpoints(count, workdir, kind=kind)


class Blackhole:
    """A TCP port that accepts connections and never says a word (no SSH banner).

    Stands in for a machine whose SSH never comes up: connect() succeeds, the client
    times out waiting for the banner.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._closed.is_set():
            try:
                connection, _ = self._sock.accept()
            except OSError:
                continue
            self._held.append(connection)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2)
        for connection in self._held:
            connection.close()
        self._sock.close()

    def __enter__(self) -> Blackhole:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


