"""A host's sshd and the host keys its machines make, with the standard library and OpenSSH's
own tools only: the host runtime ships this to hosts that have no Python packages."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")


def find_sshd() -> str | None:
    for candidate in SSHD_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("sshd")
    # sshd re-executes itself and insists on an absolute path.
    return os.path.abspath(found) if found else None


def write_host_key(private_path: Path, comment: str) -> str:
    """An ed25519 key pair made by ssh-keygen (0600 private key and its .pub); returns the
    public line."""
    private_path.unlink(missing_ok=True)
    Path(f"{private_path}.pub").unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(private_path)],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return Path(f"{private_path}.pub").read_text().strip()
