from __future__ import annotations

import pytest

from clusters import connect
from clusters.models import Cluster
from clusters.services.create import create_cluster
from offers.models import Location
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db


def test_ssh_goes_through_the_sites_gateway_where_machines_have_no_public_address(environment):
    machine_type = machine_type_with_hosts(2)
    Location.objects.filter(pk=machine_type.location_id).update(gateway_host="gw.eu-north-1.runcrate.example")
    cluster = create_cluster(environment=environment, name="gw", machine_type=machine_type, machine_count=2)
    Cluster.objects.filter(pk=cluster.pk).update(image="pytorch")
    cluster.refresh_from_db()
    commands = [ep.ssh_command for ep in connect.endpoints(cluster)]
    assert all(c.startswith("ssh -J gw.eu-north-1.runcrate.example ") for c in commands)
    assert "ProxyJump gw.eu-north-1.runcrate.example" in connect.ssh_config(cluster)
    assert connect.hostfile(cluster) == "node-0 slots=8\nnode-1 slots=8\n"
    assert "--nnodes=2 --nproc-per-node=8" in connect.launch_lines(cluster)["torchrun"]


def test_launch_lines_show_only_what_the_nodes_have_and_containers_copy_the_program_to_every_node(environment):
    machine_type = machine_type_with_hosts(3, kind="container")
    cluster = create_cluster(environment=environment, name="c", machine_type=machine_type, machine_count=3, software="slurm")
    cluster.refresh_from_db()
    lines = {line.key: line for line in connect.launch_commands(cluster)}
    assert set(lines) == {"torchrun", "srun_torchrun", "mpirun", "sbatch_array", "sacct"}, "the default image is pytorch"
    # No /shared on containers: the line copies task.py from node-0's home to the other nodes.
    array = lines["sbatch_array"]
    assert "/shared" not in array.command and "task.py in ~ on node-0" in array.label
    assert array.command.startswith(
        "for h in $(tail -n +2 /etc/runcrate/hostfile | cut -d' ' -f1); do scp -q ~/task.py $h:; done && sbatch "
    )
    assert "--chdir=/root" in array.command


def test_the_launch_lines_follow_the_clusters_image_and_mpirun_maps_open_mpis_ranks(environment):
    assert connect.image_tools("pytorch") == {"torchrun"}
    assert connect.image_tools("base") == frozenset() and connect.image_tools("no-such-image") == frozenset()
    machine_type = machine_type_with_hosts(3)
    cluster = create_cluster(environment=environment, name="p", machine_type=machine_type, machine_count=3, software="slurm",
                             image="base")
    cluster.refresh_from_db()
    assert set(connect.launch_lines(cluster)) == {"mpirun", "sbatch_array", "sacct"}, "base ships no torchrun"
    Cluster.objects.filter(pk=cluster.pk).update(image="pytorch")
    cluster.refresh_from_db()
    lines = connect.launch_lines(cluster)
    assert set(lines) == {"torchrun", "mpirun", "sbatch_array", "srun_torchrun", "sacct"}, "no image here ships DeepSpeed"
    # The rank variables come from Open MPI's through the wrapper every node has; the caller's
    # PATH (an activated virtualenv) goes to every rank.
    assert lines["mpirun"].endswith(
        "-x PATH -x MASTER_ADDR=node-0 -x MASTER_PORT=29500 mpi-rank-env python train.py"
    ), lines["mpirun"]
