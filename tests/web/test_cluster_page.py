"""A cluster's page: a failed cluster's way forward, cost so far, progress counts, plain words."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import SSHKey
from clusters.models import Cluster, Node, Reason, Status, Volume
from clusters.services.create import create_cluster
from clusters.services.progress import fail_cluster
from clusters.services.terminate import terminate_cluster
from tests.factories import LocationFactory, machine_type_with_hosts

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed(environment, machine_type, owner, workspace):
    key = SSHKey.objects.create(workspace=workspace, name="laptop", public_key="ssh-ed25519 AAAA", fingerprint="x")
    volume = Volume.objects.create(workspace=workspace, environment=environment, name="data")
    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=4, software="slurm",
        volume=volume, ssh_keys=[key], created_by=owner,
    )
    fail_cluster(cluster, Reason.BOOT_FAILED, "node-1 failed to start.", {"node-1": "did not power on"})
    return Cluster.objects.get(pk=cluster.pk)


def test_a_failed_cluster_shows_offers_that_can_start_it_now_same_location_first(member_client, failed, machine_type):
    elsewhere = machine_type_with_hosts(
        6, price_per_machine_hour=Decimal("1.00"), location=LocationFactory(code="eu-north-1", name="Helsinki")
    )
    too_small = machine_type_with_hosts(3, price_per_machine_hour=Decimal("0.50"))
    other_size = machine_type_with_hosts(6, gpus_per_machine=4)
    text = member_client.get(failed.get_absolute_url()).text
    assert 'data-testid="offers-now"' in text
    assert text.index(f'data-offer="{machine_type.pk}"') < text.index(f'data-offer="{elsewhere.pk}"')
    assert "$10.00/h" in text and "$4.00/h" in text  # whole-cluster prices, 4 machines
    assert f'data-offer="{too_small.pk}"' not in text and f'data-offer="{other_size.pk}"' not in text
    assert "Create train here" in text


def test_one_click_creates_the_same_cluster_on_the_picked_offer(member_client, failed, member):
    other = machine_type_with_hosts(6, location=LocationFactory(code="eu-north-1", name="Helsinki"))
    response = member_client.post(reverse("clusters:recreate", args=[failed.pk]), {"offer": other.pk})
    again = Cluster.objects.exclude(pk=failed.pk).get()
    assert response.status_code == 302 and response["Location"] == again.get_absolute_url()
    assert (again.name, again.machine_type, again.machine_count, again.software) == ("train", other, 4, "slurm")
    assert again.volume == failed.volume and list(again.ssh_keys.all()) == list(failed.ssh_keys.all())
    assert again.created_by == member and again.status == Status.PROVISIONING


def test_it_refuses_an_offer_of_another_gpu_size(member_client, failed):
    other = machine_type_with_hosts(6, gpus_per_machine=4)
    response = member_client.post(reverse("clusters:recreate", args=[failed.pk]), {"offer": other.pk}, follow=True)
    assert "same GPU and size" in response.text
    assert Cluster.objects.count() == 1


def test_an_outsider_cannot_recreate(outsider_client, failed, machine_type):
    assert outsider_client.post(reverse("clusters:recreate", args=[failed.pk]), {"offer": machine_type.pk}).status_code == 404
    assert Cluster.objects.count() == 1


def test_a_live_cluster_cannot_be_recreated(member_client, cluster, machine_type):
    response = member_client.post(reverse("clusters:recreate", args=[cluster.pk]), {"offer": machine_type.pk}, follow=True)
    assert "only a failed cluster is created again" in response.text
    assert Cluster.objects.count() == 1


def test_while_provisioning_it_counts_machines_up_and_joined_and_shows_the_deadline(member_client, cluster):
    Node.objects.filter(cluster=cluster, index__lt=3).update(state=Node.State.UP)
    Node.objects.filter(cluster=cluster, index=0).update(peers_reached_at=timezone.now(), step="any words")
    text = member_client.get(cluster.get_absolute_url()).text
    assert "3 of 4 machines up" in text and "1 of 4 joined" in text
    assert f'data-countdown-to="{cluster.deadline_at.isoformat()}"' in text


def test_a_running_cluster_shows_its_cost_so_far_rising_and_a_terminated_one_its_total(member_client, cluster):
    started = timezone.now() - dt.timedelta(hours=1)
    nodes = list(cluster.nodes.all())
    Cluster.objects.filter(pk=cluster.pk).update(status=Status.PROVISIONING)
    cluster.refresh_from_db()
    from billing import services as billing

    billing.start_usage(cluster, nodes, started)
    Cluster.objects.filter(pk=cluster.pk).update(status=Status.READY, billing_started_at=started)
    text = member_client.get(cluster.get_absolute_url()).text
    assert "Cost so far" in text and 'data-rate="10.0000"' in text
    assert ">$10.00</strong>" in text or ">$10.01</strong>" in text
    terminate_cluster(Cluster.objects.get(pk=cluster.pk))
    text = member_client.get(cluster.get_absolute_url()).text
    assert "Total cost" in text and 'data-rate="0"' in text


def test_steps_and_outcomes_read_in_a_customers_words(member_client, cluster, settings):
    from clusters.lifecycle import NodeOutput

    # As a node operation's output arrives: the operation, then its script's own marker.
    output = NodeOutput(cluster.pk, list(cluster.nodes.all()), interval=0)
    output("node-0", "install_software:sandbox-daemons", "starting the daemons")
    output.close()
    Node.objects.filter(cluster=cluster, index=0).update(
        detail=f"ssh server exited; see {settings.VAR_DIR}/local/ssh.log (exit status 3)"
    )
    text = member_client.get(cluster.get_absolute_url()).text
    assert "Installing the software" in text and "sandbox-daemons" not in text
    assert str(settings.VAR_DIR) not in text and "exit status" not in text


def test_nodes_are_explained_once_instead_of_a_terminate_button_per_row(member_client, cluster):
    text = member_client.get(cluster.get_absolute_url()).text
    assert "Terminate node" not in text
    assert text.count("one cannot be terminated on its own") == 1


def test_the_actions_anchor_the_degraded_email_links_to_exists(member_client, cluster):
    assert 'id="actions"' in member_client.get(cluster.get_absolute_url()).text


def test_a_failed_clusters_event_reads_as_sentences(failed):
    assert failed.events.get(event="failed").message.startswith("node-1 failed to start. Every machine was released")


def test_a_failed_cluster_does_not_promise_figures_once_it_is_ready(member_client, failed):
    text = member_client.get(failed.get_absolute_url()).text
    assert "they arrive once the cluster is ready" not in text
    assert "No figures: the cluster never started, so its machines never reported any." in text


def test_events_and_wipe_receipts_read_in_words_on_the_page(member_client, cluster):
    """The Events list names each event in words (the API keeps its key) and a wipe receipt
    says its time as the page says times, not an ISO stamp."""
    from clusters.services.wipe import record_wipe_receipts

    node = cluster.nodes.get(index=0)
    receipt = {"clean": True, "checked_at": "2026-12-06T03:20:35+00:00",
               "checks": [{"check": "processes", "clean": True, "detail": ""}]}
    record_wipe_receipts(cluster, [node], {node.host_id: receipt})
    page = member_client.get(cluster.get_absolute_url()).text
    assert ">Wipe receipt</span>" in page and ">wipe_receipt<" not in page
    assert "checked clean at 2026-12-06 03:20:35 UTC: processes." in page
    assert "T03:20:35+00:00" not in page
