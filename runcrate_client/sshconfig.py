"""The customer's side of SSH by name: files under ~/.runcrate/ssh and one Include line.

`runcrate clusters ssh-config NAME` (and every command that connects: `ssh`, `exec`, `cp`,
`port-forward`) writes ~/.runcrate/ssh/NAME.ENVIRONMENT.config and puts `Include
~/.runcrate/ssh/*.config` at the top of ~/.ssh/config once, the way SkyPilot does: `ssh
train-node-3` then works from any terminal. Clusters of one name in two environments each keep
their file, and `ssh train.prod-node-3` names one of them; `train-node-3` is answered only while
one environment has a cluster of that name written here (ssh would otherwise take whichever
file it read first). The file never goes stale: one wildcard Host reaches every node, present or future,
through a ProxyCommand (`runcrate clusters _proxy`) that asks the API for the node's current
address when the connection opens, and a KnownHostsCommand (`runcrate clusters _known-hosts`,
OpenSSH 8.5+) that gives ssh the node's current host key. A node added or replaced answers
under its name at once, with no "host key changed" warning and no first-use prompt.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INCLUDE_LINE = "Include ~/.runcrate/ssh/*.config"
MARKER = "# Added by runcrate: ssh <cluster>-node-N"
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class Written:
    config: Path
    known_hosts: Path
    include_added: bool


def ssh_dir(home: Path | None = None) -> Path:
    return (home or Path.home()) / ".runcrate" / "ssh"


def write_cluster_files(cluster_name: str, ssh_config: str, known_hosts: str, home: Path | None = None) -> Written:
    """Write <name>.known_hosts and <name>.config (pointing at it) and make sure ~/.ssh/config
    includes them. `ssh_config` is the API's block; the lines checking host keys strictly
    against the written file are added to each Host here."""
    if not SAFE_NAME.match(cluster_name):
        raise ValueError(f"{cluster_name!r} is not a name a file can be written under")
    directory = ssh_dir(home)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    known_path = directory / f"{cluster_name}.known_hosts"
    config_path = directory / f"{cluster_name}.config"
    _write(known_path, known_hosts)
    lines = []
    for line in ssh_config.splitlines():
        lines.append(line)
        if line.startswith("Host "):
            lines += [f"    UserKnownHostsFile {known_path}", "    StrictHostKeyChecking yes"]
    _write(config_path, "\n".join(lines) + "\n")
    return Written(config_path, known_path, ensure_include(home))


ENVIRONMENT_LABEL = re.compile(r"^[a-z0-9][a-z0-9_-]{0,49}$")


def environment_label(cluster: dict[str, Any]) -> str:
    """The cluster's environment as a file name and ssh alias can carry it: its name where that
    is plain (`prod`), else its id (`env-7`)."""
    name = str(cluster.get("environment") or "")
    return name if ENVIRONMENT_LABEL.match(name) else f"env-{cluster.get('environment_id') or 0}"


def qualified_name(cluster: dict[str, Any]) -> str:
    """`train.prod`: the cluster's name in its environment, what its file and full alias carry
    (cluster names have no dot, so no two clusters share one)."""
    return f"{cluster['name']}.{environment_label(cluster)}"


def write_live_config(cluster: dict[str, Any], runcrate: Sequence[str], home: Path | None = None) -> Written:
    """Write <name>.<environment>.config: one Host pattern for every node of the cluster,
    whatever its nodes are now, resolved when ssh connects. `runcrate` is the command line that
    runs this CLI against the same API and environment (the ProxyCommand's and
    KnownHostsCommand's start). The known_hosts file beside it is kept for the static lines the
    API also gives (a `ssh -o UserKnownHostsFile=…` by address); ssh itself reads the key from
    the command."""
    name, qualified = str(cluster["name"]), qualified_name(cluster)
    if not SAFE_NAME.match(name) or not SAFE_NAME.match(qualified):
        raise ValueError(f"{name!r} is not a name a file can be written under")
    directory = ssh_dir(home)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    known_path = directory / f"{qualified}.known_hosts"
    config_path = directory / f"{qualified}.config"
    _write(known_path, str(cluster.get("known_hosts") or ""))
    # The file this CLI wrote before files carried the environment answers the same alias.
    for old in (directory / f"{name}.config", directory / f"{name}.known_hosts"):
        old.unlink(missing_ok=True)
    namesakes = [p for p in directory.glob(f"{name}.*.config") if p != config_path]
    _write(config_path, live_config_text(cluster, runcrate, short_alias=not namesakes))
    for other in namesakes:  # the short alias is no longer one cluster's: each keeps its full one
        _write(other, "\n".join(_without_short_alias(line, name) for line in other.read_text().split("\n")))
    return Written(config_path, known_path, ensure_include(home))


def _without_short_alias(line: str, name: str) -> str:
    if not line.startswith("Host "):
        return line
    return "Host " + " ".join(p for p in line.split()[1:] if not p.startswith(f"{name}-node-"))


def live_config_text(cluster: dict[str, Any], runcrate: Sequence[str], *, short_alias: bool = True) -> str:
    name, cluster_id, qualified = str(cluster["name"]), str(cluster["id"]), qualified_name(cluster)
    users = [str((n.get("ssh_endpoint") or {}).get("user") or "") for n in cluster.get("nodes") or []]
    user = next((u for u in users if u), "root")
    command = " ".join(shlex.quote(part) for part in runcrate)
    # node-0 … node-99 (a cluster has at most 64 nodes), and no other cluster's `<name>-node-…`.
    pattern = f"{qualified}-node-? {qualified}-node-??" + (f" {name}-node-? {name}-node-??" if short_alias else "")
    return "\n".join([
        f"# Runcrate cluster {name} (id {cluster_id}). Written by `runcrate clusters ssh-config`; it does not",
        "# go stale: each connection asks the API for the node's address and host key.",
        f"Host {pattern}",
        f"    User {user}",
        f"    ProxyCommand {command} clusters _proxy {cluster_id} %n",
        f"    KnownHostsCommand {command} clusters _known-hosts {cluster_id} %H",
        # Only the key the API gives counts: never a key remembered for the name, never a prompt.
        "    UserKnownHostsFile none",
        "    GlobalKnownHostsFile none",
        "    StrictHostKeyChecking yes",
        "    CheckHostIP no",
        "    ServerAliveInterval 30",
        "",
    ])


def node_name_of(host: str) -> str:
    """node-3 from what ssh was asked for (`train-node-3`, or `node-3`)."""
    found = re.search(r"(?:^|-)(node-\d+)$", host)
    if not found:
        raise ValueError(f"{host!r} does not name a node (node-0, node-1, ...)")
    return found.group(1)


# -- the resolved endpoints, cached briefly ----------------------------------------------------
#
# The ProxyCommand asks the API for the node and keeps what it got; the KnownHostsCommand, run by
# the same ssh moments later, reads it instead of asking again. When the API cannot be reached
# the last answer is used (the node may well be where it was), and ssh still checks its key.

CACHE_FRESH_SECONDS = 120.0


@dataclass(frozen=True)
class NodeAccess:
    cluster_name: str
    node: str
    host: str
    port: int
    user: str
    proxy_jump: str
    host_key: str
    fetched_at: float

    def known_hosts_line(self, name: str) -> str:
        return f"{name} {self.host_key}" if self.host_key else ""


def node_access(cluster: dict[str, Any], node: str) -> NodeAccess | None:
    """The live node named `node` of a cluster record (GET /clusters/{id}); None when it has no
    endpoint now (not up yet, or no such node)."""
    for record in cluster.get("nodes") or []:
        endpoint = record.get("ssh_endpoint")
        if record.get("name") == node and endpoint and not record.get("replacing"):
            return NodeAccess(
                cluster_name=str(cluster.get("name")), node=node, host=str(endpoint["host"]),
                port=int(endpoint["port"]), user=str(endpoint.get("user") or "root"),
                proxy_jump=str(endpoint.get("proxy_jump") or ""), host_key=str(record.get("host_key") or ""),
                fetched_at=time.time(),
            )
    return None


def _cache_path(cluster_id: str, node: str, home: Path | None = None) -> Path:
    return ssh_dir(home) / "cache" / f"{cluster_id}-{node}.json"


def remember(cluster_id: str, access: NodeAccess, home: Path | None = None) -> None:
    path = _cache_path(cluster_id, access.node, home)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write(path, json.dumps(access.__dict__))


def remembered(cluster_id: str, node: str, home: Path | None = None) -> NodeAccess | None:
    try:
        return NodeAccess(**json.loads(_cache_path(cluster_id, node, home).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def ensure_include(home: Path | None = None) -> bool:
    """Put the Include line first in ~/.ssh/config (an Include after a `Host` line would only
    apply inside that Host). True when it was added now."""
    ssh = (home or Path.home()) / ".ssh"
    ssh.mkdir(exist_ok=True, mode=0o700)
    config = ssh / "config"
    text = config.read_text() if config.exists() else ""
    if any(line.strip() == INCLUDE_LINE for line in text.splitlines()):
        return False
    _write(config, f"{MARKER}\n{INCLUDE_LINE}\n\n{text}")
    return True


def _write(path: Path, text: str) -> None:
    # A temporary name of this process's own: two connections to one node may write at once.
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)
