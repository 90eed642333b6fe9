"""The `ssh` provider: operators' own machines from the inventory."""

from __future__ import annotations

import pytest

from clusters.providers import BootState, get_provider
from clusters.providers.local.sandbox import Blackhole, find_sshd, start_endpoints
from clusters.providers.ssh import SSHPoolProvider
from clusters.services.create import create_cluster
from offers.models import Host
from tests.factories import MachineTypeFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pool_cluster(environment):
    machine_type = MachineTypeFactory(provider="ssh", kind="bare_metal")
    Host.objects.create(machine_type=machine_type, name="rack1-a", address="127.0.0.1", port=1, ssh_user="ops",
                        ssh_key_ref="/etc/runcrate/keys/rack1")
    Host.objects.create(machine_type=machine_type, name="rack1-b", address="127.0.0.1", port=1, ssh_user="ops",
                        ssh_key_ref="/etc/runcrate/keys/rack1")
    return create_cluster(environment=environment, name="byo", machine_type=machine_type, machine_count=2)


def test_it_reaches_each_host_as_the_inventory_says_on_its_real_root(pool_cluster):
    provider = get_provider("ssh")
    assert isinstance(provider, SSHPoolProvider)
    nodes = list(pool_cluster.nodes.select_related("host"))
    spec = provider.spec_for(pool_cluster, nodes)
    assert not spec.sandbox
    assert [(t.name, t.user, t.key_filename, t.root, t.private_ip) for t in spec.nodes] == [
        ("node-0", "ops", "/etc/runcrate/keys/rack1", "", "10.77.0.1"),
        ("node-1", "ops", "/etc/runcrate/keys/rack1", "", "10.77.0.2"),
    ]


def test_a_host_is_up_once_ssh_answers(pool_cluster, tmp_path):
    provider = get_provider("ssh")
    node = pool_cluster.nodes.select_related("host").first()
    with Blackhole() as silent:
        Host.objects.filter(pk=node.host_id).update(address=silent.host, port=silent.port)
        node.host.refresh_from_db()
        assert provider.boot_status(node).state is BootState.BOOTING, "a port without an SSH banner is not up"
    if find_sshd() is None:
        pytest.skip("OpenSSH sshd is not installed")
    with start_endpoints(1, tmp_path, kind="openssh") as endpoints:
        endpoint = endpoints.endpoints[0]
        Host.objects.filter(pk=node.host_id).update(address=endpoint.host, port=endpoint.port)
        node.host.refresh_from_db()
        report = provider.boot_status(node)
    assert report.state is BootState.UP and report.address == f"{endpoint.host}:{endpoint.port}"


def test_a_kubernetes_cluster_carries_the_operators_pins_to_its_machines(pool_cluster, settings):
    from clusters.models import Cluster

    settings.KUBERNETES_FLANNEL_VERSION, settings.KUBERNETES_FLANNEL_SHA256 = "v0.26.1", "a" * 64
    settings.KUBERNETES_DEVICE_PLUGIN_VERSION, settings.KUBERNETES_DEVICE_PLUGIN_SHA256 = "v0.16.2", "b" * 64
    provider = get_provider("ssh")
    assert isinstance(provider, SSHPoolProvider)
    nodes = list(pool_cluster.nodes.select_related("host"))
    assert "RUNCRATE_FLANNEL_SHA256" not in dict(provider.spec_for(pool_cluster, nodes).extra_env)  # software none
    Cluster.objects.filter(pk=pool_cluster.pk).update(software="kubernetes")
    pool_cluster.refresh_from_db()
    env = dict(provider.spec_for(pool_cluster, nodes).extra_env)
    assert (env["RUNCRATE_FLANNEL_VERSION"], env["RUNCRATE_FLANNEL_SHA256"]) == ("v0.26.1", "a" * 64)
    assert (env["RUNCRATE_DEVICE_PLUGIN_VERSION"], env["RUNCRATE_DEVICE_PLUGIN_SHA256"]) == ("v0.16.2", "b" * 64)


def test_a_checksum_that_is_not_one_is_refused_when_settings_load(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from config.env import env_sha256

    monkeypatch.setenv("KUBERNETES_FLANNEL_SHA256", "not-a-checksum")
    with pytest.raises(ImproperlyConfigured, match="64 hex digits"):
        env_sha256("KUBERNETES_FLANNEL_SHA256")
    monkeypatch.setenv("KUBERNETES_FLANNEL_SHA256", "AB" * 32)
    assert env_sha256("KUBERNETES_FLANNEL_SHA256") == "ab" * 32
