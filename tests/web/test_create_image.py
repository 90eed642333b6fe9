"""The create page offers the picked offer's machine images with their facts, the default one
picked; the cluster is created with the image chosen, and its page shows it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from clusters.models import Cluster, Node
from tests.factories import machine_type_with_hosts
from tests.web.conftest import HTMX

pytestmark = pytest.mark.django_db

URL = reverse("clusters:create")


def image_radios(html: str) -> dict[str, bool]:
    """name -> checked, of the page's image radios."""
    found = {}
    for tag in re.findall(r'<input type="radio" name="image"[^>]*>', html):
        value = re.search(r'value="([^"]+)"', tag)
        assert value is not None, tag
        found[value[1]] = " checked" in tag
    return found


def test_the_page_offers_the_offers_images_with_their_facts_pytorch_picked(member_client, machine_type):
    response = member_client.get(URL, {"offer": machine_type.pk, "machines": 4})
    assert response.status_code == 200
    assert image_radios(response.text) == {"base": False, "pytorch": True}
    field = response.text[response.text.index('id="image-field"'):]
    field = field[:field.index("</fieldset>")]
    assert "Debian 12 (bookworm) · Python 3.11.2 · PyTorch 2.13.0 (CPU)" in field
    # Each image is a label around its radio: the whole line is the touch target on a phone.
    assert all(f'<label class="choice" for="id_image_{i}">' in field for i in range(2))


def test_the_plan_partial_keeps_the_picked_image_and_drops_one_another_offer_lacks(member_client, machine_type):
    response = member_client.get(URL, {"offer": machine_type.pk, "machines": 4, "image": "base", "partial": "plan"},
                                  **HTMX)
    assert image_radios(response.text) == {"base": True, "pytorch": False}
    pool = machine_type_with_hosts(6, provider="ssh", kind="bare_metal")
    response = member_client.get(URL, {"offer": pool.pk, "machines": 4, "image": "base", "partial": "plan"}, **HTMX)
    assert image_radios(response.text) == {}
    assert "run their operator's own system" in response.text


def test_a_cluster_is_created_with_the_picked_image_and_its_page_shows_it(member_client, machine_type):
    response = member_client.post(URL, {"name": "train", "offer": machine_type.pk, "machines": 4, "software": "none",
                                        "image": "base"})
    assert response.status_code == 302, response.content
    cluster = Cluster.objects.get()
    assert cluster.image == "base"
    page = member_client.get(cluster.get_absolute_url()).text
    assert re.search(r'<dt>Image</dt><dd id="cluster-image">base <small class="muted">Debian 12 \(bookworm\) · '
                     r"Python 3.11.2</small>", page)


def test_without_a_pick_the_cluster_gets_the_default(member_client, machine_type):
    member_client.post(URL, {"name": "train", "offer": machine_type.pk, "machines": 4, "software": "none"})
    assert Cluster.objects.get().image == "pytorch"


def test_an_image_the_offer_cannot_start_is_shown_under_the_image_field_and_creates_nothing(member_client, machine_type):
    response = member_client.post(URL, {"name": "train", "offer": machine_type.pk, "machines": 4, "software": "none",
                                        "image": "windows-11"})
    assert response.status_code == 200
    assert response.context["form"].errors["image"] == [
        "This offer cannot start the image 'windows-11'. Pick one of: base, pytorch."]
    assert 'aria-describedby="id_image_error"' in response.text
    assert not Cluster.objects.exists() and not Node.objects.exists()


def test_the_offers_page_lists_each_offers_images_with_their_facts(member_client, machine_type):
    page = member_client.get(reverse("offers:list"), {"gpu": machine_type.gpu.slug, "machines": 2}).text
    images = re.search(r'<p class="specs offer-images">(.*?)</p>', page, re.S)
    assert images, "no image line on the offer"
    text = re.sub(r"<[^>]+>", "", images[1])
    assert text == ("Images: base (Debian 12 (bookworm) · Python 3.11.2); "
                    "pytorch (Debian 12 (bookworm) · Python 3.11.2 · PyTorch 2.13.0 (CPU))")
