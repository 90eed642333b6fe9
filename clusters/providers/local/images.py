"""Machine images for real nodes: root filesystems built once per host, and a writable root per
node over the shared, read-only image (docs/nodeops.md, "Images").

- **Building**: `mmdebstrap` makes a Debian root filesystem of this computer's release from
  Debian's packages (the apt sources this computer uses), plus the product's Python
  environments from the Python package index. An image is built once per recipe: its directory
  is named after a hash of the recipe (`<name>-<hash>` under IMAGES_DIR: the root filesystem in
  `rootfs`, what was built and how long it took in `image.json`), so a changed recipe is a new
  directory and an unchanged one is never built again. A build goes into a temporary directory
  that is renamed when complete: a killed build leaves no half image behind.
- **A writable root per node**: this computer's root makes an *idmapped* mount of the
  root-owned image for the node's uid range (`attach`): the image's root-owned files show as the
  node's root inside the node, read-only. Inside the node's user namespace that mount is the
  lower layer of an overlay (`overlay_options`, `-o userxattr`) whose upper layer is the node's
  own directory on this computer's disk. Root in the node can write anywhere (copy-up); the
  image on disk never changes and every node has a layer of its own.

This file imports nothing but the standard library and runs as a script too, so a node's boot
can call it before anything of the product is importable (`python3 images.py attach ...`):

    python -m clusters.providers.local.images build base     # once per host (make does it)
    python -m clusters.providers.local.images path base      # the cached image's directory
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

IMAGES_DIR = Path(os.environ.get("RUNCRATE_IMAGES_DIR", "/var/lib/runcrate-nodes/images"))
# The Ray every image ships (`ray[default]`: job submission and the dashboard); install_ray.sh's
# default names the same release.
RAY_VERSION = "2.60.0"
# Bump when the build steps below change in a way the recipe's fields do not show.
BUILD_STEPS_VERSION = 4
# Root's `pip install` goes into the image's system Python (under /usr/local, beside the image's
# PyTorch), as on other GPU clouds' images: Debian marks its Python "externally managed" (PEP 668),
# which guards a distribution's own tools on a desktop, not a machine rented to run Python.
PIP_CONF = "[global]\nbreak-system-packages = true\nroot-user-action = ignore\n"


@dataclass(frozen=True)
class Recipe:
    """What an image is: Debian packages, and Python virtualenvs (path → requirements) made
    with the image's own python3 after the packages are in. `system_python`: requirements
    installed into the image's own python3 (under /usr/local, root's `python3` and its scripts
    on PATH), taken from this computer's pip index (`_system_python_wheels`). `launchers`: the
    commands the image ships that launch lines run (clusters.connect.image_tools)."""

    name: str
    packages: tuple[str, ...]
    venvs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    system_python: tuple[str, ...] = ()
    launchers: tuple[str, ...] = ()

    def digest(self, suite: str) -> str:
        fields = {"name": self.name, "suite": suite, "packages": sorted(self.packages),
                  "venvs": {path: list(reqs) for path, reqs in sorted(self.venvs.items())},
                  "steps": BUILD_STEPS_VERSION}
        if self.system_python:
            # A GPU host's build is another image (CUDA wheels) than a CPU host's.
            fields |= {"system_python": list(self.system_python), "accelerator": host_accelerator()}
        text = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


# Everything the product runs on a node (the node scripts' apt_install lists find them all
# installed: a node never needs the network for them), and what a customer expects on a server.
BASE_PACKAGES = (
    # The node's boot and the way in.
    "mount", "iproute2", "iputils-ping", "procps", "kmod", "netbase", "ca-certificates", "openssl",
    "openssh-server", "openssh-client", "sudo",
    # The private network, its join check, the network test, /shared.
    "wireguard-tools", "wireguard-go", "fping", "iperf3", "sshfs", "fuse3",
    # Slurm with munge; PMIx for `srun --mpi=pmix`: Slurm's mpi_pmix plugin loads
    # pmix2/lib/libpmix.so, the unversioned name only libpmix-dev ships.
    "slurm-wlm", "slurmctld", "slurmd", "slurm-client", "slurm-wlm-basic-plugins", "munge", "libpmix2", "libpmix-dev",
    # Slurm's accounting (`sacct` on every node): slurmdbd on the head, its database in MariaDB.
    "slurmdbd", "mariadb-server",
    # The launch lines: Open MPI, mpi4py, Python with venv and pip.
    "openmpi-bin", "python3-mpi4py", "python3", "python3-venv", "python3-pip", "python-is-python3",
    "prometheus-node-exporter",
    # A customer's tools.
    "curl", "wget", "git", "tmux", "screen", "htop", "vim", "less", "rsync", "build-essential", "unzip", "psmisc",
)
IMAGES = {
    "base": Recipe(
        name="base",
        packages=BASE_PACKAGES,
        # Root owns it and can install into it (`/opt/ray/bin/pip install numpy`): the image's
        # copy is read-only, the node's overlay takes the writes.
        venvs={"/opt/ray": (f"ray[default]=={RAY_VERSION}",)},
    ),
}

# `base` plus PyTorch in the system's Python (`python3 -c "import torch"`, `torchrun` on PATH),
# from this computer's pip index: its CPU build where this computer's pip has it (a CPU host's
# local wheel or the CPU wheel index it is configured with), PyPI's CUDA build on a GPU host.
IMAGES["pytorch"] = Recipe(
    name="pytorch",
    packages=IMAGES["base"].packages,
    venvs=IMAGES["base"].venvs,
    system_python=("torch==2.13.0", "numpy"),
    launchers=("torchrun",),
)

# Files a package's install leaves that must be each node's own, not one copy shared by every
# node booted from the image: SSH host keys (boot writes one per node), munge's key (the
# cluster's is written at install).
NODE_SECRETS = ("etc/ssh/ssh_host_*", "etc/munge/munge.key")
# What the build leaves of this computer in the image (mmdebstrap copies them in for the
# build): its name and its resolver. A node's boot names it; its resolver is its own.
BUILD_HOST_FILES = ("etc/hostname", "etc/resolv.conf")


class ImageError(RuntimeError):
    """An image could not be built or mounted; the message says why."""


def host_suite() -> str:
    """The Debian release this computer runs (its codename): images are of the same release."""
    fields = {}
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            key, _, value = line.partition("=")
            fields[key] = value.strip().strip('"')
    if fields.get("ID") != "debian" or not fields.get("VERSION_CODENAME"):
        raise ImageError("images are built from Debian's packages of this computer's release; this is not Debian")
    return fields["VERSION_CODENAME"]


def host_accelerator() -> str:
    """"cuda" on a computer with NVIDIA's driver (nvidia-smi), else "cpu": which PyTorch build an
    image's Python gets."""
    return "cuda" if shutil.which("nvidia-smi") else "cpu"


def host_sources(suite: str) -> list[Path]:
    """This computer's apt source files for Debian's `suite` (deb822 `.sources` or one-line
    `.list`): the image uses the same mirrors. Empty when none is found (mmdebstrap then uses
    Debian's default mirrors for the suite)."""
    candidates = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.sources")),
                  *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    found = []
    for path in candidates:
        try:
            lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
        except OSError:
            continue
        text = "\n".join(lines)
        if suite in text and "/debian" in text:
            found.append(path)
    return found


def image_dir(name: str, suite: str | None = None) -> Path:
    """The directory of the image's build for its current recipe (`rootfs`, `image.json`)."""
    recipe = _recipe(name)
    return IMAGES_DIR / f"{name}-{recipe.digest(suite or host_suite())}"


def cached(name: str) -> Path | None:
    """The image's root filesystem when it is built for its current recipe, else None."""
    path = image_dir(name)
    return path / "rootfs" if (path / "image.json").exists() else None


def _recipe(name: str) -> Recipe:
    try:
        return IMAGES[name]
    except KeyError:
        raise ImageError(f"no image {name!r}; images: {', '.join(sorted(IMAGES))}") from None


@contextlib.contextmanager
def _build_lock(name: str) -> Iterator[None]:
    IMAGES_DIR.mkdir(parents=True, exist_ok=True)
    with open(IMAGES_DIR / f".{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure(name: str, say: Callable[[str], None] = print) -> Path:
    """The image `name` for its current recipe: the cached one, or built now (once: a second
    caller waits for the first one's build). Returns its root filesystem."""
    path = cached(name)
    if path is not None:
        return path
    with _build_lock(name):
        path = cached(name)
        if path is not None:
            return path
        return _build(_recipe(name), say)


def _build(recipe: Recipe, say: Callable[[str], None]) -> Path:
    if os.geteuid() != 0:
        raise ImageError("building an image needs root (mmdebstrap makes root-owned files)")
    if shutil.which("mmdebstrap") is None:
        raise ImageError("mmdebstrap is not installed (bin/host-setup installs it)")
    suite = host_suite()
    target = image_dir(recipe.name, suite)
    temporary = target.with_name(f".{target.name}.building")
    shutil.rmtree(temporary, ignore_errors=True)  # a build that was killed
    temporary.mkdir(parents=True)
    started = time.monotonic()
    say(f"image {recipe.name}: building {target.name} from Debian {suite} with mmdebstrap "
        f"({len(recipe.packages)} packages{', ' + ', '.join(recipe.venvs) if recipe.venvs else ''}); once per recipe")
    hooks = [_venv_hook(path, requirements) for path, requirements in recipe.venvs.items()]
    wheels = None
    if recipe.system_python:
        wheels = target.with_name(f".{target.name}.wheels")
        _system_python_wheels(recipe, wheels, say, started)
        hooks.append(_system_python_hook(wheels, recipe.system_python))
    hooks.append(f'printf %s {shlex.quote(PIP_CONF)} > "$1/etc/pip.conf"')
    # Per node, not per image: written by each node's boot or the cluster's install.
    hooks.append("rm -f " + " ".join(f'"$1"/{pattern}' for pattern in (*NODE_SECRETS, *BUILD_HOST_FILES))
                 + ' && : > "$1/etc/machine-id" && echo localhost > "$1/etc/hostname" && : > "$1/etc/resolv.conf"'
                 ' && chmod 0644 "$1/etc/hostname" "$1/etc/resolv.conf"')
    command = [
        "mmdebstrap", "--variant=apt", "--mode=root", "--format=directory",
        "--include=" + ",".join(recipe.packages),
        # Debian's docs and man pages stay: a customer reads them.
        *(f"--customize-hook={hook}" for hook in hooks),
        suite, str(temporary / "rootfs"), *(str(path) for path in host_sources(suite)),
    ]
    log_path = IMAGES_DIR / f"{target.name}.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   env=_build_environment(), start_new_session=True)
        try:
            _follow(process, log_path, say, started, recipe.name)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        finally:
            if wheels is not None:
                shutil.rmtree(wheels, ignore_errors=True)
    if process.returncode != 0:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
        shutil.rmtree(temporary, ignore_errors=True)
        raise ImageError(f"image {recipe.name}: mmdebstrap failed (status {process.returncode}); "
                         f"the last lines of {log_path}:\n" + "\n".join(tail))
    seconds = time.monotonic() - started
    size = _disk_usage(temporary / "rootfs")
    (temporary / "image.json").write_text(json.dumps({
        "name": recipe.name, "suite": suite, "packages": list(recipe.packages), "venvs": recipe.venvs,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "build_seconds": round(seconds, 1),
        "bytes": size,
    }, indent=1))
    (temporary / "rootfs").chmod(0o755)
    temporary.rename(target)
    say(f"image {recipe.name}: built {target} in {seconds:.0f} s ({size / 2**20:.0f} MiB)")
    _prune(recipe.name, keep=target, say=say)
    return target / "rootfs"


def _venv_hook(path: str, requirements: tuple[str, ...]) -> str:
    """A customize hook: the virtualenv made by the image's python3, its packages installed by
    its own pip from the package index, with this computer's CA bundle (the way out of some
    hosts inspects TLS) copied in for the build only and this computer's pip configuration left
    out (its constraints and local indexes mean nothing in an image)."""
    pip = f"{path}/bin/pip"
    quoted = " ".join(shlex.quote(requirement) for requirement in requirements)
    proxies = " ".join(f"{name}={shlex.quote(value)}" for name, value in os.environ.items()
                       if name.lower() in ("http_proxy", "https_proxy", "no_proxy"))
    return (
        'cp /etc/ssl/certs/ca-certificates.crt "$1/tmp/runcrate-build-ca.crt" && '
        f'chroot "$1" /usr/bin/python3 -m venv {shlex.quote(path)} && '
        f'chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 {proxies} '
        f'PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 '
        f'{shlex.quote(pip)} install --progress-bar off --cert /tmp/runcrate-build-ca.crt {quoted} && '
        'rm -f "$1/tmp/runcrate-build-ca.crt"'
    )


def image_python_version(suite: str) -> str:
    """The image's python3 as "3.11": Debian's python3 of this computer's release, which is the
    image's release (bookworm ships 3.11, trixie 3.13)."""
    known = {"bookworm": "3.11", "trixie": "3.13"}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        found = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=30)
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip()
    if suite not in known:
        raise ImageError(f"cannot tell which Python Debian {suite} ships (no /usr/bin/python3 here)")
    return known[suite]


def _system_python_wheels(recipe: Recipe, wheels: Path, say: Callable[[str], None], started: float) -> None:
    """Wheels of the recipe's `system_python` and everything they need, for the image's Python,
    fetched by this computer's pip with its own configuration (its indexes, local wheel folders,
    constraints, certificate and proxy): the image gets the build this computer's pip is set up
    to give, a CPU host's CPU build where it has one. The image's own pip then installs them
    with no index at all (`_system_python_hook`)."""
    version = image_python_version(host_suite())
    tag = version.replace(".", "")
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "download", "--progress-bar", "off", "--dest", str(wheels),
               "--only-binary=:all:", "--implementation", "cp", "--python-version", version, "--abi", f"cp{tag}",
               *recipe.system_python]
    say(f"image {recipe.name}: fetching {', '.join(recipe.system_python)} for Python {version} "
        f"({host_accelerator()} build) with this computer's pip")
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    output = []
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line.rstrip())
        if line.startswith(("Collecting ", "Saved ", "Successfully downloaded", "ERROR")):
            say(f"image {recipe.name}: [{time.monotonic() - started:5.0f} s] {line.rstrip()[:157]}")
    if process.wait() != 0:
        shutil.rmtree(wheels, ignore_errors=True)
        raise ImageError(f"image {recipe.name}: pip could not fetch {', '.join(recipe.system_python)} "
                         f"(status {process.returncode}):\n" + "\n".join(output[-15:]))


def _system_python_hook(wheels: Path, requirements: tuple[str, ...]) -> str:
    """A customize hook: the fetched wheels installed by the image's own pip into its system
    Python (Debian's pip puts root's installs under /usr/local; --break-system-packages because
    the image's Python is "externally managed", PEP 668), from the wheel folder only: nothing of
    this computer's pip configuration stays in the image."""
    quoted = " ".join(shlex.quote(requirement) for requirement in requirements)
    return (
        'mkdir -p "$1/tmp/runcrate-wheels" && '
        f'cp -a {shlex.quote(str(wheels))}/. "$1/tmp/runcrate-wheels/" && '
        'chroot "$1" /usr/bin/env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 '
        'PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore '
        '/usr/bin/python3 -m pip install --progress-bar off --break-system-packages --no-index '
        f'--find-links /tmp/runcrate-wheels {quoted} && '
        'rm -rf "$1/tmp/runcrate-wheels"'
    )


def _build_environment() -> dict[str, str]:
    """mmdebstrap's environment: this computer's PATH and proxy settings, nothing of the
    control plane's."""
    keep = ("PATH", "LANG", "TMPDIR", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
    return {name: os.environ[name] for name in keep if name in os.environ} | {"DEBIAN_FRONTEND": "noninteractive"}


def _follow(process: subprocess.Popen, log_path: Path, say: Callable[[str], None], started: float, name: str) -> None:
    """Print mmdebstrap's phases (its `I:` lines) and pip's progress as they come."""
    position = 0
    while True:
        done = process.poll() is not None
        with open(log_path, errors="replace") as log:
            log.seek(position)
            text = log.read()
            # Only whole lines; the rest is read again next time.
            cut = text.rfind("\n") + 1
            position += len(text[:cut].encode())
        for line in text[:cut].splitlines():
            if line.startswith(("I: ", "E: ", "W: ")) or line.startswith(("Collecting ", "Successfully installed")):
                shown = line if len(line) < 160 else line[:157] + "..."
                say(f"image {name}: [{time.monotonic() - started:5.0f} s] {shown}")
        if done:
            return
        time.sleep(0.5)


def _disk_usage(path: Path) -> int:
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return total


# A build younger than this is kept even when no node uses it: another checkout of the
# product on this computer (another recipe) may be between finding it and mounting it.
PRUNE_AFTER_SECONDS = 24 * 3600


def _prune(name: str, keep: Path, say: Callable[[str], None]) -> None:
    """Older builds of the same image that no node uses (no mount of them is left anywhere)
    and that were built more than PRUNE_AFTER_SECONDS ago."""
    mounted = _mounted_sources()
    for old in IMAGES_DIR.glob(f"{name}-*"):
        if old == keep or not old.is_dir() or not (old / "image.json").exists():
            continue
        if time.time() - (old / "image.json").stat().st_mtime < PRUNE_AFTER_SECONDS:
            continue
        if any(source.startswith(f"{old}/") for source in mounted):
            continue
        shutil.rmtree(old, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            old.with_name(f"{old.name}.log").unlink()
        say(f"image {name}: removed the older build {old.name}")


def _mounted_sources() -> set[str]:
    """Roots of every mount in any process's mount namespace this computer can see (a node's
    idmapped image shows as a mount whose root is the image's directory)."""
    roots = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                for line in (proc / "mountinfo").read_text().splitlines():
                    roots.add(line.split()[3])
    return roots


def digest_tree(path: Path) -> str:
    """A hash of the listing of a tree: every entry's path, type, mode, owner, size, inode,
    modification and change times and link target. Any write, chmod, chown, xattr change,
    removal or addition in the tree changes it, without reading file contents."""
    digest = hashlib.sha256()
    for directory, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(dirs + files):
            full = os.path.join(directory, name)
            info = os.lstat(full)
            target = os.readlink(full) if os.path.islink(full) else ""
            digest.update(f"{os.path.relpath(full, path)}\0{info.st_mode}\0{info.st_uid}\0{info.st_gid}\0"
                          f"{info.st_size}\0{info.st_ino}\0{info.st_mtime_ns}\0{info.st_ctime_ns}\0{target}\n".encode())
    info = os.lstat(path)
    digest.update(f".\0{info.st_mode}\0{info.st_uid}\0{info.st_ctime_ns}\n".encode())
    return digest.hexdigest()


# -- a writable root per node: the image idmapped for the node, under an overlay ----------------

# Syscall numbers: the mount API's calls have one number on every architecture.
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_IDMAP = 0x100000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args: object) -> int:
    result = _libc.syscall(number, *args)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(result)


def user_namespace(base: int, size: int, inside: int = 0) -> int:
    """An fd of a new user namespace whose inside..inside+size-1 are this computer's
    base..base+size-1 (uids and gids): what an idmapped mount takes its mapping from (a file
    owned by `inside` on disk shows as owned by `base`). The namespace holds no process
    once this returns (a child made it, this process wrote its maps, the child is gone); the
    mount keeps its own copy of the mapping. This process must have no other threads (the CLI)."""
    ready_read, ready_write = os.pipe()
    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls until it exits
        try:
            os.close(ready_read)
            os.close(go_write)
            status = 0 if _libc.unshare(CLONE_NEWUSER) == 0 else 1
            os.write(ready_write, b"x")
            os.read(go_read, 1)
        finally:
            os._exit(status if "status" in locals() else 1)
    os.close(ready_write)
    os.close(go_read)
    try:
        os.read(ready_read, 1)
        Path(f"/proc/{pid}/uid_map").write_text(f"{inside} {base} {size}\n")
        Path(f"/proc/{pid}/setgroups").write_text("deny\n")
        Path(f"/proc/{pid}/gid_map").write_text(f"{inside} {base} {size}\n")
        fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        if os.readlink(f"/proc/{pid}/ns/user") == os.readlink("/proc/self/ns/user"):
            os.close(fd)
            raise ImageError("could not create a user namespace for the idmapped mount")
        return fd
    finally:
        os.close(go_write)
        os.close(ready_read)
        os.waitpid(pid, 0)


def attach(image: Path, target: Path, base: int, size: int) -> None:
    """Mount `image` read-only on `target` (in this process's mount namespace), idmapped to the
    uid range base..base+size-1: a file the image's root owns shows as owned by `base`, which
    is root inside a user namespace mapping 0 to `base` (the node's), and so on for every uid.
    Needs root of this computer and a filesystem that supports idmapped mounts (ext4, xfs,
    btrfs; tmpfs from Linux 6.3)."""
    userns = user_namespace(base, size)
    tree = -1
    try:
        tree = _syscall(SYS_OPEN_TREE, -100, str(image).encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)
        attr = _MountAttr(attr_set=MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV, userns_fd=userns)
        try:
            _syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH | AT_RECURSIVE, ctypes.byref(attr),
                     ctypes.sizeof(attr))
        except OSError as error:
            if error.errno in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
                raise ImageError(f"the filesystem holding {image} cannot be idmapped here ({error.strerror})") from error
            raise
        _syscall(SYS_MOVE_MOUNT, tree, b"", -100, str(target).encode(), MOVE_MOUNT_F_EMPTY_PATH)
    finally:
        os.close(userns)
        if tree >= 0:
            os.close(tree)


def lend(source_pid: int, source: str, target_pid: int, target: str, *, source_base: int, target_base: int,
         size: int) -> None:
    """Mount the folder `source` of the node whose PID 1 is `source_pid` on `target` in the node
    of `target_pid` (paths inside each node): the same filesystem, not a copy, so both see
    every write at once. Idmapped from the first node's uid range to the second's, so a file
    the first node's root owns is owned by the second node's root there, and the other way
    round. Needs root of this computer, a process with no other threads (setns into a mount
    namespace refuses a process whose threads share its root), and both nodes on it."""
    userns = user_namespace(target_base, size, inside=source_base)
    namespaces = []
    tree = -1
    try:
        namespaces = [os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC) for pid in (source_pid, target_pid)]
        _setns(namespaces[0])
        tree = _syscall(SYS_OPEN_TREE, -100, source.encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)
        attr = _MountAttr(attr_set=MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID, userns_fd=userns)
        _syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr))
        _setns(namespaces[1])
        _syscall(SYS_MOVE_MOUNT, tree, b"", -100, target.encode(), MOVE_MOUNT_F_EMPTY_PATH)
    except OSError as error:
        raise ImageError(f"could not mount {source} of one node on {target} of another ({error.strerror})") from error
    finally:
        for fd in (userns, tree, *namespaces):
            if fd >= 0:
                os.close(fd)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNS) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))


def prepare_layer(layer: Path, base: int) -> dict[str, Path]:
    """A node's writable layer in `layer` (on this computer's disk): `upper` and `work` owned by
    the node's root (the overlay's mounter), `image` and `root` the mount points of the
    idmapped image and of the node's root. `layer` itself must be reachable by the node's root
    (every directory above it searchable by others)."""
    dirs = {name: layer / name for name in ("image", "upper", "work", "root")}
    layer.mkdir(parents=True, exist_ok=True)
    layer.chmod(0o711)
    for name, path in dirs.items():
        path.mkdir(exist_ok=True)
        if name in ("upper", "work", "root"):
            os.chown(path, base, base)
        path.chmod(0o755)
    return dirs


def overlay_options(layer: Path) -> str:
    """`mount -t overlay -o …` for the node's root over its layer (prepare_layer), mounted by
    the node's root inside its user namespace: overlay's own records go into `user.overlay.*`
    extended attributes there (`userxattr`), not `trusted.*`, which only this computer's root
    may write."""
    for path in (layer / "image", layer / "upper", layer / "work"):
        if any(character in str(path) for character in ",:\\ "):
            raise ImageError(f"{path} has a character overlay's options cannot carry")
    return f"lowerdir={layer}/image,upperdir={layer}/upper,workdir={layer}/work,userxattr"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusters.providers.local.images", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the image for its current recipe unless it is cached")
    build.add_argument("name", choices=sorted(IMAGES))
    path = commands.add_parser("path", help="print the cached image's directory (status 1 if it is not built)")
    path.add_argument("name", choices=sorted(IMAGES))
    mount = commands.add_parser("attach", help="mount an image, idmapped to a uid range, read-only")
    mount.add_argument("image", type=Path)
    mount.add_argument("target", type=Path)
    mount.add_argument("--base", type=int, required=True)
    mount.add_argument("--size", type=int, required=True)
    share = commands.add_parser("lend", help="mount one node's folder in another node, idmapped between their ranges")
    share.add_argument("source_pid", type=int)
    share.add_argument("source")
    share.add_argument("target_pid", type=int)
    share.add_argument("target")
    share.add_argument("--source-base", type=int, required=True)
    share.add_argument("--target-base", type=int, required=True)
    share.add_argument("--size", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            found = cached(args.name)
            if found is not None:
                print(f"image {args.name}: cached at {found}")
            else:
                ensure(args.name, say=lambda line: print(line, flush=True))
        elif args.command == "path":
            found = cached(args.name)
            if found is None:
                print(f"image {args.name} is not built (python -m clusters.providers.local.images build {args.name})",
                      file=sys.stderr)
                return 1
            print(found)
        elif args.command == "lend":
            lend(args.source_pid, args.source, args.target_pid, args.target, source_base=args.source_base,
                 target_base=args.target_base, size=args.size)
        else:
            attach(args.image, args.target, args.base, args.size)
    except ImageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
