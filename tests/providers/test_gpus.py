"""GPUs into nodes (issue 39 item 9): each machine gets the devices of the host's CDI spec it was
given, and only those, with the spec's driver files and environment. This computer has no GPU:
the spec here lists ordinary character devices made with mknod in a test folder (the numbers of
/dev/null and /dev/zero), exactly as NVIDIA's toolkit lists /dev/nvidia0 and /dev/nvidia1.
Skipped where this computer cannot run real nodes."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.providers.local import cdi, realnodes, runtime
from clusters.providers.local.sandbox import write_ed25519_keypair

CAN, WHY = realnodes.capability()
needs_nodes = pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}")

# What `nvidia-ctk cdi generate` writes (YAML, its default), with test devices in place of GPUs.
SPEC = """\
---
cdiVersion: 0.5.0
kind: runcrate.test/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/testgpu0
      hostPath: {folder}/testgpu0
    env:
    - TEST_GPU_UUID=GPU-0000
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/testgpu1
      hostPath: {folder}/testgpu1
      permissions: rw
    env:
    - TEST_GPU_UUID=GPU-1111
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/testgpuctl
    hostPath: {folder}/testgpuctl
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-ctk
    args:
    - nvidia-ctk
    - hook
    - create-symlinks
    - --link
    - libtestdriver.so.550.1::/usr/lib/x86_64-linux-gnu/libtestdriver.so.1
  - hookName: createContainer
    path: /usr/bin/nvidia-ctk
    args: [nvidia-ctk, hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
  mounts:
  - hostPath: {folder}/libtestdriver.so.550.1
    containerPath: /usr/lib/x86_64-linux-gnu/libtestdriver.so.550.1
    options:
    - ro
    - nosuid
    - nodev
    - bind
"""


@pytest.fixture
def spec_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="rc-cdi-", dir="/var/tmp"))
    folder.chmod(0o755)
    for name, number in (("testgpu0", os.makedev(1, 3)), ("testgpu1", os.makedev(1, 5)),
                         ("testgpuctl", os.makedev(1, 7))):
        os.mknod(folder / name, 0o666 | stat.S_IFCHR, number)
    (folder / "libtestdriver.so.550.1").write_text("the driver's library\n")
    (folder / "libtestdriver.so.550.1").chmod(0o644)
    (folder / "nvidia.yaml").write_text(SPEC.format(folder=folder))
    yield folder
    shutil.rmtree(folder)


def test_a_spec_in_yaml_reads_as_its_json_and_gives_each_device_only_its_own_edits(spec_folder: Path) -> None:
    spec = cdi.load(spec_folder / "nvidia.yaml")
    (spec_folder / "nvidia.json").write_text(json.dumps(spec))
    assert cdi.load(spec_folder / "nvidia.json") == spec
    assert spec["devices"][1]["containerEdits"]["deviceNodes"][0]["permissions"] == "rw"

    first = cdi.edits(spec, ["0"])
    assert [(node.path, node.major, node.minor) for node in first.device_nodes] == [
        ("/dev/testgpuctl", 1, 7), ("/dev/testgpu0", 1, 3)]
    assert first.env == ["NVIDIA_VISIBLE_DEVICES=void", "TEST_GPU_UUID=GPU-0000"]
    assert first.links == [("/usr/lib/x86_64-linux-gnu/libtestdriver.so.1", "libtestdriver.so.550.1")]
    assert first.hooks_not_run == ["nvidia-ctk hook update-ldcache"]
    assert first.cgroup_rules() == ["c 1:7 rwm", "c 1:3 rwm"]
    assert cdi.edits(spec, ["1"]).cgroup_rules() == ["c 1:7 rwm", "c 1:5 rw"]

    with pytest.raises(cdi.CDIError, match="has no device 7"):
        cdi.edits(spec, ["7"])


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[runtime.Runtime]:
    run = Path(tempfile.mkdtemp(prefix="rc-gpus-"))
    host = runtime.Runtime(run)
    yield host
    for state in run.glob("*/node.json"):
        realnodes.release(run, state.parent)
    realnodes.Underlay(run).teardown()
    assert realnodes.leftovers(run) == []
    shutil.rmtree(run, ignore_errors=True)


def in_node(host: runtime.Runtime, key: str, script: str) -> subprocess.CompletedProcess[str]:
    handle = realnodes.running(host.state_dir(key))
    assert handle is not None
    return realnodes.run_in(handle, ["bash", "-c", script])


@needs_nodes
def test_each_node_sees_and_opens_its_own_gpu_only_with_the_drivers_files_and_a_receipt_that_names_it(
        machines: runtime.Runtime, spec_folder: Path, tmp_path: Path) -> None:
    public = write_ed25519_keypair(tmp_path / "client", "test")
    spec = str(spec_folder / "nvidia.yaml")
    for index in (0, 1):
        answer = machines.boot({"key": f"m{index}", "hostname": f"node-{index}", "authorized_keys": public,
                                "gpus": [str(index)], "cdi_spec": spec})
        assert answer["running"], answer
        assert answer["gpus"] == [str(index)]

    for mine, other in ((0, 1), (1, 0)):
        seen = in_node(machines, f"m{mine}", f"""
            ls /dev | grep testgpu | tr '\\n' ' '; echo
            head -c 4 /dev/testgpu{mine} | od -An -tx1 | tr -d ' \\n'; echo " opened $?"
            test -e /dev/testgpu{other} && echo "sees the other" || echo "not the other"
            cat /usr/lib/x86_64-linux-gnu/libtestdriver.so.1
            echo extra >> /usr/lib/x86_64-linux-gnu/libtestdriver.so.550.1 2>/dev/null && echo writable || echo read-only
            grep -h TEST_GPU_UUID /etc/ssh/sshd_config /etc/profile.d/runcrate-gpus.sh
        """)
        assert seen.returncode == 0, seen.stderr
        lines = seen.stdout.splitlines()
        assert lines[0].split() == sorted([f"testgpu{mine}", "testgpuctl"])
        # node-0's stand-in is /dev/null's number (reads nothing), node-1's /dev/zero's.
        assert lines[1] == ("" if mine == 0 else "00000000") + " opened 0"
        assert lines[2] == "not the other"
        assert lines[3] == "the driver's library"
        assert lines[4] == "read-only"
        assert lines[5:] == [f"SetEnv TEST_GPU_UUID=GPU-{str(mine) * 4}", f"export TEST_GPU_UUID=GPU-{str(mine) * 4}"]

    # A device node that appears in a node's /dev (made here by this computer's root) is still
    # not one it may open: its devices cgroup allows only what it was given.
    handle = realnodes.running(machines.state_dir("m1"))
    assert handle is not None
    planted = subprocess.run(["nsenter", "-t", str(handle.pid), "-m", "mknod", "/dev/planted", "c", "1", "11"],
                             capture_output=True, text=True)
    assert planted.returncode == 0, planted.stderr
    opened = in_node(machines, "m1", "head -c 1 /dev/planted")
    assert opened.returncode != 0 and "Operation not permitted" in opened.stderr

    receipt = machines.release({"key": "m0"})["receipt"]
    gpus = next(check for check in receipt["checks"] if check["check"] == "GPUs")
    assert receipt["clean"] and gpus["clean"]
    assert gpus["detail"].startswith("given 0 (/dev/testgpuctl 1:7, /dev/testgpu0 1:3); released")


@needs_nodes
def test_a_node_given_a_device_its_hosts_spec_does_not_have_does_not_boot_and_holds_nothing(
        machines: runtime.Runtime, spec_folder: Path, tmp_path: Path) -> None:
    public = write_ed25519_keypair(tmp_path / "client", "test")
    answer = machines.boot({"key": "m0", "hostname": "node-0", "authorized_keys": public, "gpus": ["3"],
                            "cdi_spec": str(spec_folder / "nvidia.yaml")})
    assert not answer["running"]
    assert "has no device 3" in answer["detail"]
    assert realnodes.leftovers(machines.run_dir) == []
