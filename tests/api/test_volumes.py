from __future__ import annotations

from pathlib import Path

import pytest

from clusters.models import Volume
from tests.api.conftest import error_of

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def volumes_dir(settings, tmp_path):
    settings.VOLUMES_DIR = str(tmp_path / "volumes")


@pytest.mark.django_db(transaction=True)
def test_a_volume_is_created_listed_attached_and_deleted(api, environment, machine_type):
    status, body = api.post("/volumes", {"name": "corpus", "size_gb": 200})
    assert status == 201 and body["data"]["name"] == "corpus" and body["data"]["size_gb"] == 200
    volume_id = body["data"]["id"]
    status, body = api.get("/volumes")
    assert status == 200 and [v["id"] for v in body["data"]] == [volume_id] and body["meta"]["total"] == 1
    status, body = api.post("/clusters", {"name": "c", "offer_id": machine_type.pk, "machines": 2, "volume_id": volume_id})
    assert status == 201
    status, body = api.delete(f"/volumes/{volume_id}")
    assert status == 409 and error_of(body)["code"] == "volume_in_use"
    cluster_id = Volume.objects.get(pk=volume_id).clusters.get().pk
    assert api.delete(f"/clusters/{cluster_id}")[0] == 202
    status, body = api.delete(f"/volumes/{volume_id}")
    assert status == 200 and not Volume.objects.filter(pk=volume_id).exists()


def test_bad_volume_input_answers_400_per_field(api):
    status, body = api.post("/volumes", {"name": "Bad Name", "size_gb": 0})
    assert status == 400 and "size_gb" in error_of(body)["details"]
    status, body = api.post("/volumes", {"name": "Bad Name", "size_gb": 5})
    assert status == 400 and "name" in error_of(body)["details"]
    assert not Volume.objects.exists()


def test_another_workspaces_volume_answers_404(api, outsider_api):
    _, body = api.post("/volumes", {"name": "mine", "size_gb": 5})
    status, _ = outsider_api.delete(f"/volumes/{body['data']['id']}")
    assert status == 404
    assert outsider_api.get("/volumes")[1]["data"] == []


@pytest.mark.django_db(transaction=True)
def test_deleting_a_volume_deletes_its_data_and_a_new_one_of_that_name_starts_empty(api):
    status, body = api.post("/volumes", {"name": "corpus", "size_gb": 10})
    first = Volume.objects.get(pk=body["data"]["id"])
    (Path(first.source_path) / "secret.txt").write_text("weights\n")
    assert api.delete(f"/volumes/{first.pk}")[0] == 200
    assert not Path(first.source_path).exists()
    status, body = api.post("/volumes", {"name": "corpus", "size_gb": 10})
    second = Volume.objects.get(pk=body["data"]["id"])
    assert second.source_path != first.source_path and list(Path(second.source_path).iterdir()) == []


@pytest.mark.django_db(transaction=True)
def test_a_volume_save_ends_in_an_event_and_is_refused_without_a_volume_or_for_another_workspace(
    api, outsider_api, machine_type
):
    _, body = api.post("/volumes", {"name": "ckpt", "size_gb": 5})
    _, with_volume = api.post("/clusters", {"name": "a", "offer_id": machine_type.pk, "machines": 2,
                                            "volume_id": body["data"]["id"]})
    _, without = api.post("/clusters", {"name": "b", "offer_id": machine_type.pk, "machines": 2})
    status, refused = api.post(f"/clusters/{without['data']['id']}/volume-sync", {})
    assert status == 409 and error_of(refused)["code"] == "no_volume"
    assert outsider_api.post(f"/clusters/{with_volume['data']['id']}/volume-sync", {})[0] == 404

    cluster_id = with_volume["data"]["id"]
    status, answered = api.post(f"/clusters/{cluster_id}/volume-sync", {})
    assert status == 202 and answered["data"]["id"] == cluster_id
    _, events = api.get(f"/clusters/{cluster_id}/events", limit=100)
    # The simulated provider has no machine to copy from: it says so, and makes no figure up.
    assert [e["event"] for e in events["data"] if e["event"].startswith("volume_")] == [
        "volume_sync_requested", "volume_sync_failed"]
    assert any("no machines to copy a volume from" in e["message"] for e in events["data"])
