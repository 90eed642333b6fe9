"""The node-side helpers run locally with bash (no SSH): properties of lib.sh and health.sh's."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusters.nodeops import operations as ops
from clusters.nodeops.parsers import parse_sinfo

SCRIPTS = Path(__file__).resolve().parents[2] / "clusters/nodeops/scripts"
LIB = (SCRIPTS / "lib.sh").read_text()
HEALTH_SCRIPT = Path(__file__).resolve().parents[2] / "clusters/node_health/health.sh"
ENV = {"RUNCRATE_NODE_NAME": "node-0", "RUNCRATE_NODE_INDEX": "0", "RUNCRATE_NODES": "node-0 10.77.0.1", "PATH": "/usr/bin:/bin"}

line = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=30).filter(
    lambda text: not text.startswith("# BEGIN runcrate") and not text.startswith("# END runcrate")
)


def managed_block(path: Path, block: str) -> None:
    subprocess.run(
        ["bash", "-c", LIB + '\nmanaged_block "$1" cluster <<<"$2"', "_", str(path), block],
        env=ENV,
        check=True,
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.lists(line, max_size=5), block=st.lists(line, min_size=1, max_size=4))
def test_a_managed_block_keeps_other_lines_and_applying_it_twice_changes_nothing(tmp_path, before, block):
    path = tmp_path / "hosts"
    path.write_text("".join(f"{text}\n" for text in before))
    block_text = "\n".join(block)

    managed_block(path, block_text)
    once = path.read_text()
    managed_block(path, block_text)

    assert path.read_text() == once
    assert once == "".join(f"{text}\n" for text in before) + (
        f"# BEGIN runcrate cluster\n{block_text}\n# END runcrate cluster\n"
    )


def test_write_file_is_atomic_and_sets_the_mode(tmp_path):
    target = tmp_path / "etc/wireguard/wg0.conf"
    subprocess.run(
        ["bash", "-c", LIB + '\nwrite_file "$1" 0600 <<<secret; write_file "$1" 0600 <<<again', "_", str(target)],
        env=ENV,
        check=True,
    )
    assert target.read_text() == "again\n"
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in target.parent.iterdir()] == ["wg0.conf"]  # no temp files left


def test_the_stand_in_sinfo_tables_read_back_the_same(endpoints, runner):
    spec = endpoints.spec(software="slurm")
    ops.write_fault(spec.nodes[1].root, "install_fails")
    assert ops.set_names(spec, runner=runner).ok
    ops.install_software(spec, runner=runner)

    outputs = runner.run(
        spec.nodes[:1],
        'export PATH="$RUNCRATE_ROOT/usr/local/bin:$PATH"\n'
        "sinfo -N -h -o '%N %T'; echo ===; sinfo -N; echo ===; sinfo; echo ===; sinfo -o '%20N %10T'\n",
        step="sinfo",
    )["node-0"].stdout.split("===\n")

    expected = {"node-0": "idle", "node-1": "down*", "node-2": "idle", "node-3": "idle"}
    assert [parse_sinfo(text) for text in outputs] == [expected] * 4


def test_apt_install_asks_apt_only_for_the_packages_dpkg_does_not_have(tmp_path):
    # dpkg-query is this computer's own; apt-get is replaced by one that notes what it is asked.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "apt-calls"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$*" >>{calls}\n')
    (bin_dir / "apt-get").chmod(0o755)
    env = {**ENV, "PATH": f"{bin_dir}:/usr/bin:/bin"}

    def apt_install(*packages: str) -> None:
        subprocess.run(["bash", "-c", LIB + '\napt_install "$@"', "_", *packages], env=env, check=True,
                       capture_output=True)

    apt_install("bash", "coreutils")
    assert not calls.exists()
    apt_install("bash", "runcrate-no-such-package", "coreutils", "runcrate-nor-this-one")
    assert calls.read_text().splitlines() == [
        "update -q", "install -y -q --no-install-recommends runcrate-no-such-package runcrate-nor-this-one",
    ]


def test_a_daemon_runs_while_its_process_lives_and_not_once_it_has_exited(tmp_path):
    """health.sh's process_runs: a killed wireguard-go that its parent has not reaped yet (a
    zombie) is not a running daemon."""
    health = HEALTH_SCRIPT.read_text()
    start = health.index("process_runs() {")
    function = health[start : health.index("\n}\n", start) + 3]
    name = f"rcz{secrets.token_hex(4)}"  # a command name no other process here has
    program = tmp_path / name
    shutil.copy("/bin/sleep", program)

    def runs() -> bool:
        return subprocess.run(["bash", "-c", function + 'process_runs "$1"', "_", name]).returncode == 0

    def state(pid: int) -> str:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]

    assert not runs()
    daemon = subprocess.Popen([program, "30"])
    try:
        assert runs()
        daemon.kill()
        deadline = time.monotonic() + 10
        while state(daemon.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state(daemon.pid) == "Z", "killed and not reaped"
        assert not runs()
    finally:
        daemon.kill()
        daemon.wait()
