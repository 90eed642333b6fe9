"""GPUs into nodes: read a Container Device Interface (CDI) spec, the file the NVIDIA container
toolkit writes for a host's GPUs (`nvidia-ctk cdi generate`, in /etc/cdi or /var/run/cdi), and
say what a node given some of its devices gets (docs/nodeops.md, "GPUs").

A spec names a `kind` ("nvidia.com/gpu") and its `devices` ("0", "1", a GPU's UUID, "all"),
each with `containerEdits`, plus spec-wide `containerEdits` that go with any of its devices:
- `deviceNodes`: `path` in the container, `hostPath` (default: `path`), `type` (c, b), `major`
  and `minor` (default: the host node's), `fileMode`, `permissions` (cgroup: r, w, m), `uid`,
  `gid`;
- `mounts`: `hostPath`, `containerPath`, `options` (bind, ro, nosuid…): the driver's libraries
  and programs;
- `env`: "NAME=VALUE";
- `hooks`: programs the container runtime runs. The toolkit's `create-symlinks` hook (its
  `--link TARGET::LINK` arguments) is applied as links in the node's root; the others
  (`update-ldcache`, `chmod`, `enable-cuda-compat`…) are not run: the driver's libraries are
  bound where the node's loader looks already (docs/nodeops.md says so).

`edits(spec, names)` merges the spec-wide edits with those of the named devices only: a node
given device "0" gets /dev/nvidia0 and never /dev/nvidia1. The node's boot (nodeboot.py) makes
the device nodes in its /dev, lets its devices cgroup open them, binds the mounts read-only and
writes the environment for its sessions.

Specs are JSON or YAML (the toolkit writes YAML by default); the YAML read here is the block
style such specs use (maps, lists, plain and quoted scalars). Standard library only: it ships
with the host runtime.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))


class CDIError(RuntimeError):
    """The spec cannot be read, or does not have the device asked for; the message says which."""


@dataclass(frozen=True)
class DeviceNode:
    path: str  # in the node, under /dev
    type: str
    major: int
    minor: int
    mode: int
    permissions: str
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: list[str] = field(default_factory=list)


@dataclass
class Edits:
    """What a node given some of a spec's devices gets."""

    kind: str
    devices: list[str]
    device_nodes: list[DeviceNode] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (link in the node, its target)
    hooks_not_run: list[str] = field(default_factory=list)

    def cgroup_rules(self) -> list[str]:
        """v1 devices cgroup lines that let the node open its device nodes."""
        return [f"{node.type} {node.major}:{node.minor} {node.permissions}" for node in self.device_nodes]


def find_spec(kind: str = "nvidia.com/gpu") -> Path | None:
    """The host's spec for `kind` in the usual folders (the first one that names it)."""
    for folder in SPEC_DIRS:
        for path in sorted(folder.glob("*.json")) + sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")):
            try:
                if load(path).get("kind") == kind:
                    return path
            except CDIError:
                continue
    return None


def load(path: Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise CDIError(f"cannot read the device spec {path}: {error.strerror}") from error
    try:
        spec = json.loads(text) if text.lstrip().startswith("{") else _yaml(text)
    except ValueError as error:
        raise CDIError(f"the device spec {path} is not valid: {error}") from error
    if not isinstance(spec, dict) or not spec.get("kind") or not isinstance(spec.get("devices"), list):
        raise CDIError(f"the device spec {path} has no kind or no devices")
    return spec


def edits(spec: dict[str, Any], names: list[str]) -> Edits:
    """The spec-wide edits and those of each device in `names`, in that order."""
    by_name = {str(device.get("name")): device for device in spec["devices"]}
    missing = [name for name in names if name not in by_name]
    if missing:
        raise CDIError(f"the device spec for {spec['kind']} has no device {', '.join(missing)} "
                       f"(it has {', '.join(sorted(by_name)) or 'none'})")
    result = Edits(kind=str(spec["kind"]), devices=list(names))
    for container_edits in [spec.get("containerEdits") or {}] + [by_name[name].get("containerEdits") or {}
                                                                  for name in names]:
        _apply(result, container_edits)
    return result


def _apply(result: Edits, container_edits: dict[str, Any]) -> None:
    for node in container_edits.get("deviceNodes") or []:
        device = _device_node(node)
        if all(known.path != device.path for known in result.device_nodes):
            result.device_nodes.append(device)
    for mount in container_edits.get("mounts") or []:
        options = [str(option) for option in mount.get("options") or []]
        entry = Mount(str(mount["hostPath"]), str(mount["containerPath"]), options)
        if entry not in result.mounts:
            result.mounts.append(entry)
    for variable in container_edits.get("env") or []:
        if "=" in str(variable) and variable not in result.env:
            result.env.append(str(variable))
    for hook in container_edits.get("hooks") or []:
        args = [str(arg) for arg in hook.get("args") or []]
        if "create-symlinks" in args:
            for index, arg in enumerate(args):
                value = arg.split("=", 1)[1] if arg.startswith("--link=") else (
                    args[index + 1] if arg == "--link" and index + 1 < len(args) else None)
                if value and "::" in value:
                    target, link = value.split("::", 1)
                    result.links.append((link, target))
        else:
            result.hooks_not_run.append(" ".join(args[:3]) or str(hook.get("path")))


def _device_node(node: dict[str, Any]) -> DeviceNode:
    path = str(node["path"])
    if not path.startswith("/dev/") or ".." in path.split("/"):
        raise CDIError(f"device node {path} is not under /dev")
    host_path = str(node.get("hostPath") or path)
    kind, major, minor = node.get("type"), node.get("major"), node.get("minor")
    mode = node.get("fileMode")
    if major is None or minor is None or kind is None or mode is None:
        try:
            info = os.stat(host_path)
        except OSError as error:
            raise CDIError(f"device node {host_path} is not on this host: {error.strerror}") from error
        if not (stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)):
            raise CDIError(f"{host_path} is not a device node")
        kind = kind or ("b" if stat.S_ISBLK(info.st_mode) else "c")
        major = os.major(info.st_rdev) if major is None else major
        minor = os.minor(info.st_rdev) if minor is None else minor
        mode = stat.S_IMODE(info.st_mode) if mode is None else mode
    if kind not in ("c", "b"):
        raise CDIError(f"device node {path} is of type {kind!r}; only c and b are given to machines")
    permissions = str(node.get("permissions") or "rwm")
    if not set(permissions) <= set("rwm"):
        raise CDIError(f"device node {path} has permissions {permissions!r}")
    return DeviceNode(path=path, type=kind, major=int(major), minor=int(minor), mode=int(mode) & 0o777,
                      permissions=permissions, uid=int(node.get("uid") or 0), gid=int(node.get("gid") or 0))


# -- the YAML that CDI specs are written in -------------------------------------------------------

_KEY = re.compile(r"^([A-Za-z_][\w.\-/]*|\"[^\"]*\"|'[^']*'):(?:\s+(.*))?$")


def _scalar(text: str) -> Any:
    text = text.strip()
    if not text or text in ("~", "null"):
        return None
    if text[0] == '"':
        return json.loads(text)
    if text[0] == "'":
        return text[1:-1].replace("''", "'")
    if text == "[]":
        return []
    if text == "{}":
        return {}
    if text.startswith("["):
        return [_scalar(item) for item in text[1:-1].split(",") if item.strip()]
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"0o[0-7]+", text):
        return int(text[2:], 8)
    return text.split(" #", 1)[0].strip()


def _yaml(text: str) -> Any:
    lines = []
    for raw in text.splitlines():
        stripped = raw.split("#", 1)[0] if raw.lstrip().startswith("#") else raw
        if stripped.strip() and stripped.strip() != "---":
            lines.append((len(stripped) - len(stripped.lstrip(" ")), stripped.strip()))
    value, index = _block(lines, 0, lines[0][0] if lines else 0)
    if index != len(lines):
        raise ValueError(f"unexpected indentation at {lines[index][1]!r}")
    return value


def _block(lines: list[tuple[int, str]], index: int, indent: int) -> tuple[Any, int]:
    if index < len(lines) and lines[index][1].startswith("- ") or (index < len(lines) and lines[index][1] == "-"):
        items = []
        while index < len(lines) and lines[index][0] == indent and (lines[index][1] == "-" or lines[index][1].startswith("- ")):
            rest = lines[index][1][1:].strip()
            if not rest:
                value, index = _block(lines, index + 1, lines[index + 1][0])
            elif _KEY.match(rest):
                # "- key: value" starts a map whose keys sit two columns in.
                lines[index] = (indent + 2, rest)
                value, index = _block(lines, index, indent + 2)
            else:
                value, index = _scalar(rest), index + 1
            items.append(value)
        return items, index
    mapping: dict[str, Any] = {}
    while index < len(lines) and lines[index][0] == indent:
        matched = _KEY.match(lines[index][1])
        if not matched:
            raise ValueError(f"not a key: {lines[index][1]!r}")
        key = _scalar(matched.group(1)) if matched.group(1)[0] in "'\"" else matched.group(1)
        if matched.group(2) is not None and matched.group(2).strip():
            mapping[key], index = _scalar(matched.group(2)), index + 1
        elif index + 1 < len(lines) and (lines[index + 1][0] > indent or (
                lines[index + 1][0] == indent and lines[index + 1][1].startswith("-"))):
            mapping[key], index = _block(lines, index + 1, lines[index + 1][0])
        else:
            mapping[key], index = None, index + 1
    return mapping, index
