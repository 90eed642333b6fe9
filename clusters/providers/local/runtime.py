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
`boot`, `status`, `release` (with its wipe receipt: wipe.py), `list`, and `enter KEY` (its stdin and stdout become the machine's
sshd, the way in for node operations: it reads no request and prints no JSON).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import uuid
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
                binds=request.get("binds") or {}, image_name=request.get("image") or realnodes.NODE_IMAGE,
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
        key = request["key"]
        answer = self.describe(realnodes.running(self.state_dir(key)), key)
        if answer["running"] and request.get("probe"):
            handle = realnodes.running(self.state_dir(key))
            answer["sshd"] = handle is not None and realnodes.sshd_answers(handle)
        return answer

    def release(self, request: dict[str, Any]) -> dict[str, Any]:
        """Release the machine, then check that nothing of it is left: the wipe receipt."""
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
        machines = []
        for record in sorted(self.run_dir.glob("*/node.json")):
            key = record.parent.name
            machines.append(self.describe(realnodes.running(record.parent), key))
        return {"machines": machines}

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
    commands = ("check", "prepare", "boot", "status", "release", "list")
    if len(argv) == 2 and argv[0] == "enter":
        Runtime(host_run_dir()).enter(argv[1])
        return 1
    if len(argv) != 1 or argv[0] not in commands:
        print(json.dumps({"error": f"usage: run.py {{{','.join(commands)}}} < request.json, or run.py enter KEY"}))
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
            runtime = Runtime(host_run_dir())
            answer = getattr(runtime, command)(request)
    except (KeyError, ValueError, OSError, RuntimeError) as error:
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
