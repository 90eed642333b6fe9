"""The wipe receipt: after a machine's release, check on the host that nothing of it is left,
and say what was checked, when, and whether it was clean (docs/nodeops.md, "The wipe receipt").

Release (realnodes.release, then `clear`) kills the machine's PID 1, and with it every process and its mount
namespace; deletes its network namespace, cgroups, disks (the writable layer is on its disk),
node directory and state (its host key, the control plane's key lines, its seed), and frees its
uid range. This module does none of that: it looks, from the host, for each of them afterwards.
Standard library only: it ships with the host runtime.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

from . import realnodes


def clear(namespace_ids: dict[str, str], wait: float = 5.0) -> None:
    """End what is left in the released machine's namespaces: processes of this host that
    entered them (a proxy of a control-plane session into its network namespace, `enter`) and
    outlived its PID 1. Processes of its uid range outside its namespaces are not ended here:
    such a process escaped the machine, and the receipt says so for an operator to look at."""
    deadline = time.monotonic() + wait
    while namespace_ids and (left := realnodes.processes_in(namespace_ids)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _check(name: str, leftovers: list[str], clean: str) -> dict[str, Any]:
    return {"check": name, "clean": not leftovers,
            "detail": clean if not leftovers else "left: " + ", ".join(leftovers[:5])}


def _uid_owners(base: int) -> list[str]:
    """Processes of the host whose real, effective or saved uid is in the range [base, base +
    RANGE_SIZE): anything the machine's root or users started, wherever it went."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            line = next(ln for ln in (proc / "status").read_text().splitlines() if ln.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if any(base <= int(uid) < base + realnodes.RANGE_SIZE for uid in line.split()[1:4]):
            found.append(f"process {proc.name}")
    return found


def verify(run_dir: Path, state_dir: Path, handle: realnodes.NodeHandle | None,
           namespace_ids: dict[str, str]) -> dict[str, Any]:
    """The receipt for the machine whose state was `state_dir` and whose handle (read before the
    release) was `handle`; `namespace_ids` are its namespaces as they were before."""
    checks = []
    processes = [f"process {pid}" for pid in realnodes.processes_in(namespace_ids)] if namespace_ids else []
    if handle is not None and handle.uid_base:
        processes += _uid_owners(handle.uid_base)
    checks.append(_check("processes", sorted(set(processes)),
                         "no process in its namespaces or of its uid range"))
    cgroups = [str(path) for path in realnodes._cgroup_dirs(handle.cgroup) if path.exists()] if handle and handle.cgroup else []
    checks.append(_check("cgroups", cgroups, "its cgroups are gone"))
    network = []
    if handle is not None and (realnodes.NETNS_DIR / handle.netns).exists():
        network.append(f"network namespace {handle.netns}")
    checks.append(_check("network", network, "its network namespace is gone"))
    disks = []
    if handle is not None and handle.cgroup:
        folder = realnodes.DISKS_DIR / handle.cgroup
        disks += [f"loop device {name}" for name in realnodes._loop_devices(folder)]
        disks += [str(path) for path in (folder, realnodes._root_dir(handle.cgroup)) if path.exists()]
    checks.append(_check("disk", disks, "its disk, /shared and writable layer are deleted"))
    holders = []
    registry = realnodes.UidRanges._dir()
    owner = str(state_dir.resolve())
    if registry.is_dir():
        holders = [f"uid range {slot.name}" for slot in registry.iterdir()
                   if slot.name.isdigit() and _reads(slot) == owner]
    checks.append(_check("uid range", holders, "its uid range is free"))
    keys = [str(state_dir)] if state_dir.exists() else []
    checks.append(_check("keys", keys, "its host key and the keys it was given are deleted"))
    checks.append(_gpus(handle, namespace_ids))
    return {"clean": all(check["clean"] for check in checks),
            "checked_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),  # noqa: UP017 - hosts run Python 3.9+
            "checks": checks}


def _holders(rdevs: set[int], base: int) -> list[str]:
    """Processes of this host holding one of the device numbers `rdevs` open whose uids are the
    machine's range (its own, wherever they went)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not base <= proc.stat().st_uid < base + realnodes.RANGE_SIZE:
                continue
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    info = fd.stat()
                    if stat.S_ISCHR(info.st_mode) and info.st_rdev in rdevs:
                        found.append(f"process {proc.name} holds {os.major(info.st_rdev)}:{os.minor(info.st_rdev)}")
        except OSError:
            continue
    return found


def _gpus(handle: realnodes.NodeHandle | None, namespace_ids: dict[str, str]) -> dict[str, Any]:
    """The GPUs the machine was given (cdi.py): none of their device nodes is held by anything of
    the machine's any more, and on a host with NVIDIA's driver each is reset and its
    uncorrected ECC errors read (`nvidia-smi`). Verified with character devices standing in for
    GPUs on a computer without any (docs/nodeops.md, "GPUs")."""
    if handle is None or not handle.gpus:
        return {"check": "GPUs", "clean": True, "detail": "no GPU was given to it"}
    given = f"{', '.join(handle.gpus)} ({', '.join(handle.gpu_nodes) or 'no device node'})"
    left: list[str] = []
    rdevs = set()
    for node in handle.gpu_nodes:
        major, _, minor = node.rpartition(" ")[2].partition(":")
        with contextlib.suppress(ValueError):
            rdevs.add(os.makedev(int(major), int(minor)))
    if rdevs and handle.uid_base:
        left += _holders(rdevs, handle.uid_base)
    notes = []
    if handle.gpu_kind == "nvidia.com/gpu" and shutil.which("nvidia-smi"):
        for name in handle.gpus:
            if not name.isdigit():
                continue
            reset = subprocess.run(["nvidia-smi", "--gpu-reset", "-i", name], capture_output=True, text=True, timeout=120)
            if reset.returncode != 0:
                left.append(f"GPU {name} did not reset: {(reset.stdout + reset.stderr).strip()[:120]}")
            ecc = subprocess.run(["nvidia-smi", "-i", name, "--query-gpu=ecc.errors.uncorrected.volatile.total",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=60)
            notes.append(f"GPU {name} uncorrected ECC errors: {ecc.stdout.strip() or 'unread'}")
    else:
        notes.append("no NVIDIA driver on this host: no reset, no ECC read")
    if left:
        return {"check": "GPUs", "clean": False, "detail": f"given {given}; left: " + ", ".join(left[:5])}
    return {"check": "GPUs", "clean": True,
            "detail": f"given {given}; released, no process of it holds them; " + "; ".join(notes)}


def _reads(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
