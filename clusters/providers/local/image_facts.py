"""What a built machine image is, read from its root filesystem: the Debian release, the
Python and the PyTorch (and the CUDA it was built for) a node booted from it runs. Nothing is
run in the image: every fact is read from files the packages installed (`etc/os-release`,
dpkg's status, a wheel's `.dist-info`, `torch/version.py`), so the facts are the built image's,
not the recipe's intentions. A built image never changes (images.py builds into a new
directory), so its facts are read once per process.
"""

from __future__ import annotations

import contextlib
import functools
import re
from pathlib import Path

from clusters.image_facts import ImageFacts

# Where the system Python's packages are (pip's and Debian's): what `python3` imports on a node.
# A virtualenv's (Ray's under /opt) are not the system's.
SITE_PACKAGES = ("usr/local/lib/python3*/dist-packages", "usr/lib/python3/dist-packages",
                 "usr/local/lib/python3*/site-packages", "usr/lib/python3*/site-packages")


@functools.cache
def read(name: str, rootfs: Path) -> ImageFacts:
    """The facts of the image `name` whose root filesystem is `rootfs`."""
    pytorch, cuda = _pytorch(rootfs)
    return ImageFacts(name=name, os=os_name(rootfs), python=_python(rootfs), pytorch=pytorch, cuda=cuda)


def os_name(rootfs: Path) -> str:
    """"Debian 12 (bookworm)" from the image's os-release."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in (rootfs / "etc/os-release").read_text().splitlines():
            key, _, value = line.partition("=")
            fields[key] = value.strip().strip('"')
    name = fields.get("NAME", "Linux").removesuffix(" GNU/Linux")
    version = fields.get("VERSION_ID", "")
    codename = fields.get("VERSION_CODENAME", "")
    return " ".join(part for part in (name, version, f"({codename})" if codename else "") if part)


def _python(rootfs: Path) -> str | None:
    """The version of the image's python3 package ("3.11.2" of "3.11.2-1+b1"), or of the
    interpreter `usr/bin/python3` names when dpkg does not list it."""
    status = _dpkg_versions(rootfs)
    for package in ("python3", "python3-minimal"):
        if package in status:
            return re.split(r"[-+~]", status[package].split(":")[-1])[0]
    with contextlib.suppress(OSError):
        target = (rootfs / "usr/bin/python3").readlink().name  # python3.11
        return target.removeprefix("python") or None
    return None


def _dpkg_versions(rootfs: Path) -> dict[str, str]:
    versions: dict[str, str] = {}
    try:
        text = (rootfs / "var/lib/dpkg/status").read_text(errors="replace")
    except OSError:
        return versions
    for stanza in text.split("\n\n"):
        package = version = ""
        installed = False
        for line in stanza.splitlines():
            if line.startswith("Package: "):
                package = line[9:].strip()
            elif line.startswith("Version: "):
                version = line[9:].strip()
            elif line.startswith("Status: "):
                installed = line.endswith(" installed")
        if package and version and installed:
            versions[package] = version
    return versions


def _pytorch(rootfs: Path) -> tuple[str | None, str | None]:
    """(PyTorch's release, the CUDA it was built for) where the image ships PyTorch: "2.13.0"
    of the wheel's "2.13.0+cpu", and the CUDA of `torch/version.py` (None for a CPU build)."""
    for pattern in SITE_PACKAGES:
        for site in sorted(rootfs.glob(pattern)):
            for info in sorted(site.glob("torch-*.dist-info")):
                version = _metadata_version(info) or info.name.removeprefix("torch-").removesuffix(".dist-info")
                release, _, local = version.partition("+")
                return release, _cuda(site / "torch/version.py", local)
    return None, None


def _metadata_version(info: Path) -> str | None:
    with contextlib.suppress(OSError):
        for line in (info / "METADATA").read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.partition(":")[2].strip()
            if not line:
                break
    return None


def _cuda(version_py: Path, local: str) -> str | None:
    """`cuda = '12.4'` of torch/version.py (None: `cuda = None`, a CPU build); the wheel's
    local version ("cu124") when that file cannot be read."""
    try:
        text = version_py.read_text(errors="replace")
    except OSError:
        found = re.fullmatch(r"cu(\d+)(\d)", local)
        return f"{found[1]}.{found[2]}" if found else None
    match = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match[1] if match else None
