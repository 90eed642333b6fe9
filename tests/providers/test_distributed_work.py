"""Distributed work on real nodes, as a customer does it: SSH by name between nodes, the job
environment in every shell, Slurm sized to the machine, and every launch line the Connect card
shows, run exactly as shown: on the `base` image with a program that all-reduces with mpi4py
(tests/providers/data/mpi_train.py), on the `pytorch` image a real DDP all-reduce with the
image's own PyTorch (gloo on the CPU), and `ray job submit` on a Ray cluster.

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
from clusters.models import Cluster, Node, Status
from clusters.providers.local import realnodes
from clusters.services.create import create_cluster
from clusters.services.replace import replace_node
from clusters.services.workers import add_workers
from offers import lab
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
# A real DDP step: every rank a different batch, DDP's backward all-reduces (averages) the
# gradients over gloo, then an explicit all-reduce of the ranks. With N ranks the averaged
# gradient of each weight is 2 * (1 + ... + N) / N = N + 1 and the ranks sum to N(N-1)/2.
DDP_TRAIN = """\
import os, socket
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
model(torch.full((2, 4), float(rank + 1))).sum().backward()
ranks = torch.tensor([float(rank)])
dist.all_reduce(ranks)
print(f"ddp rank {rank}/{world} local {os.environ['LOCAL_RANK']} on {socket.gethostname()} "
      f"grad={model.module.weight.grad[0, 0].item():.1f} ranks={int(ranks.item())} torch={torch.__version__}", flush=True)
dist.barrier()  # no rank tears gloo down while a peer still talks to it
dist.destroy_process_group()
"""


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


@pytest.fixture
def pytorch_image(monkeypatch):
    """Clusters created in the test boot from the `pytorch` image (the image a customer picks)."""
    import sys

    from clusters.providers.local import images

    images.ensure("pytorch", say=lambda line: print(line, file=sys.stderr, flush=True))  # `make images` built it
    monkeypatch.setattr(Cluster._meta.get_field("image"), "default", "pytorch")


def ddp_ranks(output: str) -> list[tuple[str, str, str]]:
    """(rank/world, host, result) of each rank's line of DDP_TRAIN."""
    return sorted(re.findall(r"ddp rank (\d+/\d+) local 0 on (node-\d+) (grad=\S+ ranks=\S+)", output))


def test_nodes_reach_each_other_by_name_every_shell_has_the_environment_and_every_launch_line_runs(
    environment, owner, real_machines, tmp_path, settings
):
    from accounts.services import add_ssh_key

    key, public = customer_key(tmp_path, "alice")
    ssh_key = add_ssh_key(workspace=environment.workspace, name="laptop", created_by=owner, public_key=public)
    machine_type = real_machine_type(5)
    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=3, software="slurm",
        ssh_keys=[ssh_key], image="base",
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
    }, "only what the nodes have: no torchrun, DeepSpeed or nccl-tests on the base image"
    on_node(real_machines, nodes[0], f"cat >/shared/train.py <<'EOF'\n{(DATA / 'mpi_train.py').read_text()}EOF\n"
                                     f"cat >/shared/task.py <<'EOF'\n{(DATA / 'standin_task.py').read_text()}EOF\n")
    lines = connect.launch_lines(cluster)
    assert on_head("pwd").stdout.strip() == "/root"

    session = on_head(lines["mpirun"])
    assert session.returncode == 0, session.stdout + session.stderr
    assert session.stdout.count("sum=3") == 3 and "NCCL_SOCKET_IFNAME=wg0" in session.stdout
    # Each rank has its Open MPI rank as RANK (mpi-rank-env), as a PyTorch program reads it.
    assert sorted(re.findall(r"mpi rank (\d)/3 .* RANK=(\d) WORLD_SIZE=3", session.stdout)) == [(r, r) for r in "012"]

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
    lab.inject(Host.objects.filter(state=Host.State.FREE), boot_seconds=12)
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


def test_a_pytorch_cluster_runs_real_ddp_from_the_connect_cards_torchrun_and_mpirun_lines_and_mpi4py_under_srun(
    environment, owner, real_machines, tmp_path, pytorch_image
):
    from accounts.services import add_ssh_key

    key, public = customer_key(tmp_path, "alice")
    ssh_key = add_ssh_key(workspace=environment.workspace, name="laptop", created_by=owner, public_key=public)
    cluster = create_cluster(
        environment=environment, name="ddp", machine_type=real_machine_type(3), machine_count=3, software="slurm",
        ssh_keys=[ssh_key], image="pytorch",
    )
    cluster = drive(cluster, SETTLED, timeout=150)
    assert cluster.status == Status.READY and cluster.image == "pytorch", story(cluster)

    def on_head(command: str) -> subprocess.CompletedProcess:
        return known_hosts_ssh(tmp_path, cluster, key, "node-0", command)

    # PyTorch is the system Python's, for root, with torchrun on PATH, on every node.
    session = on_head("for h in node-0 node-1 node-2; do ssh $h 'python3 -c \"import torch; print(torch.__version__)\" "
                      "&& command -v torchrun'; done")
    assert session.returncode == 0, session.stderr
    assert session.stdout.split() == ["2.13.0+cpu", "/usr/local/bin/torchrun"] * 3

    # The card shows what this image runs: torchrun's lines, no DeepSpeed (the image has none).
    launch = connect.launch_lines(cluster)
    assert set(launch) == {"torchrun", "mpirun", "sbatch_array", "srun_torchrun", "sacct"}
    nodes = list(cluster.nodes.select_related("host").filter(released_at__isnull=True).order_by("index"))
    on_node(real_machines, nodes[0], f"cat >/shared/train.py <<'EOF'\n{DDP_TRAIN}EOF\n")
    every_rank = [(f"{rank}/3", f"node-{rank}", "grad=4.0 ranks=3") for rank in range(3)]

    # torchrun: the same line pasted on every node (here from node-0's shell over ssh).
    every_node = " ".join(f"ssh {n.name} {_quote(launch['torchrun'])} &" for n in nodes)
    session = on_head(f"{every_node} wait")
    assert ddp_ranks(session.stdout) == every_rank, session.stdout + session.stderr

    # mpirun from node-0: Open MPI's ranks become RANK/LOCAL_RANK/WORLD_SIZE (mpi-rank-env).
    session = on_head(launch["mpirun"])
    assert session.returncode == 0, session.stdout + session.stderr
    assert ddp_ranks(session.stdout) == every_rank, session.stdout + session.stderr

    # Slurm's torchrun template, and MPI programs under srun with PMIx.
    session = on_head(launch["srun_torchrun"])
    assert session.returncode == 0, session.stdout + session.stderr
    assert ddp_ranks(session.stdout) == every_rank, session.stdout + session.stderr
    session = on_head("srun -N3 --ntasks-per-node=1 --mpi=pmix python3 -c 'from mpi4py import MPI; c = MPI.COMM_WORLD; "
                      "print(c.Get_rank(), c.Get_size(), MPI.Get_processor_name(), c.allreduce(c.Get_rank()))'")
    assert session.returncode == 0, session.stdout + session.stderr
    assert sorted(session.stdout.splitlines()) == [f"{rank} 3 node-{rank} 3" for rank in range(3)]


def test_ray_job_submit_runs_a_job_on_a_ray_cluster_from_the_connect_cards_line(environment, owner, real_machines, tmp_path):
    from accounts.services import add_ssh_key

    key, public = customer_key(tmp_path, "alice")
    ssh_key = add_ssh_key(workspace=environment.workspace, name="laptop", created_by=owner, public_key=public)
    cluster = create_cluster(
        environment=environment, name="tune", machine_type=real_machine_type(2), machine_count=2, software="ray",
        ssh_keys=[ssh_key],
    )
    cluster = drive(cluster, SETTLED, timeout=150)
    assert cluster.status == Status.READY, story(cluster)
    launch = connect.launch_lines(cluster)
    node = cluster.nodes.select_related("host").get(index=0)
    job = ("import ray, socket\nray.init()\n@ray.remote\ndef where():\n    return socket.gethostname()\n"
           "print('ray job ran on', sorted({h for h in ray.get([where.remote() for _ in range(40)])}), "
           "int(ray.cluster_resources()['CPU']))\n")
    on_node(real_machines, node, f"cat >/shared/job.py <<'EOF'\n{job}EOF\n")
    session = known_hosts_ssh(tmp_path, cluster, key, "node-0", launch["ray_submit"])
    assert session.returncode == 0, session.stdout + session.stderr
    assert re.search(r"ray job ran on \['node-[01]'.*\] \d+", session.stdout), session.stdout
    assert "succeeded" in session.stdout, session.stdout


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
