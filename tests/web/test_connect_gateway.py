from __future__ import annotations

import pytest

from clusters import connect
from clusters.services.create import create_cluster
from offers.models import Location
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db


def test_ssh_goes_through_the_sites_gateway_where_machines_have_no_public_address(environment):
    machine_type = machine_type_with_hosts(2)
    Location.objects.filter(pk=machine_type.location_id).update(gateway_host="gw.eu-north-1.runcrate.example")
    cluster = create_cluster(environment=environment, name="gw", machine_type=machine_type, machine_count=2)
    cluster.refresh_from_db()
    commands = [ep.ssh_command for ep in connect.endpoints(cluster)]
    assert all(c.startswith("ssh -J gw.eu-north-1.runcrate.example ") for c in commands)
    assert "ProxyJump gw.eu-north-1.runcrate.example" in connect.ssh_config(cluster)
    assert connect.hostfile(cluster) == "node-0 slots=8\nnode-1 slots=8\n"
    assert "--nnodes=2 --nproc-per-node=8" in connect.launch_lines(cluster)["torchrun"]
