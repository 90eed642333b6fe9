"""The host runtime: the program that boots, enters, lists and releases a host's isolated
machines, and grades and prepares the host (docs/nodeops.md, "The host runtime").

It runs as root on the host, with the host's own Python and the standard library only: it
imports nothing of Django and no package. The control plane runs it in process on this
computer (the `local` provider: `Runtime(machines_dir)`), and over SSH on a fleet host, where
`hosts add` installed it, versioned, under /var/lib/runcrate-host/runtime/<version>:

    python3 -E -s <dir>/run.py COMMAND  < request.json  > answer.json

Every command reads one JSON object (may be empty) on stdin and prints one JSON object on
stdout; a failure prints {"error": "..."} and exits 1. Commands: `check` (what the host can
run, the runtime's version), `prepare` (the machine image, the state folders: idempotent),
`boot`, `status`, `release` (with its wipe receipt: wipe.py), `list`, `join` (what the machines of one
cluster on this host need of it to join: their neighbours pinned, the head's /shared lent to
its workers), `files` (files written into a machine as its root would), and `enter KEY` (its
stdin and stdout become the machine's sshd, the way in for node operations: it reads no
request and prints no JSON). `boot`, `status` and `release` also take many machines at once
({"machines": [request, ...]} or {"keys": [...]}) and answer {"machines": [answer, ...]}: one
start of the program for a whole cluster.

`--instance NAME` before the command: the machines of one control plane sharing this host
with others (several checkouts on one development computer, `local`), kept apart under
HOST_STATE/local/NAME. The state is always under HOST_STATE, which only root can write: a
caller names an instance, never a folder.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from pathlib import Path
from typing import Any

from . import egress, images, realnodes, wipe

# Where the runtime keeps its state on a fleet host (machines, their disks' folders).
HOST_STATE = Path(os.environ.get("RUNCRATE_HOST_STATE", "/var/lib/runcrate-host"))
# Set in the shipped copy (hostruntime.bundle writes it); "source" when run from the repo.
VERSION_FILE = Path(__file__).resolve().parents[3] / "VERSION"


def version() -> str:
    try:
        return VERSION_FILE.read_text().strip()
    except OSError:
        return "source"


# Machines booted, probed or released at once by one command (each is mostly waiting on the kernel).
AT_ONCE = 16
INSTANCE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")


def _at_once(work: Any, items: list[Any]) -> list[Any]:
    if len(items) < 2:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(AT_ONCE, len(items))) as pool:
        return list(pool.map(work, items))


def _caller_uid() -> int | None:
    """The unprivileged user who asked, when the runtime runs through sudo (docs/nodeops.md)."""
    try:
        return int(os.environ["SUDO_UID"])
    except (KeyError, ValueError):
        return None


def _allowed_binds(binds: dict[str, str]) -> dict[str, str]:
    """A caller that is not root binds only folders of its own into a machine (an attached
    volume's data): never a folder of this computer it could not read itself."""
    caller = _caller_uid()
    if caller is None or caller == 0:
        return binds
    for target, source in binds.items():
        real = os.path.realpath(source)
        try:
            info = os.lstat(real)
        except OSError as error:
            raise ValueError(f"bind source {source}: {error.strerror}") from None
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != caller:
            raise ValueError(f"bind source {source} is not a folder of the caller's own")
        binds = {**binds, target: real}
    return binds


def _limits(request: dict[str, Any]) -> realnodes.NodeLimits:
    given = dict(request.get("limits") or {})
    reserve = realnodes.HostReserve(**given.pop("reserve", {}))
    known = {f.name for f in fields(realnodes.NodeLimits)}
    return realnodes.NodeLimits(reserve=reserve, **{k: v for k, v in given.items() if k in known})


class Runtime:
    """The machines of one run of the runtime: each under `run_dir / key`."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def state_dir(self, key: str) -> Path:
        if not key or "/" in key or key.startswith("."):
            raise ValueError(f"{key!r} is not a machine's key")
        return self.run_dir / key

    def describe(self, handle: realnodes.NodeHandle | None, key: str) -> dict[str, Any]:
        if handle is None:
            return {"key": key, "running": False}
        return {"key": key, "running": True, "pid": handle.pid, "address": handle.address,
                "gateway": handle.gateway, "host_key": handle.host_key, "netns": handle.netns,
                "endpoint": egress.forwarded(self.run_dir, key), "gpus": handle.gpus}

    def boot(self, request: dict[str, Any]) -> dict[str, Any]:
        if "machines" in request:
            return {"machines": _at_once(self.boot_one, list(request["machines"]))}
        return self.boot_one(request)

    def boot_one(self, request: dict[str, Any]) -> dict[str, Any]:
        """Boot one machine and open its gateway. A machine that does not come up answers
        {"running": false, "error": <the customer's words>, "detail": <why, for the log>}."""
        key = request["key"]
        state_dir = self.state_dir(key)
        running = realnodes.running(state_dir)
        if running is not None:
            return self.describe(running, key)
        try:
            handle = realnodes.boot(
                self.run_dir, state_dir, key=key, hostname=request.get("hostname") or key,
                authorized_keys=request["authorized_keys"], segment=request.get("segment", "default"),
                limits=_limits(request), boot_fails=bool(request.get("boot_fails")),
                drop_wireguard=bool(request.get("drop_wireguard")), files=request.get("files") or {},
                binds=_allowed_binds(request.get("binds") or {}), image_name=request.get("image") or realnodes.NODE_IMAGE,
                gpus=[str(name) for name in request.get("gpus") or []], cdi_spec=request.get("cdi_spec"),
            )
        except RuntimeError as error:
            return {"key": key, "running": False, "error": "The machine did not start.", "detail": str(error)}
        gateway = request.get("gateway") or {}
        try:
            realnodes.start_gateway(handle, gateway.get("host"), int(gateway.get("port") or realnodes.GATEWAY_PORT),
                                    public=bool(gateway.get("host")))
        except realnodes.GatewayError as error:
            # A customer must never be handed an address that reaches something else.
            realnodes.release(self.run_dir, state_dir)
            return {"key": key, "running": False, "error": "The machine's SSH gateway could not open a port.",
                    "detail": str(error)}
        if request.get("wireguard_port"):
            # Its peers on other hosts reach its WireGuard at this host's address and that port.
            try:
                egress.forward_wireguard(self.run_dir, key, handle.address, int(request["wireguard_port"]))
            except egress.EgressError as error:
                self.release_machine(key)
                return {"key": key, "running": False, "error": "The machine's private network could not be set up.",
                        "detail": str(error)}
        return self.describe(handle, key)

    def status(self, request: dict[str, Any]) -> dict[str, Any]:
        if "keys" in request:
            probe = bool(request.get("probe"))
            return {"machines": _at_once(lambda key: self.status({"key": key, "probe": probe}), list(request["keys"]))}
        key = request["key"]
        answer = self.describe(realnodes.running(self.state_dir(key)), key)
        if answer["running"] and request.get("probe"):
            handle = realnodes.running(self.state_dir(key))
            answer["sshd"] = handle is not None and realnodes.sshd_answers(handle)
        return answer

    def release(self, request: dict[str, Any]) -> dict[str, Any]:
        """Release the machine, then check that nothing of it is left: the wipe receipt."""
        if "keys" in request:
            # The run's switch is taken down once, after every machine is gone.
            answers = _at_once(self.release_machine, list(request["keys"]))
            realnodes.Underlay(self.run_dir).teardown()
            return {"machines": answers}
        answer = self.release_machine(request["key"])
        realnodes.Underlay(self.run_dir).teardown()
        return answer

    def release_machine(self, key: str) -> dict[str, Any]:
        """`release` without the run's switch (machines released at once take it down once)."""
        state_dir = self.state_dir(key)
        handle = realnodes.NodeHandle.load(state_dir)
        running = realnodes.running(state_dir)
        # Read while PID 1 is known to be the machine's: a reused pid would name another's.
        ids = realnodes.namespaces(running) if running is not None else {}
        egress.unforward_wireguard(self.run_dir, key)
        realnodes.release(self.run_dir, state_dir)
        wipe.clear(ids)
        return {"key": key, "released": True, "receipt": wipe.verify(self.run_dir, state_dir, handle, ids)}

    def list(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("tend"):
            # LXCFS serves every machine's /proc figures: a health round's list brings a dead one back.
            realnodes.keep_lxcfs()
        machines = []
        for record in sorted(self.run_dir.glob("*/node.json")):
            key = record.parent.name
            machines.append(self.describe(realnodes.running(record.parent), key))
        return {"machines": machines}

    def join(self, request: dict[str, Any]) -> dict[str, Any]:
        """The host's part of a cluster's join for its machines `keys` here: every machine's
        neighbours pinned (realnodes.pin_neighbours), and with `shared_from` (the head's key),
        the head's /shared lent to each worker here (realnodes.lend_shared). Answers which
        workers did not get it, and why (they mount it over the network instead)."""
        handles = {key: realnodes.running(self.state_dir(key)) for key in request.get("keys") or []}
        realnodes.pin_neighbours([handle for handle in handles.values() if handle is not None])
        not_lent: dict[str, str] = {}
        head_key = request.get("shared_from")
        head = realnodes.running(self.state_dir(head_key)) if head_key else None
        for key, worker in handles.items():
            if head is None or worker is None or key == head_key:
                continue
            try:
                realnodes.lend_shared(head, worker)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                not_lent[key] = str(error)
        return {"not_lent": not_lent}

    def files(self, request: dict[str, Any]) -> dict[str, Any]:
        """Write (or, for null, remove) files in a running machine, as its own root would: inside
        every namespace of it, so nothing outside the machine can be reached this way. With
        {"machines": [request, ...]}, for many machines at once."""
        if "machines" in request:
            return {"machines": _at_once(self.files, list(request["machines"]))}
        handle = realnodes.running(self.state_dir(request["key"]))
        if handle is None:
            return {"written": False}
        for path, content in (request.get("files") or {}).items():
            if not path.startswith("/"):
                raise ValueError(f"{path!r} is not an absolute path")
            command = (["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path] if content is not None
                       else ["rm", "-f", path])
            done = realnodes.run_in(handle, command, timeout=30, input=content or "")
            if done.returncode != 0:
                raise RuntimeError(f"writing {path} failed: {done.stderr.strip()[-200:]}")
        return {"written": True}

    def enter(self, key: str) -> None:
        """Become a connection to the machine's sshd (stdin and stdout), as proxy_command does
        on this computer; a machine that is not running refuses it."""
        handle = realnodes.NodeHandle.load(self.state_dir(key))
        if handle is None:
            raise SystemExit(f"runtime: no machine {key}")
        command = realnodes.proxy_command(handle.netns).split()
        os.execvpe(command[0], command, {**os.environ, **realnodes.NODE_ENVIRONMENT})


def host_run_dir() -> Path:
    """This host's machines: a folder named by an id the host keeps (made once), so that
    hosts sharing a kernel (lab hosts) never share the names their machines' namespaces,
    bridges and cgroups are given after it."""
    identity = HOST_STATE / "host-id"
    if not identity.exists():
        HOST_STATE.mkdir(parents=True, exist_ok=True)
        identity.with_suffix(".tmp").write_text(uuid.uuid4().hex[:12])
        identity.with_suffix(".tmp").replace(identity)
    return HOST_STATE / "machines" / identity.read_text().strip()


def instance_run_dir(instance: str) -> Path:
    if not INSTANCE.fullmatch(instance):
        raise ValueError(f"{instance!r} is not an instance's name")
    return HOST_STATE / "local" / instance


def check(request: dict[str, Any]) -> dict[str, Any]:
    can, why = realnodes.capability()
    return {"version": version(), "hostname": socket.gethostname(), "machines": can, "why": why,
            "python": ".".join(map(str, sys.version_info[:3]))}


def prepare(request: dict[str, Any]) -> dict[str, Any]:
    image = request.get("image") or realnodes.NODE_IMAGE
    # Built here the first time (minutes; what it prints goes to stderr), then cached.
    path = images.ensure(image, say=lambda line: print(line, file=sys.stderr))
    run_dir = host_run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    return {"version": version(), "image": str(path), "machines_dir": str(run_dir)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = ("check", "prepare", "boot", "status", "release", "list", "join", "files")
    run_dir = None
    if len(argv) >= 2 and argv[0] == "--instance":
        try:
            run_dir = instance_run_dir(argv[1])
        except ValueError as error:
            print(json.dumps({"error": str(error)}))
            return 2
        argv = argv[2:]
    if len(argv) == 2 and argv[0] == "enter":
        Runtime(run_dir or host_run_dir()).enter(argv[1])
        return 1
    if len(argv) != 1 or argv[0] not in commands:
        print(json.dumps({"error": f"usage: run.py [--instance NAME] {{{','.join(commands)}}} < request.json, "
                                   "or run.py [--instance NAME] enter KEY"}))
        return 2
    command = argv[0]
    try:
        text = sys.stdin.read()
        request = json.loads(text) if text.strip() else {}
        if command == "check":
            answer: Any = check(request)
        elif command == "prepare":
            answer = prepare(request)
        else:
            if run_dir is None:
                run_dir = host_run_dir()
            elif command == "boot":
                run_dir.mkdir(parents=True, exist_ok=True)
            runtime = Runtime(run_dir)
            answer = getattr(runtime, command)(request)
    except (KeyError, ValueError, OSError, RuntimeError) as error:
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
