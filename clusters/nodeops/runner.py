"""Run one node-side script on many nodes at once, over SSH, with Fabric.

Every node gets its own thread and its own `fabric.Connection` (Fabric's `ThreadingGroup`
runs one command for all hosts; here each node needs its own environment and stdin, so
we drive the same Connections from a thread pool, each running its command on the
Connection's SSH session channel). The script travels on stdin (see `REMOTE_COMMAND`),
preceded by `export` lines for the node's environment, so nothing has to be uploaded first
and no secret appears on a remote command line (`ps`).

Connection failures (refused, timed out, no SSH banner, authentication refused while a
machine is still booting) are retried with exponential backoff; a node that never
answers is reported `unreachable`. A script that ran and failed is *not* retried: the
caller decides (design rule 5: nothing is retried without the customer).

A node is its tenant's: its root controls its sshd, its login shell and every file a session
reads. So nothing a node does may hold or flood the control plane: every command has a
deadline (a watchdog closes the session, whatever paramiko call it is in) and a cap on the
output read back (`RetryPolicy.command_timeout`, `max_output`; a run may tighten both), and
the command runs with no rc file where the node's sshd honours the runtime's settings
(`REMOTE_COMMAND`; docs/security.md, "The control plane's sessions on a node").
"""

from __future__ import annotations

import codecs
import os
import select
import selectors
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import paramiko
from fabric import Config, Connection

from .targets import NodeTarget

SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"
STEP_MARKER = "::step:: "

# on_output(node_name, step, text): one call per output line, serialized by the runner.
OutputCallback = Callable[[str, str, str], None]
NodeEnv = Callable[[NodeTarget], Mapping[str, str]]


# A periodic round (health, metrics) gives a machine this long to take an SSH connection: one
# that has not answered within seconds is unreachable for this round (the next asks again).
# The rounds share their kept connections, so they share this too.
ROUND_CONNECT_TIMEOUT = 5.0


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try to reach a node before declaring it unreachable."""

    connect_timeout: float = 10.0
    attempts: int = 4
    backoff: float = 1.0
    backoff_factor: float = 2.0
    max_backoff: float = 30.0
    command_timeout: float | None = 1800.0
    # Bytes of stdout and stderr together read back from one command; past it the session is
    # closed and the node's result says so. Install logs are the largest legitimate output.
    max_output: int = 16 * 1024 * 1024

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        return min(self.max_backoff, self.backoff * self.backoff_factor ** (attempt - 1))


@dataclass(frozen=True)
class NodeResult:
    node: NodeTarget
    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    unreachable: bool = False
    attempts: int = 1
    error: str = ""
    seconds: float = 0.0
    # The session was closed by the control plane: past its deadline, or past its output cap.
    cut_off: bool = False

    @property
    def name(self) -> str:
        return self.node.name

    def tail(self, lines: int = 20) -> str:
        text = (self.stdout + ("\n" + self.stderr if self.stderr else "")).strip("\n")
        return "\n".join(text.splitlines()[-lines:])


class NodeUnreachable(Exception):
    pass


class CommandTimeout(TimeoutError):
    """The command did not finish by its deadline (its session was closed)."""


class OutputTooLarge(Exception):
    """The command printed more than the control plane reads back (its session was closed)."""


# Errors that mean "could not get a working SSH session", as opposed to "the script failed".
CONNECT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # refused, no route, socket.timeout, paramiko NoValidConnectionsError
    EOFError,
    paramiko.SSHException,  # no banner, negotiation failed, authentication refused
)


# The stand-in overlay (sandbox nodes; real nodes that cannot run a kubelet): streamed between
# the helpers and the script only where the machine cannot run the real software, so the
# scripts production machines receive carry no stand-in.
STANDINS_OVERLAY = SCRIPTS_DIR.parent.parent / "providers" / "local" / "standins" / "overlay.sh"


# bash reads a script from a pipe one byte per read(2), so that the commands it runs find the
# rest of stdin unread: `bash -s` with a 20–30 KB payload (lib.sh, the script, the node's
# environment: at 64 nodes the WireGuard config alone is 13 KB) spent ~1 µs of the node's CPU
# per byte, every step on every node. `$(cat)` reads the payload in a few large reads and
# bash runs it from memory; the script's own stdin is /dev/null either way (`build_payload`).
# (`$(</dev/stdin)` would save the `cat`, ~1 ms a session, but through a gateway it made one
# run in five end with the gateway's sshd dropping the connection: "data packet referred to
# nonexistent channel 0".)
# sshd runs this with the account's login shell (`$SHELL -c`); the script's own bash reads no
# rc file (--noprofile --norc, and no BASH_ENV or ENV file). The login shell itself is kept
# from the rc files by the node's sshd where the runtime configures it (realnodes: SHLVL=1
# for the control plane's key, no ~/.ssh/rc); `exec` keeps it from running anything after.
# Where the login shell is such a bash (SHLVL=1 from the key makes it 2: it read no rc file,
# and sshd gave it no BASH_ENV), it runs the payload itself: one program fewer a session.
REMOTE_COMMAND = ("if [ -n \"${BASH_VERSION-}\" ] && [ \"${SHLVL-}\" = 2 ]; then eval \"$(cat)\"; "
                  "else BASH_ENV= ENV= exec bash --noprofile --norc -c 'eval \"$(cat)\"'; fi")


def load_script(script: str | Path, *, standins: bool = False) -> str:
    """The text bash receives: the shared helpers, the stand-in overlay when asked, then the
    script: one of scripts/ by name, or a feature's own (clusters/node_health/health.sh) by path."""
    lib = (SCRIPTS_DIR / "lib.sh").read_text()
    body = (script if isinstance(script, Path) else SCRIPTS_DIR / script).read_text()
    overlay = STANDINS_OVERLAY.read_text() + "\n" if standins else ""
    return lib + "\n" + overlay + body


def build_payload(script: str, env: Mapping[str, str]) -> str:
    exports = "".join(f"export {key}={shlex.quote(str(value))}\n" for key, value in env.items())
    # The braces make bash read the whole script before running any of it, and the
    # </dev/null keeps commands that read stdin (apt, kubeadm) from eating the script.
    return f"{exports}{{\n{script}\n}} </dev/null\n"


class _LineSink:
    """Collects decoded remote output; calls back once per complete line."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._buffer = ""

    def write(self, text: str) -> int:
        self._buffer += text
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if self._buffer:
            self._emit(self._buffer)
            self._buffer = ""


def _no_delay(connection: Connection) -> None:
    """TCP_NODELAY on the SSH socket: without it, Nagle holds each small SSH packet (a channel
    open, a window adjust, the script's first bytes) until the peer's delayed ACK, ~40-80 ms a
    session. A connection through a gateway rides an SSH channel, not a socket."""
    transport = connection.client.get_transport() if connection.client else None
    sock = getattr(transport, "sock", None)
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


# How often an idle connection's transport thread wakes. paramiko wakes every 0.1 s to see
# whether it should stop, so each kept connection cost ~10 wake-ups a second for as long as
# a step ran: at 64 nodes a join's transports woke ~70,000 times, CPU that grew with the
# nodes times the join's length. Closing a connection does not wait for the wake-up (the
# socket or the proxy command's pipe ends the read).
IDLE_WAKEUP = 2.0


class _ProxyCommand(paramiko.ProxyCommand):
    """paramiko's ProxyCommand, quiet when idle and when its command ends.

    paramiko's spins when the command exits: `select` reports the closed pipe readable, the
    read returns nothing, and it loops until its timeout. Here an empty read is the end of
    the stream (the packetizer then ends the transport, as on a closed socket)."""

    def settimeout(self, timeout: float | None) -> None:
        super().settimeout(None if timeout is None else max(timeout, IDLE_WAKEUP))

    def recv(self, size: int) -> bytes:
        buffer = b""
        try:
            started = time.monotonic()
            while len(buffer) < size:
                wait = None
                if self.timeout is not None:
                    wait = self.timeout - (time.monotonic() - started)
                    if wait <= 0:
                        raise TimeoutError
                ready, _, _ = select.select([self.process.stdout], [], [], wait)
                if ready:
                    chunk = os.read(self.process.stdout.fileno(), size - len(buffer))
                    if not chunk:
                        break
                    buffer += chunk
            return buffer
        except TimeoutError:
            if buffer:
                return buffer
            raise
        except OSError as error:
            raise paramiko.ProxyCommandFailure(" ".join(self.cmd), error.strerror) from error


def _quiet_when_idle(connection: Connection) -> None:
    """A direct connection's socket wakes its transport every IDLE_WAKEUP, not every 0.1 s."""
    transport = connection.client.get_transport() if connection.client else None
    sock = getattr(transport, "sock", None)
    if isinstance(sock, socket.socket):
        sock.settimeout(IDLE_WAKEUP)


def _close(connection: Connection) -> None:
    """Close a connection whose peer or gateway may be gone already (the goodbye then fails)."""
    try:
        connection.close()
    except CONNECT_ERRORS:
        pass


def _fabric_config() -> Config:
    # No ~/.ssh/config: the control plane decides how nodes are reached, not the
    # environment of whichever worker process runs the task.
    return Config(
        overrides={"load_ssh_configs": False},
        lazy=True,
    )


@dataclass(frozen=True)
class _Limits:
    timeout: float | None
    max_output: int


def _tighter(policy: float | None, asked: float | None) -> float | None:
    if asked is None:
        return policy
    return asked if policy is None else min(policy, asked)


class NodeRunner:
    """Runs scripts on nodes; optionally keeps SSH connections open between steps.

    Thread-safe for one `run` at a time. Use as a context manager or call `close()`.
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        *,
        max_workers: int = 64,
        keep_connections: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.policy = policy or RetryPolicy()
        self.max_workers = max_workers
        self.keep_connections = keep_connections
        self._sleep = sleep
        self._connections: dict[tuple[str, int, str], Connection] = {}
        self._gateways: dict[str, Connection] = {}
        self._connections_lock = threading.Lock()
        self._output_lock = threading.Lock()

    def __enter__(self) -> NodeRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with self._connections_lock:
            connections, self._connections = list(self._connections.values()), {}
            gateways, self._gateways = list(self._gateways.values()), {}
        for connection in connections + gateways:
            _close(connection)

    def run(
        self,
        nodes: Iterable[NodeTarget],
        script: str,
        *,
        step: str,
        env: Mapping[str, str] | None = None,
        node_env: NodeEnv | None = None,
        on_output: OutputCallback | None = None,
        gateway: str | None = None,
        timeout: float | None = None,
        max_output: int | None = None,
    ) -> dict[str, NodeResult]:
        """Run `script` (full bash text, see `load_script`) on every node in parallel.

        Each node gets `env`, then `node_env(node)`, then RUNCRATE_ROOT / node name / index.
        `gateway` ("user@host:port") is a jump host every node is reached through.
        `timeout` and `max_output` tighten the policy's deadline and output cap for this run
        (a metrics round on the health rounds' connections has a shorter budget).
        Returns node name -> NodeResult, in node order.
        """
        limits = _Limits(
            _tighter(self.policy.command_timeout, timeout),
            min(self.policy.max_output, max_output) if max_output is not None else self.policy.max_output,
        )
        nodes = list(nodes)
        if not nodes:
            return {}
        jump = None
        if gateway:
            try:
                jump = self._gateway(gateway, nodes[0].key_filename)
            except NodeUnreachable as error:
                return {node.name: self._unreachable(node, f"gateway {error}", 0.0) for node in nodes}
        retired: list[Connection] = []

        def one(node: NodeTarget) -> NodeResult:
            full_env = dict(env or {})
            if node_env is not None:
                full_env.update(node_env(node))
            full_env.update(
                RUNCRATE_ROOT=node.root,
                RUNCRATE_NODE_NAME=node.name,
                RUNCRATE_NODE_INDEX=str(node.index),
                RUNCRATE_PRIVATE_IP=node.private_ip,
                RUNCRATE_STEP=step,
            )
            return self._run_on_node(node, build_payload(script, full_env), step, on_output, jump, retired, limits)

        workers = max(1, min(self.max_workers, len(nodes)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nodeops") as pool:
            results = list(pool.map(one, nodes))
        self._close_through(gateway, retired)
        return {result.node.name: result for result in results}

    def host_keys(self, nodes: Iterable[NodeTarget], *, gateway: str | None = None) -> dict[str, str]:
        """Each node's SSH host key ("type base64"), as its sshd presents it to this runner's
        connection: the key other nodes and the customer's gateway see. A node that cannot be
        reached is left out."""
        nodes = list(nodes)
        if not nodes:
            return {}
        jump = None
        if gateway:
            try:
                jump = self._gateway(gateway, nodes[0].key_filename)
            except NodeUnreachable:
                return {}
        retired: list[Connection] = []

        def one(node: NodeTarget) -> tuple[str, str]:
            try:
                connection, _ = self._connect(node, jump)
            except NodeUnreachable:
                return node.name, ""
            try:
                transport = connection.client.get_transport() if connection.client else None
                key = transport.get_remote_server_key() if transport is not None else None
                return node.name, f"{key.get_name()} {key.get_base64()}" if key is not None else ""
            finally:
                if not self.keep_connections:
                    self._done_with(connection, jump, retired)

        workers = max(1, min(self.max_workers, len(nodes)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nodeops") as pool:
            keys = {name: key for name, key in pool.map(one, nodes) if key}
        self._close_through(gateway, retired)
        return keys

    # -- closing ----------------------------------------------------------------------

    def _done_with(self, connection: Connection, gateway: Connection | None, retired: list[Connection]) -> None:
        """Close a node's connection the runner keeps no more. Through a gateway it waits for
        the end of the run (`_close_through`): paramiko can send a packet on a tunnel's channel
        after closing it, and the gateway's sshd answers that by ending the whole connection,
        with every other node's session on it."""
        if gateway is None:
            _close(connection)
        else:
            retired.append(connection)

    def _close_through(self, gateway: str | None, retired: list[Connection]) -> None:
        """Once every node of a run is done: the node connections it retired, then the
        gateway they rode (the next run opens it again)."""
        if not gateway or not retired:
            return
        for connection in retired:
            _close(connection)
        with self._connections_lock:
            jump = self._gateways.pop(gateway, None)
        if jump is not None:
            _close(jump)

    # -- one node -------------------------------------------------------------------

    def _connect_kwargs(self, key_filename: str | None) -> dict:
        timeout = self.policy.connect_timeout
        return {
            "key_filename": key_filename,
            "look_for_keys": key_filename is None,
            "allow_agent": key_filename is None,
            "timeout": timeout,
            "banner_timeout": timeout,
            "auth_timeout": timeout,
        }

    def _gateway(self, gateway: str, key_filename: str | None) -> Connection:
        """One open connection to the jump host, shared by every node's thread."""
        with self._connections_lock:
            cached = self._gateways.get(gateway)
            if cached is not None and cached.is_connected:
                return cached
            last_error: BaseException | None = None
            for attempt in range(1, self.policy.attempts + 1):
                connection = Connection(
                    gateway, config=_fabric_config(), connect_kwargs=self._connect_kwargs(key_filename)
                )
                try:
                    connection.open()
                except CONNECT_ERRORS as error:
                    _close(connection)
                    last_error = error
                    if attempt < self.policy.attempts:
                        self._sleep(self.policy.delay(attempt))
                    continue
                _no_delay(connection)
                self._gateways[gateway] = connection
                return connection
        raise NodeUnreachable(
            f"{gateway} unreachable after {self.policy.attempts} attempts: "
            f"{type(last_error).__name__}: {last_error}"
        )

    def _connect(self, node: NodeTarget, gateway: Connection | None = None) -> tuple[Connection, int]:
        """An open Connection, retrying connection errors with exponential backoff."""
        key = (node.host, node.port, node.user)
        with self._connections_lock:
            cached = self._connections.get(key)
        if cached is not None and cached.is_connected:
            return cached, 0

        policy = self.policy
        last_error: BaseException | None = None
        for attempt in range(1, policy.attempts + 1):
            connect_kwargs = self._connect_kwargs(node.key_filename)
            if gateway is None and node.proxy_command:
                # A node without an address of its own is reached through its ProxyCommand.
                connect_kwargs["sock"] = _ProxyCommand(node.proxy_command)
            connection = Connection(
                host=node.host,
                port=node.port,
                user=node.user,
                config=_fabric_config(),
                gateway=gateway,
                connect_kwargs=connect_kwargs,
            )
            try:
                connection.open()
            except CONNECT_ERRORS as error:
                _close(connection)
                if "sock" in connect_kwargs:
                    connect_kwargs["sock"].close()
                last_error = error
                if attempt < policy.attempts:
                    self._sleep(policy.delay(attempt))
                continue
            _no_delay(connection)
            _quiet_when_idle(connection)
            # Opening a session must fail within the connect timeout, not paramiko's hour: a
            # kept connection can outlive its peer silently (no RST), and a node's sshd is its
            # tenant's to make answer nothing.
            transport = connection.client.get_transport() if connection.client else None
            if transport is not None:
                transport.channel_timeout = policy.connect_timeout
            if self.keep_connections:
                with self._connections_lock:
                    self._connections[key] = connection
            return connection, attempt
        raise NodeUnreachable(
            f"{node.name} ({node.host}:{node.port}) unreachable after {policy.attempts} "
            f"attempts: {type(last_error).__name__}: {last_error}"
        )

    def _unreachable(self, node: NodeTarget, error: str, seconds: float) -> NodeResult:
        return NodeResult(
            node=node,
            ok=False,
            exit_code=None,
            stdout="",
            stderr=error,
            unreachable=True,
            attempts=self.policy.attempts,
            error=error,
            seconds=seconds,
        )

    def _run_on_node(
        self,
        node: NodeTarget,
        payload: str,
        step: str,
        on_output: OutputCallback | None,
        gateway: Connection | None,
        retired: list[Connection],
        limits: _Limits | None = None,
    ) -> NodeResult:
        limits = limits or _Limits(self.policy.command_timeout, self.policy.max_output)
        started = time.monotonic()
        try:
            connection, attempts = self._connect(node, gateway)
        except NodeUnreachable as error:
            return self._unreachable(node, str(error), time.monotonic() - started)

        current_step = [step]

        def emit(line: str) -> None:
            if line.startswith(STEP_MARKER):
                current_step[0] = f"{step}:{line[len(STEP_MARKER):].strip()}"
            if on_output is not None:
                with self._output_lock:
                    on_output(node.name, current_step[0], line)

        out, err = _LineSink(emit), _LineSink(emit)
        failed = False
        watchdog: _Watchdog | None = None
        try:
            try:
                channel = connection.create_session()
            except CONNECT_ERRORS:
                if attempts:
                    raise
                # A kept connection that died since the last step: reconnect once.
                _close(connection)
                with self._connections_lock:
                    self._connections.pop((node.host, node.port, node.user), None)
                try:
                    connection, attempts = self._connect(node, gateway)
                except NodeUnreachable as error:
                    return self._unreachable(node, str(error), time.monotonic() - started)
                channel = connection.create_session()
            watchdog = _Watchdog(connection, limits.timeout)
            exit_code, stdout, stderr = _execute(channel, payload, out, err, limits.timeout, limits.max_output)
            if watchdog.fired:  # the closed channel reads as an exit status of -1
                raise CommandTimeout(f"did not finish within {limits.timeout:g} seconds")
        except Exception as raised:  # noqa: BLE001 - any failure is reported per node
            failed = True
            with self._connections_lock:
                self._connections.pop((node.host, node.port, node.user), None)
            # Whatever the closed session raised, a watchdog that fired means the deadline.
            fired = watchdog is not None and watchdog.fired
            problem = CommandTimeout(f"did not finish within {limits.timeout:g} seconds") if fired else raised
            cut_off = isinstance(problem, CommandTimeout | OutputTooLarge)
            said = str(problem) if cut_off else f"{type(problem).__name__}: {problem}"
            return NodeResult(
                node=node,
                ok=False,
                exit_code=None,
                stdout="",
                stderr=said,
                attempts=max(attempts, 1),
                error=said,
                seconds=time.monotonic() - started,
                cut_off=cut_off,
            )
        finally:
            if watchdog is not None:
                watchdog.cancel()
            out.close()
            err.close()
            if failed or not self.keep_connections:
                self._done_with(connection, gateway, retired)

        return NodeResult(
            node=node,
            ok=exit_code == 0,
            exit_code=exit_code,
            stdout=stdout,
            stderr=stderr,
            attempts=max(attempts, 1),
            error="" if exit_code == 0 else f"exit status {exit_code}",
            seconds=time.monotonic() - started,
        )


class _Watchdog:
    """Closes a node's connection at the command's deadline, whatever paramiko call the
    node's thread is blocked in: `exec_command` waits for the server's reply with no timeout
    of its own, and `sendall` for window space the server may never give."""

    def __init__(self, connection: Connection, timeout: float | None) -> None:
        self.fired = False
        self._connection = connection
        self._timer = None if timeout is None else threading.Timer(timeout, self._fire)
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        transport = self._connection.client.get_transport() if self._connection.client else None
        if transport is not None:
            transport.close()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _execute(
    channel: paramiko.Channel,
    payload: str,
    out: _LineSink,
    err: _LineSink,
    timeout: float | None,
    max_output: int | None = None,
) -> tuple[int, str, str]:
    """Run `payload` (see `REMOTE_COMMAND`) over one SSH session; stream the output.

    Uses the Connection's session channel (`Connection.create_session`) directly rather
    than `Connection.run`: invoke's runner polls stdin and completion every 10 ms from two
    threads per command, which with 64 nodes costs more control-plane CPU than the SSH
    work itself. Here each node's
    thread sleeps in the kernel until its channel has data.

    Raises CommandTimeout past `timeout` seconds and OutputTooLarge past `max_output` bytes
    of stdout and stderr together (nothing past the cap is kept).
    """
    try:
        if timeout is not None:
            channel.settimeout(timeout)  # sendall into a window the server never opens
        channel.exec_command(REMOTE_COMMAND)
        channel.sendall(payload.encode())
        channel.shutdown_write()
        decoders = (codecs.getincrementaldecoder("utf-8")("replace"), codecs.getincrementaldecoder("utf-8")("replace"))
        chunks: tuple[list[str], list[str]] = ([], [])
        deadline = None if timeout is None else time.monotonic() + timeout
        received = 0

        def take(data: bytes) -> None:
            nonlocal received
            received += len(data)
            if max_output is not None and received > max_output:
                raise OutputTooLarge(f"printed more than {max_output // 1024} KiB, more than the control plane reads")

        with selectors.DefaultSelector() as selector:
            selector.register(channel, selectors.EVENT_READ)
            while True:
                while channel.recv_ready():
                    data = channel.recv(65536)
                    take(data)
                    text = decoders[0].decode(data)
                    chunks[0].append(text)
                    out.write(text)
                while channel.recv_stderr_ready():
                    data = channel.recv_stderr(65536)
                    take(data)
                    text = decoders[1].decode(data)
                    chunks[1].append(text)
                    err.write(text)
                if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise CommandTimeout(f"did not finish within {timeout:g} seconds")
                if channel.eof_received:
                    # No more output will come, and paramiko keeps the channel readable from
                    # here on: wait for the exit status itself (sshd often sends it after EOF),
                    # not in a loop of selects that return at once.
                    channel.status_event.wait(timeout=1.0)
                    continue
                # Wakes on data or close; the cap re-checks the exit status and deadline.
                selector.select(timeout=1.0)
        for index, sink in enumerate((out, err)):
            tail = decoders[index].decode(b"", final=True)
            if tail:
                chunks[index].append(tail)
                sink.write(tail)
        return channel.recv_exit_status(), "".join(chunks[0]), "".join(chunks[1])
    finally:
        channel.close()


def port_is_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
