"""The real Kubernetes install (unverified here: no machine can run a kubelet) refuses in its
first step, before it installs or changes anything, while what it fetches is not pinned."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusters.nodeops.runner import build_payload, load_script


def run_install(root: Path, **pins: str) -> subprocess.CompletedProcess:
    env = {
        "RUNCRATE_ROOT": str(root), "RUNCRATE_SANDBOX": "0", "RUNCRATE_NODE_NAME": "node-0", "RUNCRATE_NODE_INDEX": "0",
        "RUNCRATE_NODES": "node-0 10.77.0.1;node-1 10.77.0.2", "RUNCRATE_SOFTWARE": "kubernetes",
        "RUNCRATE_MACHINE_KIND": "bare_metal", "RUNCRATE_GPUS_PER_NODE": "8", "RUNCRATE_HEAD_IP": "10.77.0.1",
        "RUNCRATE_PRIVATE_IP": "10.77.0.1", "RUNCRATE_KUBE_TOKEN": "abcdef.0123456789abcdef",
        "RUNCRATE_KUBE_CA_HASH": "sha256:00", "PATH": "/usr/bin:/bin", **pins,
    }
    # Anything past the check would change this computer: make sure nothing can.
    guard = "swapoff() { echo 'swapoff ran' >&2; exit 99; }\n"
    script = load_script("install_kubernetes.sh")
    lib, _, body = script.rpartition("#!/usr/bin/env bash\n# install_kubernetes:")
    payload = build_payload(lib + guard + "# install_kubernetes:" + body, env)
    return subprocess.run(["bash", "-s"], input=payload, capture_output=True, text=True, timeout=60, env=env)


PINNED = {"RUNCRATE_FLANNEL_VERSION": "v0.26.1", "RUNCRATE_FLANNEL_SHA256": "a" * 64,
          "RUNCRATE_DEVICE_PLUGIN_VERSION": "v0.16.2", "RUNCRATE_DEVICE_PLUGIN_SHA256": "b" * 64}


@pytest.mark.parametrize("missing", sorted(PINNED))
def test_the_real_install_refuses_before_changing_anything_without_every_pin(tmp_path, missing):
    done = run_install(tmp_path, **{k: v for k, v in PINNED.items() if k != missing})
    assert done.returncode == 1, done.stderr
    assert f"KUBERNETES_{missing.removeprefix('RUNCRATE_')} is not set on the control plane" in done.stderr
    assert "::step:: packages" not in done.stdout and "swapoff ran" not in done.stderr


def test_with_every_pin_it_goes_on_to_install(tmp_path):
    done = run_install(tmp_path, **PINNED)
    assert "::step:: packages" in done.stdout and "swapoff ran" in done.stderr and done.returncode == 99
