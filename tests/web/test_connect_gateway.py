from __future__ import annotations

import pytest

from clusters import connect
from clusters.services.create import create_cluster
from offers.models import Location
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db


def test_ssh_goes_through_the_sites_gateway_where_machines_have_no_public_address(environment, settings):
    settings.NODE_IMAGE_TOOLS = ["torchrun"]
    machine_type = machine_type_with_hosts(2)
    Location.objects.filter(pk=machine_type.location_id).update(gateway_host="gw.eu-north-1.runcrate.example")
    cluster = create_cluster(environment=environment, name="gw", machine_type=machine_type, machine_count=2)
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
    assert set(lines) == {"mpirun", "sbatch_array", "sacct"}
    # No /shared on containers: the line copies task.py from node-0's home to the other nodes.
    array = lines["sbatch_array"]
    assert "/shared" not in array.command and "task.py in ~ on node-0" in array.label
    assert array.command.startswith(
        "for h in $(tail -n +2 /etc/runcrate/hostfile | cut -d' ' -f1); do scp -q ~/task.py $h:; done && sbatch "
    )
    assert "--chdir=/root" in array.command
