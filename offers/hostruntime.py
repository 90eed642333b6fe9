"""The host runtime as the control plane reaches it: on this computer as root through one sudo
rule (LocalRuntime), over SSH (Fabric) on a fleet host (SshRuntime); on both, `install` put a
versioned copy (docs/nodeops.md, "The host
runtime"). The program itself is clusters/providers/local/runtime.py.

The copy shipped to a host is the runtime's modules exactly as they are in this repository,
under their own package paths, with empty package `__init__` files and `run.py`, the entry
point; its version is a hash of those files, so a changed runtime is a new version, installed
beside the old one by the next `hosts add` or re-grade.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabric import Config, Connection

REPO = Path(__file__).resolve().parents[1]
MODULES = (
    "clusters/nodeops/targets.py",
    "clusters/providers/local/cdi.py",
    "clusters/providers/local/egress.py",
    "clusters/providers/local/gateway.py",
    "clusters/providers/local/hostkeys.py",
    "clusters/providers/local/images.py",
    "clusters/providers/local/lxcfs.py",
    "clusters/providers/local/nodeboot.py",
    "clusters/providers/local/realnodes.py",
    "clusters/providers/local/runtime.py",
    "clusters/providers/local/userns.py",
    "clusters/providers/local/wipe.py",
)
PACKAGES = ("clusters", "clusters/nodeops", "clusters/providers", "clusters/providers/local")
ENTRY_POINT = """\
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clusters.providers.local.runtime import main  # noqa: E402

sys.exit(main())
"""
HOST_STATE = "/var/lib/runcrate-host"
SSH_TIMEOUT = 10.0
# A command's answer, boot included (a machine boots in seconds; its image is prepared before).
COMMAND_TIMEOUT = 120.0
PREPARE_TIMEOUT = 1800.0


def bundle_files() -> dict[str, bytes]:
    files = {path: (REPO / path).read_bytes() for path in MODULES}
    files.update({f"{package}/__init__.py": b"" for package in PACKAGES})
    files["run.py"] = ENTRY_POINT.encode()
    return files


def version() -> str:
    digest = hashlib.sha256()
    for path, content in sorted(bundle_files().items()):
        digest.update(path.encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()[:12]


def bundle() -> bytes:
    """The runtime as a gzipped tar: its files and VERSION."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for path, content in sorted({**bundle_files(), "VERSION": f"{version()}\n".encode()}.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(content), 0o644, 0
            tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def unpack_bundle(folder: Path) -> None:
    """The runtime's files (`bundle`) into `folder`: our own plain files only; Pythons before
    3.11.4 (Debian 12's 3.11.2) have no extraction filters."""
    with tarfile.open(fileobj=io.BytesIO(bundle()), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(folder, filter="data")
        else:
            tar.extractall(folder)


def install_dir(runtime_version: str) -> str:
    return f"{HOST_STATE}/runtime/{runtime_version}"


class RuntimeFailed(Exception):
    """The runtime on a host did not answer, or answered an error: the message says which."""


@dataclass(frozen=True)
class HostLogin:
    """How the control plane logs in to a fleet host (offers.PhysicalHost)."""

    name: str
    address: str
    port: int
    user: str
    key_path: str
    host_key: str = ""  # "type base64", seen at onboarding

    def connection(self) -> Connection:
        # No ~/.ssh/config and no agent: the host is reached with the key the operator named.
        return Connection(
            host=self.address, port=self.port, user=self.user,
            config=Config(overrides={"load_ssh_configs": False}, lazy=True), connect_timeout=SSH_TIMEOUT,
            connect_kwargs={"key_filename": self.key_path, "look_for_keys": False, "allow_agent": False,
                            "banner_timeout": SSH_TIMEOUT, "auth_timeout": SSH_TIMEOUT},
        )


class SshRuntime:
    """The runtime installed on a fleet host, one SSH session per command."""

    def __init__(self, login: HostLogin, runtime_version: str | None = None) -> None:
        self.login = login
        self.version = runtime_version or version()

    @property
    def program(self) -> str:
        return f"python3 -I {install_dir(self.version)}/run.py"

    def install(self) -> str:
        """Put this version of the runtime on the host (idempotent); returns its version."""
        directory = install_dir(self.version)
        with self.login.connection() as connection:
            connection.run(f"mkdir -p {directory}.tmp && chmod 700 {HOST_STATE}", hide=True, in_stream=False,
                           timeout=COMMAND_TIMEOUT)
            connection.put(io.BytesIO(bundle()), f"{directory}.tmp/runtime.tar.gz")
            connection.run(
                f"cd {directory}.tmp && tar -xzf runtime.tar.gz && rm runtime.tar.gz && rm -rf {directory} && "
                f"mv {directory}.tmp {directory} && cp {directory}/VERSION {HOST_STATE}/VERSION",
                hide=True, in_stream=False, timeout=COMMAND_TIMEOUT,
            )
        return self.version

    def call(self, command: str, request: dict[str, Any] | None = None, timeout: float = COMMAND_TIMEOUT) -> Any:
        try:
            with self.login.connection() as connection:
                result = connection.run(f"{self.program} {command}", hide=True, warn=True, timeout=timeout,
                                        in_stream=io.StringIO(json.dumps(request or {})))
        except Exception as error:  # noqa: BLE001 — paramiko's, invoke's and the socket's errors alike
            raise RuntimeFailed(f"{self.login.name} did not answer ({type(error).__name__}: {error})") from None
        try:
            answer = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RuntimeFailed(f"{self.login.name}'s runtime answered no JSON to {command} "
                                f"(exit {result.exited}: {result.stderr.strip()[-300:]})") from None
        # A machine that did not start is an answer ({"running": false, "error", "detail"}), not
        # a runtime that failed: its caller keeps the customer's words and logs the detail.
        if isinstance(answer, dict) and "error" in answer and "running" not in answer:
            detail = f" ({answer['detail']})" if answer.get("detail") else ""
            raise RuntimeFailed(f"{self.login.name}'s runtime: {answer['error']}{detail}")
        return answer

    def proxy_command(self, key: str, known_hosts: Path) -> str:
        """An SSH ProxyCommand that reaches the machine `key`'s sshd through its host's runtime."""
        login = self.login
        return " ".join(shlex.quote(word) for word in (
            "ssh", "-i", login.key_path, "-p", str(login.port), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-o", f"HostKeyAlias={login.name}", "-o", f"ConnectTimeout={int(SSH_TIMEOUT)}", "-F", "/dev/null",
            f"{login.user}@{login.address}", f"{self.program} enter {key}",
        ))


# This computer's runtime runs on the system's Python; the sudo rule names one program, which
# runs an installed version of it (bin/host-setup writes both).
SYSTEM_PYTHON = "/usr/bin/python3"
RUNTIME_PROGRAM = "/usr/local/sbin/runcrate-host-runtime"


class LocalRuntime:
    """The runtime installed on this computer, for the `local` provider: the same program and
    the same JSON as on a fleet host, run as root. A control plane that is not root (`make
    run`) reaches it through one sudo rule that allows exactly the installed runtime's program
    (bin/host-setup writes it; docs/nodeops.md says why this rule rather than SSH to this
    computer); one that is root (the tests) runs it directly. `instance` keeps this control
    plane's machines apart from other checkouts' on the same computer."""

    def __init__(self, instance: str, runtime_version: str | None = None) -> None:
        self.instance = instance
        self.version = runtime_version or version()

    @property
    def directory(self) -> Path:
        return Path(install_dir(self.version))

    def program(self, *args: str) -> list[str]:
        if os.geteuid() == 0:
            return [SYSTEM_PYTHON, "-I", str(self.directory / "run.py"), "--instance", self.instance, *args]
        return ["sudo", "-n", RUNTIME_PROGRAM, self.version, "--instance", self.instance, *args]

    def install(self) -> str:
        """Put this version on this computer, as `hosts add` puts it on a host (idempotent; root
        only: the runtime's folder is root's alone, so the program the sudo rule allows is
        what this repository shipped, and nothing the control plane's user could change)."""
        if (self.directory / "run.py").exists():
            return self.version
        versions = self.directory.parent
        versions.mkdir(parents=True, exist_ok=True)
        Path(HOST_STATE).chmod(0o700)
        staging = Path(tempfile.mkdtemp(prefix=f".{self.version}.", dir=versions))
        try:
            unpack_bundle(staging)
            staging.chmod(0o755)
            try:
                staging.rename(self.directory)
            except OSError:
                if not (self.directory / "run.py").exists():  # another process installed it first
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return self.version

    def call(self, command: str, request: dict[str, Any] | None = None, timeout: float = COMMAND_TIMEOUT) -> Any:
        if os.geteuid() == 0:
            self.install()
        try:
            result = subprocess.run(self.program(command), input=json.dumps(request or {}), capture_output=True,
                                    text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise RuntimeFailed(f"this computer's runtime did not answer ({type(error).__name__}: {error})") from None
        try:
            answer = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RuntimeFailed(f"this computer's runtime {self.version} answered no JSON to {command} (exit "
                                f"{result.returncode}: {result.stderr.strip()[-300:]}); is it installed (bin/host-setup, "
                                "or `make run` as root)?") from None
        if isinstance(answer, dict) and "error" in answer:
            raise RuntimeFailed(f"this computer's runtime: {answer['error']}")
        return answer

    def proxy_command(self, key: str) -> str:
        """An SSH ProxyCommand that reaches the machine `key`'s sshd through the runtime."""
        return " ".join(shlex.quote(word) for word in self.program("enter", key))

