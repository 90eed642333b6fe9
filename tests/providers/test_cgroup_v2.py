"""cgroup v2: the host runtime chooses the hierarchy by what the host mounts at /sys/fs/cgroup.

This computer runs v1, with a unified (v2) hierarchy beside it at /sys/fs/cgroup/unified that
offers no memory, pids or cpu controller (they are bound to v1). Mounted over /sys/fs/cgroup in
a mount namespace of the test's own, it is a real v2 host as the runtime sees it: what can be
checked here is the choice, a node's processes held in and killed through a v2 cgroup, and that a
v2 host without the controllers a machine's limits need is refused in words, never run with no
limits. The limits themselves on v2 are verified on a v2 host (docs/nodeops.md, "cgroup v2")."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from offers import fleet
from tests.factories import MachineTypeFactory
from tests.fleet.test_runtime import unpacked

UNIFIED = Path("/sys/fs/cgroup/unified")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not (UNIFIED / "cgroup.controllers").exists() or shutil.which("unshare") is None,
    reason="needs root and a cgroup v2 hierarchy mounted beside v1 (/sys/fs/cgroup/unified)",
)

PROBE = r"""
import json, os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from clusters.providers.local import realnodes
out = {"v2": realnodes._cgroup_v2(), "lacks": realnodes.cgroup_lacks(), "capability": realnodes.capability()}
try:
    realnodes._make_cgroup("v2probe-%d" % os.getpid(), realnodes.NodeLimits())
    out["refused"] = None
except RuntimeError as error:
    out["refused"] = str(error)
except Exception as error:
    out["refused"] = "%s: %s" % (type(error).__name__, error)
name = "v2test-%d" % os.getpid()
[path] = realnodes._cgroup_dirs(name)
made_parent = not path.parent.exists()
path.mkdir(parents=True)
sleeper = subprocess.Popen(realnodes._in_cgroup([path], ["sleep", "300"]))
for _ in range(100):
    if str(sleeper.pid) in (path / "cgroup.procs").read_text().split():
        break
    time.sleep(0.05)
out["path"] = str(path)
out["member"] = [line for line in open("/proc/%d/cgroup" % sleeper.pid).read().splitlines() if line.startswith("0::")]
realnodes._kill_cgroup(name)
out["exit"] = sleeper.wait(10)
realnodes._remove_cgroup(name)
out["removed"] = not path.exists()
if made_parent:
    path.parent.rmdir()
print(json.dumps(out))
"""


def in_v2_namespace(command: str) -> subprocess.CompletedProcess:
    """`command` in a mount namespace whose /sys/fs/cgroup is this computer's v2 hierarchy."""
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount --bind {UNIFIED} /sys/fs/cgroup && {command}"],
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.django_db
def test_on_a_v2_host_the_runtime_holds_a_machine_in_a_v2_cgroup_and_refuses_to_run_one_without_its_limits(tmp_path):
    folder = unpacked(tmp_path)
    done = in_v2_namespace(f"exec /usr/bin/python3 -I -c {shlex.quote(PROBE)} {shlex.quote(str(folder))}")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])

    assert out["v2"] is True
    # The unified hierarchy here offers none of them: a v2 host like that cannot limit a machine.
    assert out["lacks"] == ["memory", "pids", "cpu"]
    assert out["refused"] == "cgroup v2 offers no memory, pids, cpu controller for the machine's limits"
    assert out["capability"] == [False, "cgroup v2 offers no memory, pids, cpu controller for the machines' limits"]
    # What v2 gives without them: a node's processes joined, seen and killed by their cgroup.
    assert out["path"] == f"/sys/fs/cgroup/runcrate/{Path(out['path']).name}"
    assert out["member"] == [f"0::/runcrate/{Path(out['path']).name}"]
    assert out["exit"] == -9 and out["removed"] is True

    # The grade reads the same host as v2 and names what it lacks: such a host is refused.
    read = in_v2_namespace(f"exec sh -c {shlex.quote(fleet.FACTS_SCRIPT)}")
    assert read.returncode == 0, read.stderr
    facts = fleet.Facts.parse(read.stdout)
    [cgroups] = [c for c in fleet.grade(facts, MachineTypeFactory(provider="local"), 2) if c["check"] == "cgroups"]
    assert cgroups == {"check": "cgroups", "verdict": "fail", "detail": "cgroup v2 lacks the memory, pids, cpu controllers"}
