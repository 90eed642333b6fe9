"""runcrate clusters exec / cp / port-forward, and the ssh config's resolvers (_proxy, _known-hosts).

Thin layers over the customer's own OpenSSH: every connection goes through `ssh <cluster>-node-N`
as the Included ~/.runcrate/ssh/<cluster>.config defines it (their keys, their agent, their
~/.ssh/config), never through the control plane, which runs no customer command.
`RUNCRATE_SSH_CONFIG` names an ssh config file to use instead of ~/.ssh/config (passed as `ssh -F`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, NoReturn

import click

from runcrate_client import sshconfig
from runcrate_client.api import ApiError, Record, RuncrateError
from runcrate_client.cli.base import (
    EXIT_CONFLICT,
    EXIT_OK,
    EXIT_OTHER,
    EXIT_USAGE,
    State,
    fail,
    json_option,
    pass_state,
    print_json,
)
from runcrate_client.cli.clusters import clusters

# What ssh exits with when it could not connect (or the ProxyCommand gave up).
SSH_FAILED = 255


# -- the ssh config, written from the API ------------------------------------------------------


def runcrate_command(state: State, cluster: Record) -> list[str]:
    """This CLI, pointed at the same API and environment, as a ProxyCommand runs it: the key is
    found as the CLI finds it (RUNCRATE_API_KEY or the config file), never written into a file."""
    config = state.config()
    return [sys.executable, "-m", "runcrate_client", "--api-url", config.api_url,
            "-e", str(cluster.get("environment_id") or config.environment or "")]


def write_ssh_files(state: State, cluster_id: str) -> tuple[Record, sshconfig.Written]:
    client = state.client()
    cluster = client.clusters.get(client.find_cluster_id(cluster_id))
    if not cluster.get("ssh_config"):
        fail(f"Cluster {cluster.get('name')} is {cluster.get('status')}: its nodes take SSH "
             "once every machine is up and joined.", EXIT_CONFLICT)
    return cluster, sshconfig.write_live_config(cluster, runcrate_command(state, cluster))


def ssh_program(name: str = "ssh") -> str:
    found = shutil.which(name)
    if found is None:
        fail(f"No {name} on PATH (install OpenSSH).", EXIT_OTHER)
    return found


def config_options() -> list[str]:
    path = os.environ.get("RUNCRATE_SSH_CONFIG")
    return ["-F", path] if path else []


def live_nodes(cluster: Record) -> list[str]:
    return [str(n["name"]) for n in cluster.get("nodes") or [] if n.get("ssh_endpoint") and not n.get("replacing")]


def alias(cluster: Record, node: str) -> str:
    """The Host the cluster's file always answers, whatever other environment has a namesake."""
    return f"{sshconfig.qualified_name(cluster)}-{node}"


def shares_folder(cluster: Record) -> bool:
    offer = cluster.get("offer") or {}
    return isinstance(offer, dict) and offer.get("machine_kind") != "container"


@clusters.command("ssh-config")
@click.argument("cluster_id", metavar="CLUSTER")
@click.option("--print", "just_print", is_flag=True, help="Print the API's static block (addresses as they are now) "
              "instead of writing files.")
@pass_state
def clusters_ssh_config(state: State, cluster_id: str, just_print: bool) -> None:
    """Write ~/.runcrate/ssh/CLUSTER.ENVIRONMENT.config and include it from ~/.ssh/config, so
    `ssh CLUSTER-node-3` works from any terminal (`ssh CLUSTER.ENVIRONMENT-node-3` where another
    environment has a cluster of that name). Once is enough: each connection asks the API where the node is and
    what its host key is, so added and replaced nodes answer under their names at once."""
    client = state.client()
    if just_print:
        cluster = client.clusters.get(client.find_cluster_id(cluster_id))
        click.echo(cluster.get("ssh_config") or "")
        return
    cluster, written = write_ssh_files(state, cluster_id)
    short = f"{cluster['name']}-node-"
    name = short if f" {short}?" in written.config.read_text() else f"{sshconfig.qualified_name(cluster)}-node-"
    click.echo(f"Wrote {written.config}: ssh {name}N reaches every node, now and after an add or a replace.")
    if written.include_added:
        click.echo("Added 'Include ~/.runcrate/ssh/*.config' at the top of ~/.ssh/config.")
    click.echo(f"Now: ssh {name}0")


@clusters.command("ssh", context_settings={"ignore_unknown_options": True})
@click.argument("cluster_id", metavar="CLUSTER")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[NODE] [COMMAND]...")
@pass_state
def clusters_ssh(state: State, cluster_id: str, command: tuple[str, ...]) -> None:
    """Open a shell on a node (node-0 unless NODE is given), or run COMMAND there, as ssh does:
    `runcrate clusters ssh train hostname` runs hostname on node-0."""
    node = "node-0"
    if command and re.fullmatch(r"node-\d+", command[0]):
        node, command = command[0], command[1:]
    cluster, _ = write_ssh_files(state, cluster_id)
    names = live_nodes(cluster)
    if node not in names:
        fail(f"Cluster {cluster['name']} has no node {node} to connect to ({', '.join(names)}).")
    ssh = ssh_program()
    sys.stdout.flush()
    # By the alias the Include in ~/.ssh/config now knows: the customer's own settings
    # (keys, agent) apply as for any host of theirs.
    os.execv(ssh, [ssh, *config_options(), alias(cluster, node), *command])


# -- _proxy and _known-hosts: what ssh runs when `ssh <cluster>-node-N` opens ----------------------


def _resolve(state: State, cluster_id: str, host: str) -> sshconfig.NodeAccess:
    """The node's current address and key from the API, remembered for the KnownHostsCommand;
    the last known ones when the API cannot be reached."""
    try:
        node = sshconfig.node_name_of(host)
    except ValueError as error:
        _give_up(str(error))
    try:
        cluster = state.client().clusters.get(cluster_id)
    except ApiError as error:
        _give_up(f"the API refused to say where {node} is: {error}")
    except RuncrateError as error:
        kept = sshconfig.remembered(cluster_id, node)
        if kept is None:
            _give_up(f"cannot ask the API where {node} is ({error}), and it was never reached before")
        click.echo(f"runcrate: the API cannot be reached ({error}); trying {node}'s last known address.", err=True)
        return kept
    access = sshconfig.node_access(cluster, node)
    if access is None:
        names = live_nodes(cluster)
        known = {str(n.get("name")): n for n in cluster.get("nodes") or []}
        if node in known and cluster.get("status") in ("ready", "degraded"):
            _give_up(f"{node} of cluster {cluster.get('name')} is {known[node].get('status')}: it takes SSH once it "
                     f"is up (runcrate clusters watch {cluster.get('name')})")
        if node in known or not names:
            _give_up(f"cluster {cluster.get('name')} is {cluster.get('status')}: its nodes take SSH once every "
                     "machine is up and joined")
        _give_up(f"cluster {cluster.get('name')} has no node {node} ({', '.join(names)})")
    sshconfig.remember(cluster_id, access)
    return access


def _give_up(message: str) -> NoReturn:
    click.echo(f"runcrate: {message}.", err=True)
    sys.exit(SSH_FAILED)


@clusters.command("_proxy", hidden=True)
@click.argument("cluster_id")
@click.argument("host")
@pass_state
def clusters_proxy(state: State, cluster_id: str, host: str) -> None:
    """ProxyCommand of ~/.runcrate/ssh/<cluster>.config: connect ssh's stdin/stdout to the node's
    SSH wherever it answers now."""
    access = _resolve(state, cluster_id, host)
    if access.proxy_jump:
        # Through the site's gateway, as `ssh -J` would.
        os.execv(ssh_program(), ["ssh", "-W", f"{access.host}:{access.port}", access.proxy_jump])
    try:
        connection = socket.create_connection((access.host, access.port), timeout=15)
    except OSError as error:
        _give_up(f"{access.node} of cluster {access.cluster_name} does not answer ({error.strerror or error})")
    connection.settimeout(None)
    _relay(connection)


def _relay(connection: socket.socket) -> None:
    """Bytes both ways until the node closes; stdin's end is passed on as a half close."""

    def upstream() -> None:
        try:
            while data := os.read(0, 65536):
                connection.sendall(data)
            connection.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=upstream, daemon=True).start()
    try:
        while data := connection.recv(65536):
            view = memoryview(data)
            while view:
                view = view[os.write(1, view):]
    except OSError:
        pass
    finally:
        connection.close()


@clusters.command("_known-hosts", hidden=True)
@click.argument("cluster_id")
@click.argument("host")
@pass_state
def clusters_known_hosts(state: State, cluster_id: str, host: str) -> None:
    """KnownHostsCommand of ~/.runcrate/ssh/<cluster>.config: the node's current host key, as a
    known_hosts line under the name ssh looks for."""
    try:
        node = sshconfig.node_name_of(host.strip("[]").split("]:")[0])
    except ValueError:
        return
    access = sshconfig.remembered(cluster_id, node)
    # The ProxyCommand asked the API a moment ago: ask again only when that is not so.
    if access is None or time.time() - access.fetched_at > sshconfig.CACHE_FRESH_SECONDS:
        access = _resolve(state, cluster_id, host)
    if access.host_key:
        click.echo(access.known_hosts_line(host))


# -- exec ----------------------------------------------------------------------------------------


@dataclass
class NodeRun:
    node: str
    process: subprocess.Popen[bytes]
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


def chosen_nodes(cluster: Record, nodes: str | None) -> list[str]:
    names = live_nodes(cluster)
    if not nodes:
        return names
    asked = [n.strip() for n in nodes.split(",") if n.strip()]
    unknown = [n for n in asked if n not in names]
    if unknown:
        fail(f"Cluster {cluster['name']} has no node {', '.join(unknown)} to run on ({', '.join(names)}).")
    return list(dict.fromkeys(asked))


@clusters.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("cluster_id", metavar="CLUSTER")
@click.option("--nodes", help="Only these nodes, comma-separated (node-1,node-3). Default: every node.")
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_state
def clusters_exec(state: State, cluster_id: str, nodes: str | None, as_json: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND on every node at once (or the --nodes named), over your own SSH: each line comes
    prefixed with its node, and the exit status is the worst of the nodes'. Put `--` before a
    COMMAND that has options of its own: runcrate clusters exec train -- nvidia-smi -L"""
    cluster, _ = write_ssh_files(state, cluster_id)
    targets = chosen_nodes(cluster, nodes)
    ssh = ssh_program()
    width = max(len(n) for n in targets)
    lock = threading.Lock()
    runs: list[NodeRun] = []
    readers: list[threading.Thread] = []
    for node in targets:
        process = subprocess.Popen(
            # stdin stays open and empty, as a terminal's does (srun forwards stdin to its tasks).
            [ssh, *config_options(), "-o", "BatchMode=yes", "-T", alias(cluster, node), "--", *command],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        run = NodeRun(node, process)
        runs.append(run)
        for stream, kept, err in ((process.stdout, run.stdout, False), (process.stderr, run.stderr, True)):
            reader = threading.Thread(target=_follow, args=(stream, kept, f"{node:<{width}}", err, lock, as_json),
                                      daemon=True)
            reader.start()
            readers.append(reader)
    codes: dict[str, int] = {}
    for run in runs:
        codes[run.node] = run.process.wait()
        if run.process.stdin:
            run.process.stdin.close()
    for reader in readers:
        reader.join()
    worst = max(codes.values(), default=EXIT_OK)
    if as_json:
        print_json([{"node": r.node, "exit_code": codes[r.node], "stdout": "".join(r.stdout),
                     "stderr": "".join(r.stderr)} for r in runs])
    else:
        for run in runs:
            if codes[run.node] != 0:
                said = "could not connect" if codes[run.node] == SSH_FAILED else f"exited with status {codes[run.node]}"
                click.echo(f"{run.node:<{width}}: {said}", err=True)
    sys.exit(worst)


def _follow(stream: IO[bytes] | None, kept: list[str], prefix: str, err: bool, lock: threading.Lock, quiet: bool) -> None:
    if stream is None:
        return
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        kept.append(line)
        if not quiet:
            with lock:
                click.echo(f"{prefix}: {line.rstrip(chr(10))}", err=err)


# -- cp --------------------------------------------------------------------------------------------

REMOTE = re.compile(r"^(?P<cluster>[A-Za-z0-9][A-Za-z0-9_.-]{0,62}):(?:(?P<node>node-\d+):)?(?P<path>.*)$")


@dataclass(frozen=True)
class Remote:
    cluster: str
    node: str
    path: str


def remote_of(argument: str) -> Remote | None:
    """`train:file`, `train:node-2:/tmp/x` → a place on a node; a path that exists here stays local."""
    found = REMOTE.match(argument)
    if found is None or os.path.exists(argument):
        return None
    return Remote(found["cluster"], found["node"] or "node-0", found["path"])


def remote_path(cluster: Record, path: str) -> str:
    """A relative path is under /shared where the nodes share it (vm, bare_metal), else under
    root's home on the node (container offers share no folder)."""
    base = "/shared" if shares_folder(cluster) else "/root"
    if path.startswith(("/", "~")):
        return path
    return f"{base}/{path}" if path else f"{base}/"


@clusters.command("cp")
@click.argument("source")
@click.argument("destination")
@click.option("--scp", "force_scp", is_flag=True, help="Copy with scp even where rsync is installed.")
@pass_state
def clusters_cp(state: State, source: str, destination: str, force_scp: bool) -> None:
    """Copy files or folders to or from a node: SOURCE and DESTINATION are a local path and
    CLUSTER:[node-N:]PATH. The node is node-0 unless named; a relative PATH is under /shared (on
    container offers, which share no folder: under /root of that node). rsync -a where it is
    installed here, scp -r otherwise.

    \b
      runcrate clusters cp ./data train:data          # /shared/data, on every node at once
      runcrate clusters cp train:node-2:/tmp/out.log .
    """
    here, there = remote_of(source), remote_of(destination)
    if bool(here) == bool(there):
        fail("Give one local path and one CLUSTER:[node-N:]PATH (e.g. runcrate clusters cp ./data train:data).")
    far = there or here
    assert far is not None
    cluster, _ = write_ssh_files(state, far.cluster)
    if far.node not in live_nodes(cluster):
        fail(f"Cluster {cluster['name']} has no node {far.node} to copy with ({', '.join(live_nodes(cluster))}).")
    spec = f"{alias(cluster, far.node)}:{remote_path(cluster, far.path)}"
    local = destination if here else source
    ends = [local, spec] if there else [spec, local]
    rsync = None if force_scp else shutil.which("rsync")
    if rsync:
        shell = " ".join(shlex.quote(part) for part in [ssh_program(), *config_options(), "-o", "BatchMode=yes"])
        done = subprocess.run([rsync, "-a", "-e", shell, *ends], check=False)
        # A node without rsync: the same copy with scp.
        if done.returncode not in (12, 127):
            sys.exit(done.returncode)
        click.echo("rsync is not on the node; copying with scp.", err=True)
    done = subprocess.run([ssh_program("scp"), *config_options(), "-o", "BatchMode=yes", "-r", "-q", *ends], check=False)
    sys.exit(done.returncode)


# -- port-forward -----------------------------------------------------------------------------------


@clusters.command("port-forward")
@click.argument("cluster_id", metavar="CLUSTER")
@click.argument("args", nargs=-1, required=True, metavar="[NODE] LOCAL[:REMOTE]")
@pass_state
def clusters_port_forward(state: State, cluster_id: str, args: tuple[str, ...]) -> None:
    """Forward a port of this computer (127.0.0.1:LOCAL) to a port on a node (REMOTE, the same as
    LOCAL unless given) until Ctrl-C: Jupyter (8888), TensorBoard (6006), the Ray dashboard (8265).
    The node is node-0 unless named.

    \b
      runcrate clusters port-forward train 8888          # Jupyter on node-0
      runcrate clusters port-forward train node-1 16006:6006
    """
    if len(args) > 2:
        fail("Give at most a node and LOCAL[:REMOTE] (e.g. runcrate clusters port-forward train node-1 8888).")
    node, ports = ("node-0", args[0]) if len(args) == 1 else args
    found = re.fullmatch(r"(\d{1,5})(?::(\d{1,5}))?", ports)
    if not node.startswith("node-") or found is None:
        fail(f"Expected [node-N] LOCAL[:REMOTE], e.g. node-1 8888:8888; got {' '.join(args)!r}.", EXIT_USAGE)
    local, remote = int(found[1]), int(found[2] or found[1])
    if not (0 < local < 65536 and 0 < remote < 65536):
        fail("Ports are 1 to 65535.", EXIT_USAGE)
    cluster, _ = write_ssh_files(state, cluster_id)
    if node not in live_nodes(cluster):
        fail(f"Cluster {cluster['name']} has no node {node} to forward to ({', '.join(live_nodes(cluster))}).")
    forward = subprocess.Popen([
        ssh_program(), *config_options(), "-N", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
        "-L", f"127.0.0.1:{local}:127.0.0.1:{remote}", alias(cluster, node),
    ])
    click.echo(f"Forwarding http://127.0.0.1:{local} to port {remote} on {node} of {cluster['name']}; "
               "Ctrl-C stops it.")
    try:
        code = forward.wait()
    except KeyboardInterrupt:
        forward.terminate()
        forward.wait()
        code = EXIT_OK
    sys.exit(code)

