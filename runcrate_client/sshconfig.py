"""The customer's side of SSH by name: files under ~/.runcrate/ssh and one Include line.

`runcrate clusters ssh-config NAME` (and `runcrate clusters ssh`, which refreshes them first)
writes the cluster's ssh-config block and its nodes' host keys from the API, and puts
`Include ~/.runcrate/ssh/*.config` at the top of ~/.ssh/config once, the way SkyPilot does:
`ssh train-node-3` then works from any terminal, and a replaced node's new host key arrives
with the next refresh instead of a "host key changed" warning.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

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
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)
