from __future__ import annotations

from pathlib import Path

import pytest
from django.urls import reverse

from clusters.models import Volume
from clusters.services.create import create_cluster
from clusters.services.terminate import finish_termination, terminate_cluster
from clusters.services.volumes import create_volume

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def volumes_dir(settings, tmp_path):
    settings.VOLUMES_DIR = str(tmp_path / "volumes")


def test_a_member_creates_a_volume_and_can_attach_it(client, developer, environment):
    client.force_login(developer)
    response = client.post("/clusters/volumes/", {"name": "datasets", "size_gb": 500})
    assert response.status_code == 302
    volume = Volume.objects.get(environment=environment, name="datasets")
    assert Path(volume.source_path).is_dir()
    assert b"datasets" in client.get("/clusters/new/").content


def test_bad_input_shows_field_errors_and_creates_nothing(client, owner, environment):
    client.force_login(owner)
    response = client.post("/clusters/volumes/", {"name": "Bad Name!", "size_gb": 0})
    assert response.status_code == 200
    assert b"field-error" in response.content
    assert not Volume.objects.exists()


def test_a_volume_attached_to_a_live_cluster_cannot_be_deleted(client, owner, environment, machine_type):
    client.force_login(owner)
    volume = create_volume(environment=environment, name="data", size_gb=10)
    create_cluster(environment=environment, name="c", machine_type=machine_type, machine_count=2, volume=volume)
    client.post(f"/clusters/volumes/{volume.pk}/delete/")
    assert Volume.objects.filter(pk=volume.pk).exists()


def test_another_workspaces_volume_is_404(client, outsider, environment):
    volume = create_volume(environment=environment, name="secret-corpus", size_gb=10)
    client.force_login(outsider)
    assert client.post(f"/clusters/volumes/{volume.pk}/delete/").status_code == 404
    assert Volume.objects.filter(pk=volume.pk).exists()
    assert b"secret-corpus" not in client.get("/clusters/volumes/").content


def test_a_volume_whose_clusters_have_ended_can_be_deleted(client, owner, environment, machine_type):
    client.force_login(owner)
    volume = create_volume(environment=environment, name="data", size_gb=10)
    cluster = create_cluster(
        environment=environment, name="c", machine_type=machine_type, machine_count=2, volume=volume
    )
    terminate_cluster(cluster)
    finish_termination(cluster)
    response = client.post(f"/clusters/volumes/{volume.pk}/delete/")
    assert response.status_code == 302
    assert not Volume.objects.filter(pk=volume.pk).exists()


def test_the_list_names_the_live_clusters_using_a_volume(member_client, environment, machine_type, workspace):
    from clusters.models import Volume
    from clusters.services.create import create_cluster

    volume = Volume.objects.create(workspace=workspace, environment=environment, name="datasets")
    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=2, volume=volume
    )
    text = member_client.get(reverse("clusters:volumes")).text
    assert f'<a href="{cluster.get_absolute_url()}">train</a>' in text


@pytest.mark.django_db(transaction=True)
def test_save_to_volume_now_is_on_a_running_clusters_page_and_asks_for_a_save(
    client, developer, outsider, environment, machine_type
):
    volume = create_volume(environment=environment, name="ckpt", size_gb=10)
    cluster = create_cluster(environment=environment, name="ckpt-run", machine_type=machine_type, machine_count=2,
                             volume=volume)
    cluster.refresh_from_db()
    assert cluster.status == "ready"
    url = reverse("clusters:sync_volume", args=[cluster.pk])
    client.force_login(outsider)
    assert client.post(url).status_code == 404
    assert not cluster.events.filter(event="volume_sync_requested").exists()
    client.force_login(developer)
    page = client.get(cluster.get_absolute_url()).content.decode()
    assert "Save to volume now" in page and url in page
    assert client.post(url).status_code == 302
    assert cluster.events.filter(event="volume_sync_requested", actor="dave").exists()
    # The simulated provider has no machine to copy from: the event says so, with no figure made up.
    assert cluster.events.filter(event="volume_sync_failed").exists()
