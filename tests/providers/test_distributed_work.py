"""Distributed work on real nodes, as a customer does it: SSH by name between nodes, the job
environment in every shell, Slurm sized to the machine, and every launch line the Connect card
shows, run exactly as shown (torch, DeepSpeed and nccl-tests cannot be installed here: tiny
stand-ins in tests/providers/data take the same command line and variables).

Everything runs over the customer's own SSH session to node-0 (the Connect card's line, their
key, the host keys the API gives), never by reading back a file the code wrote.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from clusters import connect
from clusters.models import Node, Status
from clusters.providers.local import realnodes
from clusters.services.create import create_cluster
from clusters.services.replace import replace_node
from clusters.services.workers import add_workers
from offers.models import Host
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
DATA = Path(__file__).parent / "data"
STANDINS = {"torchrun": "standin_torchrun.py", "deepspeed": "standin_deepspeed.py",
            "all_reduce_perf": "standin_all_reduce_perf.py"}


def known_hosts_ssh(tmp_path: Path, cluster, key: str, node: str, command: str) -> subprocess.CompletedProcess:
    """`ssh <cluster>-<node> command` as the customer's terminal runs it after `runcrate
    clusters ssh-config`: the API's ssh_config and known_hosts, host keys checked strictly."""
    from runcrate_client import sshconfig

    cluster.refresh_from_db()
    written = sshconfig.write_cluster_files(
        cluster.name, connect.ssh_config(cluster), connect.known_hosts(cluster), home=tmp_path / "home"
    )
    options = ["-F", str(written.config), "-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
               "-o", "ConnectTimeout=10"]
    with terminal_stdin() as stdin:
        return subprocess.run(["ssh", *options, f"{cluster.name}-{node}", command],
                              capture_output=True, text=True, timeout=180, stdin=stdin)


def install_standins(real_machines, nodes: list[Node]) -> None:
    for node in nodes:
        for name, source in STANDINS.items():
            text = (DATA / source).read_text()
            on_node(real_machines, node, f"cat >/usr/local/bin/{name} <<'EOF'\n{text}EOF\nchmod 755 /usr/local/bin/{name}")


def test_nodes_reach_each_other_by_name_every_shell_has_the_environment_and_every_launch_line_runs(
    environment, owner, real_machines, tmp_path, settings
):
    from accounts.services import add_ssh_key

    key, public = customer_key(tmp_path, "alice")
    ssh_key = add_ssh_key(workspace=environment.workspace, name="laptop", created_by=owner, public_key=public)
    machine_type = real_machine_type(5)
    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=3, software="slurm",
        ssh_keys=[ssh_key],
    )
    cluster = drive(cluster, SETTLED, timeout=150)
    assert cluster.status == Status.READY, story(cluster)

    def on_head(command: str) -> subprocess.CompletedProcess:
        return known_hosts_ssh(tmp_path, cluster, key, "node-0", command)

    # SSH by name from node-0, with no prompt: one node, a loop over the hostfile, mpirun.
    session = on_head("ssh node-2 hostname && for h in $(cut -d' ' -f1 /shared/hostfile); do ssh $h hostname; done "
                      "&& ssh 10.77.0.2 hostname")
    assert session.returncode == 0, session.stderr
    assert session.stdout.split() == ["node-2", "node-0", "node-1", "node-2", "node-1"]
    session = on_head("mpirun -np 3 --hostfile /shared/hostfile hostname")
    assert session.returncode == 0, session.stdout + session.stderr
    assert sorted(session.stdout.split()) == ["node-0", "node-1", "node-2"]

    # The environment in a non-interactive `ssh node cmd`, a login shell and an interactive one.
    session = on_head("ssh node-2 'echo $NODE_RANK $NNODES $MASTER_ADDR $OMPI_MCA_btl_tcp_if_include' && "
                      "bash -lc 'echo $NODE_RANK $WORLD_SIZE' && bash -ic 'echo $NODE_NAME $NCCL_SOCKET_IFNAME' 2>/dev/null")
    assert session.returncode == 0, session.stderr
    assert session.stdout.splitlines() == ["2 3 10.77.0.1 wg0", "0 3", "node-0 wg0"]

    # Slurm knows the machine: two tasks per node, memory asked for, each task its own rank.
    session = on_head("srun -N3 --ntasks-per-node=2 --mem=256M hostname | sort | uniq -c | awk '{print $1, $2}'")
    assert session.returncode == 0, session.stderr
    assert session.stdout.splitlines() == ["2 node-0", "2 node-1", "2 node-2"]
    session = on_head("srun -N3 bash -c 'echo $SLURMD_NODENAME $NODE_RANK' | sort")
    assert session.stdout.splitlines() == ["node-0 0", "node-1 1", "node-2 2"], session.stderr
    cpus = on_node(real_machines, cluster.nodes.get(index=0), "nproc").stdout.strip()
    session = on_head("scontrol show node node-1 | grep -o 'CPUTot=[0-9]*'")
    assert session.stdout.splitlines()[0] == f"CPUTot={cpus}", session.stdout
    # slurmctld hands finished jobs to slurmdbd in the background, within seconds.
    accounted = wait_for(lambda: "hostname" in on_head("sacct -X -n -o JobName%30").stdout.split(), timeout=30)
    assert accounted, on_head("sacct -X").stdout

    # Every launch line, exactly as the Connect card shows it, pasted into node-0's shell in the
    # home directory: the programs where the labels say (/shared), nothing else arranged.
    nodes = list(cluster.nodes.select_related("host").filter(released_at__isnull=True).order_by("index"))
    launch = connect.launch_commands(cluster)
    assert {line.key: "train.py in /shared" in line.label or "task.py in /shared" in line.label for line in launch} == {
        "mpirun": True, "sbatch_array": True, "sacct": False,
    }, "only what the nodes have: no torchrun, DeepSpeed or nccl-tests on these images"
    on_node(real_machines, nodes[0], f"cat >/shared/train.py <<'EOF'\n{(DATA / 'standin_train.py').read_text()}EOF\n"
                                     f"cat >/shared/task.py <<'EOF'\n{(DATA / 'standin_task.py').read_text()}EOF\n")
    lines = connect.launch_lines(cluster)
    assert on_head("pwd").stdout.strip() == "/root"

    session = on_head(lines["mpirun"])
    assert session.returncode == 0, session.stdout + session.stderr
    assert session.stdout.count("sum=3") == 3 and "NCCL_SOCKET_IFNAME=wg0" in session.stdout

    session = on_head(lines["sbatch_array"])
    job = re.search(r"Submitted batch job (\d+)", session.stdout)
    assert job, session.stdout + session.stderr
    outputs = wait_for(lambda: on_head(f"cat /shared/logs/{job[1]}_*.out 2>/dev/null | wc -l").stdout.strip() == "12",
                       timeout=90)
    assert outputs, on_head(f"squeue; ls /shared/logs; cat /shared/logs/{job[1]}_*.out").stdout
    ran_on = on_head(f"cat /shared/logs/{job[1]}_*.out").stdout
    assert {f"on node-{i} NODE_RANK={i}" for i in range(3)} <= {line.split(" ", 2)[2] for line in ran_on.splitlines()}
    accounted = wait_for(lambda: len(re.findall(rf"\b{job[1]}_\d+ +wrap +COMPLETED ", on_head(lines["sacct"]).stdout)) == 12,
                         timeout=60)
    assert accounted, on_head(lines["sacct"]).stdout

    # An image that ships the launchers (stand-ins here: the same command line and variables)
    # shows their lines too, and they run as pasted from the home directory as well.
    settings.NODE_IMAGE_TOOLS = ["torchrun", "deepspeed", "all_reduce_perf"]
    install_standins(real_machines, nodes)
    lines = connect.launch_lines(cluster)
    assert set(lines) == {"torchrun", "mpirun", "deepspeed", "nccl", "sbatch_array", "srun_torchrun", "sacct"}

    session = on_head(lines["nccl"])
    assert session.returncode == 0 and "# Avg bus bandwidth" in session.stdout, session.stderr

    session = on_head(lines["deepspeed"])
    assert session.returncode == 0 and "gathered [0, 1, 2]" in session.stdout, session.stdout + session.stderr

    every_node = " ".join(f"ssh {n.name} {_quote(lines['torchrun'])} &" for n in nodes)
    session = on_head(f"{every_node} wait")
    assert "gathered [0, 1, 2]" in session.stdout, session.stdout + session.stderr
    assert session.stdout.count("reported to rank 0") == 2

    session = on_head(lines["srun_torchrun"])
    assert session.returncode == 0 and "gathered [0, 1, 2]" in session.stdout, session.stdout + session.stderr

    # A worker added: everyone knows it by name at once, it knows everyone.
    add_workers(cluster, 1, actor="alice")
    cluster = grow(cluster, timeout=150)
    assert cluster.status == Status.READY and cluster.nodes.get(index=3).state == Node.State.READY, story(cluster)
    session = on_head("ssh node-3 'hostname; echo $NODE_RANK $NNODES; ssh node-1 hostname'")
    assert session.stdout.split() == ["node-3", "3", "4", "node-1"], session.stderr

    # node-2 replaced while a job runs on node-1: the job completes; node-2 is drained first.
    on_head("sbatch -w node-1 -J untouched --output=/shared/logs/untouched.out --wrap 'sleep 25; echo done'")
    assert wait_for(lambda: "untouched" in on_head("squeue -h -t R -o %j").stdout, timeout=30)
    doomed = on_head("sbatch -w node-2 -J doomed --output=/dev/null --wrap 'sleep 600'").stdout.split()[-1]
    assert wait_for(lambda: "doomed" in on_head("squeue -h -t R -o %j").stdout, timeout=30)
    old = cluster.nodes.select_related("host").get(index=2, released_at__isnull=True)
    old_key = old.host_key
    # The new machine takes a while to boot: the old one is drained, and still runs, meanwhile.
    Host.objects.filter(state=Host.State.FREE).update(boot_seconds=12)
    replace_node(cluster, "node-2", actor="alice")
    cluster = drive(cluster, SETTLED, timeout=2)
    assert on_head("sinfo -h -n node-2 -o %T").stdout.strip() == "draining", story(cluster)
    assert on_head("srun -N1 -w node-2 --immediate=5 hostname").returncode != 0, "no new job lands on node-2"
    assert "doomed" in on_head("squeue -h -t R -o %j").stdout, "what runs there keeps running"
    assert (f"node-2 takes no new Slurm jobs while its new machine comes up. These jobs run on it and end when the "
            f"new machine takes over: {doomed} doomed.") in story(cluster)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and cluster.nodes.filter(index=2, released_at__isnull=True).count() > 1:
        cluster = drive(cluster, SETTLED, timeout=2)
        time.sleep(0.5)
    swapped = list(cluster.nodes.filter(index=2, released_at__isnull=True))
    assert len(swapped) == 1, story(cluster)
    new = swapped[0]
    assert new.pk != old.pk and new.state == Node.State.READY, story(cluster)
    assert new.host_key and new.host_key != old_key
    assert wait_for(lambda: "done" in on_head("cat /shared/logs/untouched.out 2>/dev/null").stdout, timeout=60)
    session = on_head("ssh node-2 'hostname; echo $NODE_RANK' && mpirun -np 4 --hostfile /shared/hostfile hostname | sort "
                      "&& srun -N4 hostname | sort")
    assert session.returncode == 0, session.stderr
    if session.stdout.split() != ["node-2", "2", *[f"node-{i}" for i in range(4)] * 2]:
        logs = on_head("tail -n 40 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log").stdout
        pytest.fail(f"{session.stdout}\n{session.stderr}\nthe head's Slurm logs:\n{logs}")
    # The customer's terminal trusts the new machine under the node's name (the refreshed known_hosts).
    assert known_hosts_ssh(tmp_path, cluster, key, "node-2", "hostname").stdout.strip() == "node-2"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
