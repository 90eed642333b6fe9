"""The machine image on the CLI and MCP, over real HTTP against the live API: offers list their
images, a plan and a create name one (`--image`, `image`), and the cluster says which it boots."""

from __future__ import annotations

import json

import pytest
from mcp import Client

from tests.client.client_support import run_runcrate
from tests.e2e_client.test_mcp_live import call, refused, stdio

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_cli_lists_images_plans_and_creates_with_one_and_shows_it(live_server, dashboard_key, instant_offer):
    def runcrate(*args: str):
        return run_runcrate(list(args), base_url=live_server.url, api_key=dashboard_key)

    table = runcrate("clusters", "offers", "--gpu", "H100", "--machines", "2")
    assert table.returncode == 0, table.stderr
    assert "IMAGES" in table.stdout and "base, pytorch*" in table.stdout
    assert "pytorch: Debian 12 (bookworm) · Python 3.11.2 · PyTorch 2.13.0 (CPU)" in table.stdout

    create = ("clusters", "create", "--name", "img", "--offer", str(instant_offer.pk), "--machines", "2")
    dry = runcrate(*create, "--image", "windows-11", "--dry-run")
    assert dry.returncode == 2, dry.stdout + dry.stderr
    assert "Refused (image_unavailable): This offer cannot start the image 'windows-11'. Pick one of: base, pytorch." \
        in dry.stdout
    dry = runcrate(*create, "--image", "base", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "Image" in dry.stdout and "base (Debian 12 (bookworm) · Python 3.11.2)" in dry.stdout

    refused_create = runcrate(*create, "--image", "windows-11")
    assert refused_create.returncode == 2 and "image" in refused_create.stderr

    created = runcrate(*create, "--image", "base", "-q")
    assert created.returncode == 0, created.stderr
    cluster_id = created.stdout.strip()
    info = runcrate("clusters", "info", cluster_id)
    assert any(line.split() == ["Image:", "base"] for line in info.stdout.splitlines()), info.stdout
    assert json.loads(runcrate("clusters", "info", cluster_id, "--json").stdout)["image"] == "base"


async def test_an_agent_sees_the_images_and_the_token_binds_the_one_planned(live_server, dashboard_key, instant_offer):
    async with Client(stdio(live_server, dashboard_key)) as client:
        [offer] = (await call(client, "list_cluster_offers", gpu="H100", machines=2))["offers"]
        assert [image["name"] for image in offer["images"]] == ["base", "pytorch"]
        assert offer["default_image"] == "pytorch"

        args = {"offer_id": str(instant_offer.pk), "machines": 2, "name": "agent"}
        bad = await call(client, "plan_cluster", **args, image="windows-11")
        assert bad["can_create"] is False and "confirmation_token" not in bad
        assert [p.split(":")[0] for p in bad["problems"]] == ["image_unavailable"]

        plan = await call(client, "plan_cluster", **args, image="base")
        assert plan["plan"]["image"] == "base" and "image base" in plan["summary"]
        assert "image" in await refused(client, "create_cluster", **args, image="pytorch",
                                        confirmation_token=plan["confirmation_token"])
        created = await call(client, "create_cluster", **args, image="base", confirmation_token=plan["confirmation_token"])
        assert created["cluster"]["image"] == "base"
        listed = await call(client, "list_clusters")
        assert [c["image"] for c in listed["clusters"]] == ["base"]
