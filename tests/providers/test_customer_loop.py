"""The ML engineer's daily loop on real nodes, from their terminal: `runcrate clusters exec`, `cp`
and `port-forward`, `ssh NAME-node-N` through the Included ssh config right after a replace and an
add (nothing run again), and a volume saved mid-run and read back on a new cluster.

The CLI runs as a subprocess against a live server, with a home of its own and the customer's
own ssh config (their key, and the Include of ~/.runcrate/ssh/*.config by its absolute path,
which is what `~` is for a real customer: OpenSSH reads the account's home, not $HOME).
Everything on the nodes is read back over that SSH or inside the node, never from a file the
code under test wrote for itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from clusters.models import Cluster, Node, Status
from clusters.providers.local import realnodes
from clusters.providers.local.sandbox import free_port
from clusters.services.create import create_cluster
from clusters.services.replace import replace_node
from clusters.services.terminate import terminate_cluster
from clusters.services.volumes import create_volume
from clusters.services.workers import add_workers
from tests.client.client_support import runcrate_env
from tests.providers.conftest import SETTLED, drive, terminal_stdin
from tests.providers.test_real_nodes import (
    customer_key,
    grow,
    on_node,
    real_machine_type,
    real_machines,  # noqa: F401 - the fixture
    story,
    wait_for,
)

CAN, WHY = realnodes.capability()
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}"),
]


class Terminal:
    """The customer's laptop: a home, an ssh config that Includes runcrate's files, a key, and
    `runcrate` pointed at the live server."""

    def __init__(self, tmp_path: Path, base_url: str, api_key: str, key: str) -> None:
        self.home = tmp_path / "home"
        (self.home / ".ssh").mkdir(parents=True)
        self.ssh_config = tmp_path / "ssh_config"
        self.ssh_config.write_text(
            f"Include {self.home}/.runcrate/ssh/*.config\n\n"
            f"Host *\n    IdentityFile {key}\n    IdentitiesOnly yes\n    BatchMode yes\n    ConnectTimeout 20\n"
        )
        self.env = runcrate_env(base_url, api_key, extra={"HOME": str(self.home),
                                                         "RUNCRATE_SSH_CONFIG": str(self.ssh_config)})
        self.cwd = tmp_path

    def runcrate(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        with terminal_stdin() as stdin:
            return subprocess.run([sys.executable, "-m", "runcrate_client", *args], env=self.env, cwd=self.cwd,
                                  capture_output=True, text=True, timeout=timeout, stdin=stdin)

    def ssh(self, host: str, command: str) -> subprocess.CompletedProcess[str]:
        """Plain OpenSSH, as typed in a terminal: `ssh train-node-2 hostname`."""
        with terminal_stdin() as stdin:
            return subprocess.run(["ssh", "-F", str(self.ssh_config), host, command], env=self.env,
                                  capture_output=True, text=True, timeout=120, stdin=stdin)


@pytest.fixture
def terminal(live_server, environment, owner, tmp_path):
    from accounts.services import add_ssh_key
    from api.keys import create_api_key

    key, public = customer_key(tmp_path, "alice")
    add_ssh_key(workspace=environment.workspace, name="laptop", created_by=owner, public_key=public)
    _, api_key = create_api_key(workspace=environment.workspace, created_by=owner, name="laptop")
    return Terminal(tmp_path, live_server.url, api_key, key)


def ready_cluster(environment, machine_type, name: str, machines: int, **kwargs) -> Cluster:
    """A ready cluster whose nodes take the customer's key (as the dashboard installs every key)."""
    from accounts.models import SSHKey

    cluster = create_cluster(environment=environment, name=name, machine_type=machine_type, machine_count=machines,
                             ssh_keys=list(SSHKey.objects.filter(workspace=environment.workspace)), **kwargs)
    cluster = drive(cluster, SETTLED, timeout=150)
    assert cluster.status == Status.READY, story(cluster)
    return cluster


def test_exec_cp_and_port_forward_work_on_every_node_over_the_customers_own_ssh(
    environment, real_machines, terminal, tmp_path
):
    cluster = ready_cluster(environment, real_machine_type(3), "loop", 3)
    nodes = list(cluster.nodes.select_related("host").order_by("index"))

    # One command on every node at once; node-1's fails, and the worst status is the exit code.
    ran = terminal.runcrate("clusters", "exec", "loop", "--", "hostname; test $(hostname) != node-1")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert sorted(ran.stdout.splitlines()) == ["node-0: node-0", "node-1: node-1", "node-2: node-2"]
    assert "node-1: exited with status 1" in ran.stderr
    ran = terminal.runcrate("clusters", "exec", "loop", "--json", "--", "n=$(hostname); echo $n; exit $(( ${n#node-} * 3 ))")
    assert ran.returncode == 6, ran.stderr
    assert [(r["node"], r["exit_code"], r["stdout"]) for r in json.loads(ran.stdout)] == [
        ("node-0", 0, "node-0\n"), ("node-1", 3, "node-1\n"), ("node-2", 6, "node-2\n")]
    ran = terminal.runcrate("clusters", "exec", "loop", "--nodes", "node-2,node-0", "cat /etc/hostname")
    assert ran.returncode == 0 and sorted(ran.stdout.splitlines()) == ["node-0: node-0", "node-2: node-2"], ran.stderr
    ran = terminal.runcrate("clusters", "exec", "loop", "--nodes", "node-7", "hostname")
    assert ran.returncode == 2 and "no node node-7" in ran.stderr

    # cp: to the head's /shared (every node sees it), from a worker's own disk, with rsync and scp.
    (tmp_path / "weights.bin").write_bytes(os.urandom(300_000))
    copied = terminal.runcrate("clusters", "cp", "weights.bin", "loop:weights.bin")
    assert copied.returncode == 0, copied.stderr
    on_worker = on_node(real_machines, nodes[2], "sha256sum /shared/weights.bin").stdout.split()[0]
    assert on_worker == subprocess.run(["sha256sum", str(tmp_path / "weights.bin")], capture_output=True,
                                       text=True).stdout.split()[0]
    on_node(real_machines, nodes[1], "mkdir -p /tmp/out && echo 'loss 0.12' > /tmp/out/metrics.txt")
    (tmp_path / "back").mkdir()
    copied = terminal.runcrate("clusters", "cp", "loop:node-1:/tmp/out", "back")
    assert copied.returncode == 0, copied.stderr
    assert (tmp_path / "back" / "out" / "metrics.txt").read_text() == "loss 0.12\n"
    copied = terminal.runcrate("clusters", "cp", "--scp", "loop:node-2:/etc/hostname", "hostname-2")
    assert copied.returncode == 0 and (tmp_path / "hostname-2").read_text() == "node-2\n", copied.stderr

    # port-forward: an HTTP server on node-1's own loopback, reached from this computer's.
    on_node(real_machines, nodes[1], "mkdir -p /srv/www && echo tensorboard-here > /srv/www/index.html")
    on_node(real_machines, nodes[1], "setsid nohup python3 -m http.server --bind 127.0.0.1 --directory /srv/www 6006 "
                                     ">/dev/null 2>&1 </dev/null &")
    local = free_port("127.0.0.1")
    forward = subprocess.Popen([sys.executable, "-m", "runcrate_client", "clusters", "port-forward", "loop", "node-1",
                                f"{local}:6006"], env=terminal.env, cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        def page() -> str:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{local}/index.html", timeout=5) as answer:
                    return answer.read().decode()
            except OSError:
                return ""

        assert wait_for(page, timeout=90) == "tensorboard-here\n", forward.poll()
    finally:
        forward.send_signal(signal.SIGINT)
        out, err = forward.communicate(timeout=30)
    assert f"Forwarding http://127.0.0.1:{local} to port 6006 on node-1 of loop" in out, err
    assert forward.returncode == 0, err


def test_ssh_by_name_reaches_a_replaced_and_an_added_node_at_once_with_nothing_run_again(
    environment, real_machines, terminal
):
    cluster = ready_cluster(environment, real_machine_type(5), "hw", 3)
    written = terminal.runcrate("clusters", "ssh-config", "hw")
    assert written.returncode == 0, written.stderr

    before = terminal.ssh("hw-node-2", "hostname; cat /etc/ssh/ssh_host_*key.pub")
    assert before.returncode == 0, before.stderr
    assert before.stdout.splitlines()[0] == "node-2"

    # node-3 does not exist yet: the same Host pattern already covers it, and says so.
    early = terminal.ssh("hw-node-3", "hostname")
    assert early.returncode == 255 and "has no node node-3" in early.stderr

    replace_node(cluster, "node-2", actor="alice")
    deadline = time.monotonic() + 240
    while Node.objects.filter(cluster=cluster, released_at__isnull=True, replacing__isnull=False).exists():
        assert time.monotonic() < deadline, story(cluster)
        cluster = drive(cluster, SETTLED, timeout=2)
    new = cluster.nodes.get(index=2, released_at__isnull=True)
    assert new.state == Node.State.READY, story(cluster)

    after = terminal.ssh("hw-node-2", "hostname; cat /etc/ssh/ssh_host_*key.pub")
    assert after.returncode == 0, after.stderr
    assert after.stdout.splitlines()[0] == "node-2" and after.stdout != before.stdout, "the new machine answers"
    assert "IDENTIFICATION HAS CHANGED" not in after.stderr and "authenticity" not in after.stderr

    add_workers(cluster, 1, actor="alice")
    cluster = grow(cluster, timeout=180)
    assert cluster.nodes.get(index=3).state == Node.State.READY, story(cluster)
    added = terminal.ssh("hw-node-3", "hostname")
    assert added.returncode == 0 and added.stdout.strip() == "node-3", added.stderr
    # The CLI's own `ssh` takes a command after the cluster's name, as ssh does.
    shelled = terminal.runcrate("clusters", "ssh", "hw", "hostname")
    assert shelled.returncode == 0 and shelled.stdout.strip() == "node-0", shelled.stderr
    shelled = terminal.runcrate("clusters", "ssh", "hw", "node-3", "hostname")
    assert shelled.returncode == 0 and shelled.stdout.strip() == "node-3", shelled.stderr


def test_a_volume_saved_mid_run_is_read_back_on_a_new_cluster(environment, real_machines, terminal):
    volume = create_volume(environment=environment, name="ckpt", size_gb=1)
    machine_type = real_machine_type(4)
    first = ready_cluster(environment, machine_type, "first", 2, volume=volume)
    head = first.nodes.select_related("host").get(index=0)
    written = on_node(real_machines, head, "head -c 2500000 /dev/urandom > /shared/volume/step-100.pt && "
                                           "sha256sum /shared/volume/step-100.pt")
    checksum = written.stdout.split()[0]

    saved = terminal.runcrate("volumes", "sync", "ckpt")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert "Saved 2.5 MB to volume ckpt in" in saved.stdout
    events = list(first.events.values_list("event", "message"))
    assert [e for e, _ in events][-2:] == ["volume_sync_requested", "volume_synced"], events

    # The first cluster keeps running; a new one finds the checkpoint in its own volume folder.
    second = ready_cluster(environment, machine_type, "second", 2, volume=volume)
    new_head = second.nodes.select_related("host").get(index=0)
    read = on_node(real_machines, new_head, "sha256sum /shared/volume/step-100.pt")
    assert read.returncode == 0 and read.stdout.split()[0] == checksum, read.stderr

    # The sync at terminate leaves an event too.
    terminate_cluster(first, actor="alice")
    first = drive(first, SETTLED)
    assert first.events.filter(event="volume_synced", message__contains="as the cluster stopped").exists(), story(first)
    terminate_cluster(second, actor="alice")
    drive(second, SETTLED)


def test_sacct_on_a_worker_shows_an_array_jobs_tasks_with_their_state_and_time(environment, real_machines, terminal):
    ready_cluster(environment, real_machine_type(3), "acct", 3, software="slurm")
    written = terminal.runcrate("clusters", "ssh-config", "acct")
    assert written.returncode == 0, written.stderr

    # Four tasks; the last one fails.
    submitted = terminal.ssh("acct-node-0", "cd /tmp && sbatch --parsable --array=0-3 "
                                            "--wrap 'sleep 2; exit $(( SLURM_ARRAY_TASK_ID == 3 ))'")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()

    def finished() -> list[list[str]] | None:
        asked = terminal.ssh("acct-node-2", f"sacct -j {job} -X -n -P -o JobID,JobName,State,Elapsed,ExitCode")
        rows = [line.split("|") for line in asked.stdout.splitlines()]
        if len(rows) == 4 and all(row[2] in ("COMPLETED", "FAILED") for row in rows):
            return rows
        return None

    rows = wait_for(finished, timeout=120)
    assert rows, terminal.ssh("acct-node-2", f"sacct -j {job}; squeue").stdout
    assert [row[0] for row in rows] == [f"{job}_{i}" for i in range(4)]
    assert [(row[1], row[2], row[4]) for row in rows] == [("wrap", "COMPLETED", "0:0")] * 3 + [("wrap", "FAILED", "1:0")]
    assert all("00:00:02" <= row[3] < "00:01:00" for row in rows), rows

    # The line `clusters info` shows, run on node-1: the same history, and the product's own
    # readiness check named as such.
    info = terminal.runcrate("clusters", "info", "acct")
    assert info.returncode == 0, info.stderr
    line = next(text.strip().removeprefix("sacct: ") for text in info.stdout.splitlines()
                if text.strip().startswith("sacct: "))
    history = terminal.ssh("acct-node-1", line)
    assert history.returncode == 0, history.stderr
    rows = [text.split() for text in history.stdout.splitlines()[2:]]
    assert [row[:3] for row in rows] == [[row[0], "runcrate-readiness-check", "COMPLETED"] for row in rows[:1]] + [
        [f"{job}_{i}", "wrap", "COMPLETED" if i < 3 else "FAILED"] for i in range(4)], history.stdout


def test_a_workers_shared_is_the_heads_own_folder_coherent_both_ways_and_owned_by_each_nodes_root(
    environment, real_machines
):
    cluster = ready_cluster(environment, real_machine_type(3), "disk", 3)
    head, worker, other = cluster.nodes.select_related("host").order_by("index")

    # The very same file (device and inode) on every node: the head's own filesystem, not a
    # network copy of it.
    same = {node.name: on_node(real_machines, node, "stat -c '%d %i' /shared/hostfile").stdout for node in
            (head, worker, other)}
    assert len(set(same.values())) == 1, same
    assert on_node(real_machines, worker, "stat -f -c %T /shared").stdout.strip() == "ext2/ext3"

    # Written on a worker: read back at once on the head and the other worker, owned by root.
    written = on_node(real_machines, worker, "head -c 3000000 /dev/urandom > /shared/ckpt.bin && sha256sum /shared/ckpt.bin")
    for node in (head, other):
        read = on_node(real_machines, node, "sha256sum /shared/ckpt.bin; stat -c '%U %G' /shared/ckpt.bin")
        assert read.stdout.splitlines() == [written.stdout.strip(), "root root"], read.stdout + read.stderr
    # The head renames and gives a file to uid 1000: the workers see both at once.
    on_node(real_machines, head, "mv /shared/ckpt.bin /shared/step-1.bin && chown 1000:1000 /shared/step-1.bin")
    seen = on_node(real_machines, other, "ls /shared; stat -c '%u %g' /shared/step-1.bin")
    assert "ckpt.bin" not in seen.stdout and seen.stdout.splitlines()[-1] == "1000 1000", seen.stdout
    # A worker's root can remove what the head's root wrote, as on one machine.
    assert on_node(real_machines, worker, "rm /shared/step-1.bin /shared/hostfile.deepspeed").returncode == 0
    assert on_node(real_machines, head, "ls /shared/hostfile.deepspeed").returncode != 0


def test_the_ssh_config_is_one_host_pattern_resolved_when_ssh_connects(tmp_path):
    """Without nodes: what the Included file says to OpenSSH (`ssh -G` parses it as ssh would)."""
    from runcrate_client import sshconfig

    text = sshconfig.live_config_text({"id": 7, "name": "train", "environment": "default", "nodes": []},
                                      ["/venv/bin/python", "-m", "runcrate_client"])
    assert "Host train.default-node-? train.default-node-?? train-node-? train-node-??" in text
    config = tmp_path / "train.config"
    config.write_text(text)
    parsed = subprocess.run(["ssh", "-G", "-F", str(config), "train-node-42"], capture_output=True, text=True).stdout
    assert "proxycommand /venv/bin/python -m runcrate_client clusters _proxy 7 %n" in parsed
    assert "knownhostscommand /venv/bin/python -m runcrate_client clusters _known-hosts 7 %H" in parsed
    assert "stricthostkeychecking true" in parsed
