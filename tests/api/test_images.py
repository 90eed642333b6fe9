"""The machine image is a product fact on the API: each offer lists the images it can start with
their facts, a create and a plan take `image` (the offer's default when left out) and refuse
one the offer cannot start with a field error, and the cluster object says which it boots."""

from __future__ import annotations

import pytest

from clusters.models import Cluster, Node
from offers.models import Host
from tests.api.conftest import error_of
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db


def body(machine_type, **overrides) -> dict:
    return {"name": "train", "offer_id": machine_type.pk, "machines": 2, "software": "none", **overrides}


def test_each_offer_lists_the_images_it_can_start_with_their_facts(api, machine_type):
    status, answer = api.get("/cluster-offers", machines=2)
    assert status == 200
    offer = next(o for o in answer["data"] if o["id"] == machine_type.pk)
    images = {image["name"]: image for image in offer["images"]}
    assert set(images) == {"base", "pytorch"}
    assert offer["default_image"] == "pytorch"
    pytorch = images["pytorch"]
    assert pytorch["os"].startswith("Debian 12") and pytorch["python"].startswith("3.")
    assert pytorch["pytorch"] and pytorch["cuda"] is None  # simulated machines have no GPUs
    assert images["base"]["pytorch"] is None
    assert "PyTorch" in pytorch["summary"] and "PyTorch" not in images["base"]["summary"]


def test_a_create_without_an_image_boots_the_offers_default_and_the_cluster_says_so(api, machine_type):
    status, answer = api.post("/clusters", body(machine_type))
    assert status == 201, answer
    assert answer["data"]["image"] == "pytorch"
    assert Cluster.objects.get().image == "pytorch"
    listed = api.get("/clusters")[1]["data"]
    assert [c["image"] for c in listed] == ["pytorch"]
    assert api.get(f"/clusters/{answer['data']['id']}")[1]["data"]["image"] == "pytorch"


def test_a_create_names_the_image(api, machine_type):
    status, answer = api.post("/clusters", body(machine_type, image="Base"))
    assert status == 201, answer
    assert answer["data"]["image"] == "base"
    assert Cluster.objects.get().image == "base"


@pytest.mark.parametrize("image", ["windows-11", "pytorch-cuda", "x" * 33])
def test_an_image_the_offer_cannot_start_is_400_on_image_and_creates_nothing(api, machine_type, image):
    status, answer = api.post("/clusters", body(machine_type, image=image))
    assert status == 400, answer
    assert "image" in error_of(answer)["details"]
    assert not Cluster.objects.exists() and not Node.objects.exists()
    assert not Host.objects.filter(state=Host.State.RESERVED).exists()


def test_the_image_refusal_names_what_the_offer_can_start(api, machine_type):
    status, answer = api.post("/clusters", body(machine_type, image="windows-11"))
    assert status == 400
    assert error_of(answer)["code"] == "image_unavailable"
    assert error_of(answer)["details"]["image"] == ["This offer cannot start the image 'windows-11'. Pick one of: base, pytorch."]


def test_the_plan_checks_the_image_and_shows_the_one_a_create_would_boot(api, machine_type):
    status, answer = api.post("/clusters/plan", body(machine_type))
    assert status == 200
    plan = answer["data"]
    assert plan["can_create"] is True and plan["image"] == "pytorch"
    assert [image["name"] for image in plan["images"]] == ["base", "pytorch"]

    plan = api.post("/clusters/plan", body(machine_type, image="base"))[1]["data"]
    assert plan["can_create"] is True and plan["image"] == "base"

    plan = api.post("/clusters/plan", body(machine_type, image="windows-11"))[1]["data"]
    assert plan["can_create"] is False
    assert [(p["code"], p["field"]) for p in plan["problems"]] == [("image_unavailable", "image")]
    assert not Cluster.objects.exists()


def test_machines_that_run_their_operators_own_system_start_no_image(api):
    pool = machine_type_with_hosts(4, provider="ssh", kind="bare_metal")
    offer = next(o for o in api.get("/cluster-offers", machines=2)[1]["data"] if o["id"] == pool.pk)
    assert offer["images"] is None and offer["default_image"] is None
    plan = api.post("/clusters/plan", body(pool))[1]["data"]
    assert plan["image"] is None and plan["images"] is None and not plan["problems"]
    status, answer = api.post("/clusters", body(pool, image="pytorch"))
    assert status == 400 and "image" in error_of(answer)["details"]
    assert not Cluster.objects.exists()


@pytest.fixture
def no_built_images(settings, tmp_path, monkeypatch):
    """This computer as a host of real nodes with no image built yet."""
    from clusters.providers.local import images, provider

    settings.LOCAL_NODES = "namespaces"
    if provider.mode()[0] != "namespaces":
        pytest.fail(f"this computer cannot run real nodes: {provider.mode()[1]}")
    monkeypatch.setattr(images, "IMAGES_DIR", tmp_path / "images")


def test_a_host_with_no_image_built_refuses_the_create_in_customer_words_before_any_boot(api, no_built_images):
    local = machine_type_with_hosts(4, provider="local")
    offer = next(o for o in api.get("/cluster-offers", machines=2)[1]["data"] if o["id"] == local.pk)
    assert offer["images"] == [] and offer["default_image"] is None
    status, answer = api.post("/clusters", body(local))
    assert status == 400, answer
    assert error_of(answer)["code"] == "image_unavailable"
    message = " ".join(error_of(answer)["details"]["image"])
    assert message == "This offer has no machine image ready to start now. Pick another offer, or try again later."
    assert not Cluster.objects.exists() and not Host.objects.filter(state=Host.State.RESERVED).exists()
