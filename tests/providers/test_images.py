"""Machine images and the writable root over them (clusters.providers.local.images), on real
namespaces: the `base` image is really built with mmdebstrap (once per recipe: the same cache
`make run` uses), and each "node" here is a throwaway user namespace mapped to an unprivileged
uid range as a node's is, pivoted into an overlay whose lower layer is the idmapped image.
Skipped where this computer cannot run real nodes (not root, no namespaces) or build images.
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.providers.local import images, realnodes

CAN, WHY = realnodes.capability()
pytestmark = [
    pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}"),
    pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="mmdebstrap is not installed (make host)"),
]


@pytest.fixture(scope="module")
def base_image() -> Path:
    """The `base` image for its current recipe: built here only if `make` has not built it."""
    return images.ensure("base", say=lambda line: print(line, file=sys.stderr, flush=True))


@pytest.fixture
def uid_base(tmp_path: Path) -> Iterator[int]:
    """A node uid range of this computer's registry, as a node's boot claims one."""
    base = realnodes.UidRanges.claim(tmp_path)
    yield base
    realnodes.UidRanges.free(tmp_path, base)


@pytest.fixture
def layers() -> Iterator[Path]:
    """Where the test's writable layers go: this computer's disk (the layer of a node must be
    on a filesystem with user extended attributes), in a directory a node's root can walk."""
    parent = Path(tempfile.mkdtemp(prefix="rc-layers-", dir="/var/tmp"))
    parent.chmod(0o711)
    yield parent
    shutil.rmtree(parent)


def as_node(image: Path, layer: Path, base: int, script: str) -> subprocess.CompletedProcess[str]:
    """Run `script` with bash as root of a new user namespace mapped to base..base+65535, whose
    root filesystem is the image (idmapped for that range by this computer's root) under the
    writable layer, mounted inside the namespace with `userxattr`; /proc and a /dev with null,
    zero and urandom as a node has."""
    images.prepare_layer(layer, base)
    size = realnodes.RANGE_SIZE
    root = layer / "root"
    inside = f"""set -euo pipefail
mount -t overlay node-root -o {images.overlay_options(layer)} {root}
mount -t tmpfs -o mode=0755 node-dev {root}/dev
for device in null zero urandom; do
    touch {root}/dev/$device
    mount --bind /dev/$device {root}/dev/$device
done
mount -t proc proc {root}/proc
cd {root}
pivot_root . .
umount -l .
cd /
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
{script}
"""
    host_stage = (
        f"{shlex.quote(sys.executable)} -I {shlex.quote(images.__file__)} attach {image} {layer}/image "
        f"--base {base} --size {size} && "
        f"exec unshare --user --map-users={base},0,{size} --map-groups={base},0,{size} --setuid 0 --setgid 0 "
        f"--mount --pid --fork --propagation private bash -c {shlex.quote(inside)}"
    )
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", host_stage],
                          capture_output=True, text=True, timeout=300, env={"PATH": os.environ["PATH"]})


def local_deb(directory: Path) -> Path:
    """A Debian package made here with dpkg-deb: it installs /usr/share/rc-probe/hello."""
    tree = directory / "rc-probe"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "usr/share/rc-probe").mkdir(parents=True)
    (tree / "usr/share/rc-probe/hello").write_text("installed by dpkg\n")
    (tree / "DEBIAN/control").write_text(
        "Package: rc-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: Runcrate <ops@runcrate.example>\n"
        "Description: a package built by the test\n"
    )
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(directory / "rc-probe.deb")],
                   check=True, capture_output=True)
    return directory / "rc-probe.deb"


def local_wheel(directory: Path) -> Path:
    """A pure-Python wheel made here (a zip as PEP 427 describes): pip installs it offline."""
    path = directory / "rcprobe-1.0-py3-none-any.whl"
    files = {
        "rcprobe.py": "ANSWER = 42\n",
        "rcprobe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: rcprobe\nVersion: 1.0\n",
        "rcprobe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr("rcprobe-1.0.dist-info/RECORD", "".join(f"{name},,\n" for name in files)
                       + "rcprobe-1.0.dist-info/RECORD,,\n")
    path.write_bytes(buffer.getvalue())
    return path


def test_the_base_image_has_what_a_node_runs_and_no_node_secrets(base_image, uid_base, layers):
    probe = as_node(base_image, layers / "node", uid_base, r"""
for command in sshd wg wireguard-go wg-quick slurmd slurmctld srun munged mpirun python3 sshfs iperf3 fping \
        prometheus-node-exporter ip ping curl git tmux screen htop vim less rsync gcc make; do
    command -v "$command" >/dev/null || echo "missing: $command"
done
python3 -c 'import mpi4py, venv'
test -e /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so || echo "missing: libpmix.so for Slurm's mpi_pmix"
test -e /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so || echo "missing: Slurm's mpi_pmix plugin"
/opt/ray/bin/ray --version
/opt/ray/bin/python -c 'import ray.dashboard, ray.job_submission, aiohttp; print("ray[default]")'
ls /etc/ssh/ssh_host_* /etc/munge/munge.key 2>/dev/null | sed 's/^/secret: /' || true
find / -xdev \( -name 'libcuda*' -o -name 'libnvidia*' \) | sed 's/^/nvidia: /'
stat -c 'owner of /usr/bin/bash: %u' /usr/bin/bash
sed 's/^/hostname: /' /etc/hostname
grep -h nameserver /etc/resolv.conf | sed 's/^/resolver: /' || true
""")
    assert probe.returncode == 0, probe.stderr
    lines = probe.stdout.splitlines()
    assert not [line for line in lines if line.startswith(("missing:", "secret:", "nvidia:", "resolver:"))], probe.stdout
    # Nothing of the computer that built it: not its name, not its resolver.
    assert "hostname: localhost" in lines
    assert f"ray, version {images.RAY_VERSION}" in probe.stdout
    assert "ray[default]" in lines
    # The image's root-owned files are the node's root's own: the idmapped mount maps them.
    assert "owner of /usr/bin/bash: 0" in lines


def test_root_writes_anywhere_on_its_layer_and_the_image_and_other_nodes_see_none_of_it(base_image, uid_base, layers):
    before = images.digest_tree(base_image)
    first = layers / "first"
    images.prepare_layer(first, uid_base)
    # Copied onto the node's layer, as a customer's scp would (the node's root owns them).
    for made in (local_deb(layers), local_wheel(layers)):
        (first / "upper/root").mkdir(exist_ok=True, mode=0o700)
        shutil.copy(made, first / "upper/root" / made.name)
        os.chown(first / "upper/root" / made.name, uid_base, uid_base)
    os.chown(first / "upper/root", uid_base, uid_base)

    wrote = as_node(base_image, first, uid_base, r"""
id -u
dpkg -i /root/rc-probe.deb >/dev/null
dpkg-query -W -f='${Status}\n' rc-probe
cat /usr/share/rc-probe/hello
printf '#!/bin/sh\necho x ran\n' > /usr/bin/x && chmod 755 /usr/bin/x && x
echo 'node setting' >> /etc/environment
rm /usr/bin/htop
mv /usr/share/doc/curl /usr/share/doc/curl-renamed
cd /root && python3 -m venv v && v/bin/python -c 'import sys; print("venv", sys.prefix)'
/opt/ray/bin/pip install --no-index --no-deps --quiet /root/rcprobe-1.0-py3-none-any.whl
/opt/ray/bin/python -c 'import rcprobe; print("rcprobe", rcprobe.ANSWER)'
""")
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stdout.splitlines() == [
        "0", "install ok installed", "installed by dpkg", "x ran", "venv /root/v", "rcprobe 42",
    ], wrote.stdout
    # On this computer the writes are the layer's, owned by the node's unprivileged root.
    assert (first / "upper/usr/bin/x").stat().st_uid == uid_base
    assert images.digest_tree(base_image) == before

    second = as_node(base_image, layers / "second", uid_base, r"""
test -e /usr/bin/x && echo "sees /usr/bin/x"
dpkg-query -W -f='${Status}\n' rc-probe 2>/dev/null | grep -q installed && echo "sees rc-probe"
test -e /root/v && echo "sees the venv"
grep -q 'node setting' /etc/environment && echo "sees /etc/environment"
/opt/ray/bin/python -c 'import rcprobe' 2>/dev/null && echo "sees rcprobe"
test -x /usr/bin/htop || echo "lost htop"
test -d /usr/share/doc/curl || echo "lost curl's docs"
echo checked
""")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == ["checked"], second.stdout
    assert images.digest_tree(base_image) == before


def test_an_unchanged_recipe_is_not_built_again_and_a_changed_one_is_a_new_image(base_image):
    said: list[str] = []
    assert images.ensure("base", say=said.append) == base_image
    assert said == []
    recipe = images.IMAGES["base"]
    changed = images.Recipe(name="base", packages=(*recipe.packages, "jq"), venvs=recipe.venvs)
    suite = images.host_suite()
    assert changed.digest(suite) != recipe.digest(suite)
    assert images.Recipe(name="base", packages=tuple(reversed(recipe.packages)), venvs=recipe.venvs).digest(suite) \
        == recipe.digest(suite)


# -- real nodes boot from the image -----------------------------------------------------------


@pytest.fixture
def node_run(tmp_path: Path) -> Iterator[Path]:
    """A run of real nodes (realnodes.boot), every one released and checked gone at the end."""
    run = tmp_path / "run"
    run.mkdir()
    yield run
    for state in run.iterdir():
        if (state / "node.json").exists():
            realnodes.release(run, state)
    realnodes.Underlay(run).teardown()
    assert realnodes.leftovers(run) == []


def boot_node(run: Path, name: str, segment: str = "cluster-a") -> realnodes.NodeHandle:
    return realnodes.boot(run, run / name, key=name, hostname=name, authorized_keys="", segment=segment)


def in_node(handle: realnodes.NodeHandle, script: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return realnodes.run_in(handle, ["bash", "-c", script], timeout=120, **kwargs)


def copy_into(handle: realnodes.NodeHandle, source: Path, target: str) -> None:
    """A file copied into the node as its root would receive it (scp's part)."""
    import base64

    copied = in_node(handle, f"base64 -d > {shlex.quote(target)}", input=base64.b64encode(source.read_bytes()).decode())
    assert copied.returncode == 0, copied.stderr


def test_root_on_a_node_installs_anywhere_and_no_other_node_the_next_cluster_or_the_image_sees_it(
        base_image, node_run, tmp_path):
    before = images.digest_tree(base_image)
    node0, node1 = boot_node(node_run, "node-0"), boot_node(node_run, "node-1")
    copy_into(node0, local_deb(tmp_path), "/root/rc-probe.deb")
    copy_into(node0, local_wheel(tmp_path), "/root/rcprobe-1.0-py3-none-any.whl")

    wrote = in_node(node0, r"""
set -e
dpkg -i /root/rc-probe.deb >/dev/null
dpkg-query -W -f='${Status}\n' rc-probe
printf '#!/bin/sh\necho x ran\n' > /usr/bin/x && chmod 755 /usr/bin/x && x
cd /root && python3 -m venv v && v/bin/pip install --quiet --no-index /root/rcprobe-1.0-py3-none-any.whl
v/bin/python -c 'import rcprobe; print("rcprobe", rcprobe.ANSWER)'
pip install --quiet --no-index /root/rcprobe-1.0-py3-none-any.whl
python3 -c 'import rcprobe; print("system", rcprobe.__file__, rcprobe.ANSWER)'
""")
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stdout.splitlines() == [
        "install ok installed", "x ran", "rcprobe 42", "system /usr/local/lib/python3.11/dist-packages/rcprobe.py 42",
    ], wrote.stdout
    assert not Path("/usr/bin/x").exists() and not Path("/usr/share/rc-probe").exists()

    unseen = r"""
test -e /usr/bin/x && echo "sees /usr/bin/x"
test -e /usr/share/rc-probe && echo "sees rc-probe's files"
dpkg-query -W rc-probe >/dev/null 2>&1 && echo "sees rc-probe"
test -e /root/v && echo "sees the venv"
python3 -c 'import rcprobe' 2>/dev/null && echo "sees rcprobe"
echo checked
"""
    assert in_node(node1, unseen).stdout.splitlines() == ["checked"]
    # The next cluster on the same machine slot: node-0's layer went with it.
    realnodes.release(node_run, node_run / "node-0")
    again = boot_node(node_run, "node-0", segment="cluster-b")
    assert in_node(again, unseen).stdout.splitlines() == ["checked"]
    assert images.digest_tree(base_image) == before


def test_a_node_runs_the_images_software_and_sees_nothing_of_this_computers(base_image, node_run):
    only_here = Path("/usr/share") / f"rc-host-only-{os.getpid()}"
    only_here.write_text("this computer's\n")
    try:
        node = boot_node(node_run, "node-0")
        seen = in_node(node, f"""
test -e {only_here} && echo "sees {only_here}"
cat /etc/debian_version
readlink /proc/$(cat /run/sshd.pid)/exe
/opt/ray/bin/python -c 'import ray.dashboard, ray.job_submission; print("ray[default]")'
""")
    finally:
        only_here.unlink()
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.splitlines() == [(base_image / "etc/debian_version").read_text().strip(), "/usr/sbin/sshd",
                                        "ray[default]"], seen.stdout
    # Its root is the image under the node's layer, on the node's own disk.
    assert in_node(node, "findmnt -n -o FSTYPE /").stdout.strip() == "overlay"
