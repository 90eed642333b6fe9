"""stop.sh is best effort throughout: whatever fails, every later step still runs and the node
ends "stopped". Run with bash under a temporary root; every command that would touch this
computer (ip, umount, wg-quick, exportfs, systemctl, service_stop) is replaced by a shell
function that records its call and fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusters.nodeops.runner import build_payload, load_script

FAILING = """
calls() { printf '%s\\n' "$*" >>"$STATE_DIR/calls"; }
ip() { calls ip "$@"; return 0; }  # `ip link show wg0` answers: there is a wg0 to take down
umount() { calls umount "$@"; return 1; }
wg-quick() { calls wg-quick "$@"; return 1; }
exportfs() { calls exportfs "$@"; return 1; }
systemctl() { calls systemctl "$@"; return 1; }
service_stop() { calls service_stop "$@"; die "could not stop $1"; }
grep() { if [ "${*: -1}" = /proc/mounts ]; then return 0; fi; command grep "$@"; }  # /shared is mounted
"""


def run_stop(root: Path, *, index: int, software: str, overrides: str, sandbox: bool = False) -> subprocess.CompletedProcess:
    script = load_script("stop.sh", standins=sandbox)
    lib, _, stop = script.rpartition("#!/usr/bin/env bash\n# stop:")
    env = {
        "RUNCRATE_ROOT": str(root), "RUNCRATE_SANDBOX": "1" if sandbox else "0", "RUNCRATE_NODE_NAME": f"node-{index}",
        "RUNCRATE_NODE_INDEX": str(index), "RUNCRATE_NODES": "node-0 10.77.0.1;node-1 10.77.0.2",
        "RUNCRATE_SOFTWARE": software, "PATH": "/usr/bin:/bin",
    }
    payload = build_payload(lib + overrides + "\n# stop:" + stop, env)
    return subprocess.run(["bash", "-s"], input=payload, capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def worker_root(tmp_path: Path) -> Path:
    (tmp_path / "etc/runcrate").mkdir(parents=True)
    (tmp_path / "etc/fstab").write_text(
        "UUID=1 / ext4 defaults 0 1\n# BEGIN runcrate shared\nroot@node-0:/shared /shared fuse.sshfs _netdev 0 0\n"
        "# END runcrate shared\n"
    )
    (tmp_path / "root/.ssh").mkdir(parents=True)
    (tmp_path / "root/.ssh/authorized_keys").write_text("# BEGIN runcrate customer\nssh-ed25519 AAAA k\n# END runcrate customer\n")
    return tmp_path


def test_a_worker_stops_everything_it_can_though_every_command_fails(worker_root):
    done = run_stop(worker_root, index=1, software="slurm", overrides=FAILING)

    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("[node-1] stopped")
    for failed in ("service_stop slurmd", "umount -l -c /shared", "wg-quick down wg0"):
        assert f"warning: '{failed}" in done.stdout, done.stdout
    calls = (worker_root / "etc/runcrate/calls").read_text()
    assert "wg-quick down wg0" in calls  # reached though the steps before it failed
    # The /shared line leaves fstab (not an empty block), the other lines stay.
    assert (worker_root / "etc/fstab").read_text() == "UUID=1 / ext4 defaults 0 1\n"
    assert "ssh-ed25519" not in (worker_root / "root/.ssh/authorized_keys").read_text()
    assert (worker_root / "etc/runcrate/state").read_text() == "stopped\n"


def test_a_helper_that_gives_up_does_not_end_the_stop(worker_root):
    gives_up = FAILING + 'remove_block() { die "cannot rewrite $1"; }\n'
    done = run_stop(worker_root, index=1, software="none", overrides=gives_up)

    assert done.returncode == 0, done.stderr
    assert "cannot rewrite" in done.stderr and f"warning: 'remove_block {worker_root}/etc/fstab shared' failed" in done.stdout
    assert (worker_root / "etc/runcrate/state").read_text() == "stopped\n"


def test_a_sandbox_node_stops_though_its_stand_in_registry_fails(tmp_path):
    (tmp_path / "etc/runcrate").mkdir(parents=True)
    done = run_stop(tmp_path, index=0, software="ray", overrides='sim_unregister() { return 4; }\n', sandbox=True)

    assert done.returncode == 0, done.stderr
    assert done.stdout.count("warning: 'standin_stop") == 3
    assert (tmp_path / "etc/runcrate/state").read_text() == "stopped\n"
