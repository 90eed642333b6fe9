"""Creating a cluster from the dashboard: every refusal shows on the form and creates nothing."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.urls import reverse

from accounts.models import SSHKey, Workspace
from clusters.models import Cluster, Node, Status, Volume
from offers.models import COMMUNITY_WARNING, MACHINE_COUNT_MESSAGES, Host
from tests.factories import LocationFactory, machine_type_with_hosts
from tests.web.conftest import HTMX

pytestmark = pytest.mark.django_db

URL = reverse("clusters:create")


def post(client, machine_type, **overrides):
    data = {"name": "train", "offer": machine_type.pk, "machines": 4, "software": "none"}
    data.update(overrides)
    return client.post(URL, {k: v for k, v in data.items() if v is not None})


def assert_nothing_created():
    assert not Cluster.objects.exists()
    assert not Node.objects.exists()
    assert not Host.objects.filter(state=Host.State.RESERVED).exists()


@pytest.fixture
def container_type(db):
    return machine_type_with_hosts(6, kind="container", gpus_per_machine=1)


@pytest.fixture
def community_type(db):
    return machine_type_with_hosts(
        6, community=True, location=LocationFactory(code="community-global", name="Community hosts", country="ZZ")
    )


def test_the_form_shows_the_picked_offer(member_client, machine_type):
    response = member_client.get(URL, {"offer": machine_type.pk, "machines": 4})
    assert response.status_code == 200
    assert "6 machines of this offer are free now" in response.text
    assert f'<option value="{machine_type.pk}" selected data-price="2.5000" data-free="6"' in response.text
    assert "8× H100 VM · Ashburn, Virginia — $2.50/h per machine · 6 free" in response.text
    assert 'value="4"' in response.text


def test_a_page_opened_without_an_offer_starts_on_the_cheapest_of_the_platforms_own(member_client, machine_type):
    machine_type_with_hosts(6, price_per_machine_hour=Decimal("0.40"), community=True,
                            location=LocationFactory(code="community-global", name="Community hosts", country="ZZ"))
    cheapest = machine_type_with_hosts(6, price_per_machine_hour=Decimal("1.10"))
    machine_type_with_hosts(6, price_per_machine_hour=Decimal("9.90"))
    response = member_client.get(URL)
    offers = re.search(r'<select name="offer".*?</select>', response.text, re.S)
    assert offers is not None
    picked = re.findall(r'<option value="(\d+)" selected', offers.group(0))
    assert picked == [str(cheapest.pk)]
    assert "$4.40/h for the whole cluster" in response.text  # 4 machines


def offer_ids(text: str) -> list[str]:
    offers = re.search(r'<select name="offer".*?</select>', text, re.S)
    assert offers is not None
    return re.findall(r'<option value="(\d+)"', offers.group(0))


def test_community_offers_are_listed_only_once_opted_in_as_the_offers_page_asks(member_client, machine_type,
                                                                               community_type):
    assert offer_ids(member_client.get(URL).text) == [str(machine_type.pk)]
    assert 'name="include_community" value="on" >' in member_client.get(URL).text
    opted = member_client.get(URL, {"include_community": "on"}).text
    assert offer_ids(opted) == [str(machine_type.pk), str(community_type.pk)]
    assert 'name="include_community" value="on" checked>' in opted
    # Ticking the box asks for the plan again with it: the list follows.
    assert str(community_type.pk) in offer_ids(refresh(member_client, machines=2, include_community="on"))
    # A community offer picked on the Offers page stays picked.
    assert str(community_type.pk) in offer_ids(member_client.get(URL, {"offer": community_type.pk}).text)


def test_the_offers_page_carries_the_opt_in_to_the_create_form(member_client, community_type):
    text = member_client.get("/offers/", {"include_community": "on", "machines": 2}).text
    assert f"?offer={community_type.pk}&machines=2&include_community=on" in text


def test_the_form_warns_about_community_offers(member_client, community_type):
    response = member_client.get(URL, {"offer": community_type.pk})
    assert COMMUNITY_WARNING in response.text


def test_it_creates_and_reserves_every_machine(member_client, member, machine_type, environment):
    response = post(member_client, machine_type, software="slurm")
    cluster = Cluster.objects.get()
    assert response.status_code == 302 and response["Location"] == cluster.get_absolute_url()
    assert (cluster.environment, cluster.machine_count, cluster.software) == (environment, 4, "slurm")
    assert cluster.status == Status.PROVISIONING and cluster.created_by == member
    assert cluster.nodes.count() == 4
    assert Host.objects.filter(state=Host.State.RESERVED).count() == 4
    assert cluster.events.get(event="created").actor == member.username


def test_it_attaches_the_workspaces_ssh_keys_and_volume(member_client, machine_type, workspace, environment):
    key = SSHKey.objects.create(workspace=workspace, name="laptop", public_key="ssh-ed25519 AAAA", fingerprint="x")
    volume = Volume.objects.create(workspace=workspace, environment=environment, name="data")
    post(member_client, machine_type, ssh_keys=key.pk, volume=volume.pk)
    cluster = Cluster.objects.get()
    assert list(cluster.ssh_keys.all()) == [key] and cluster.volume == volume


def test_another_workspaces_ssh_key_or_volume_is_not_a_choice(member_client, machine_type, outsider):
    other = Workspace.objects.get(memberships__user=outsider)
    key = SSHKey.objects.create(workspace=other, name="theirs", public_key="ssh-ed25519 AAAA", fingerprint="y")
    volume = Volume.objects.create(workspace=other, environment=other.default_environment, name="theirs")
    response = post(member_client, machine_type, ssh_keys=key.pk, volume=volume.pk)
    assert response.status_code == 200
    assert response.text.count("Select a valid choice") == 2
    assert_nothing_created()


@pytest.mark.parametrize(
    ("machines", "message"),
    [(1, "A cluster has at least 2 machines."), (65, "A cluster has at most 64 machines; request a quote for more.")],
)
def test_it_refuses_a_count_outside_2_to_64(member_client, machine_type, machines, message):
    response = post(member_client, machine_type, machines=machines)
    assert response.status_code == 200
    assert message in response.text
    # Said under the field, and not again in the plan's list of what stops the create.
    assert "A cluster has 2 to 64 machines" not in response.text
    assert_nothing_created()


def test_it_refuses_kubernetes_on_a_container_offer(member_client, container_type):
    response = post(member_client, container_type, software="kubernetes")
    assert response.status_code == 200
    assert "Kubernetes runs only on VM and bare-metal offers" in response.text
    assert_nothing_created()


def test_it_refuses_a_volume_on_a_community_offer(member_client, community_type, workspace, environment):
    volume = Volume.objects.create(workspace=workspace, environment=environment, name="data")
    response = post(member_client, community_type, volume=volume.pk)
    assert response.status_code == 200
    assert "A volume cannot be attached to a cluster on community hosts" in response.text
    assert_nothing_created()


def test_it_refuses_a_balance_below_one_hour_and_shows_needed_and_available(member_client, workspace):
    expensive = machine_type_with_hosts(6, price_per_machine_hour=Decimal("25.00"))
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("50.00"))
    response = post(member_client, expensive)
    assert response.status_code == 200
    assert "$50.00" in response.text and "$100.00" in response.text
    assert 'role="alert"' in response.text
    assert_nothing_created()


def test_it_refuses_a_balance_below_ten_dollars_even_for_a_cheap_cluster(member_client, workspace):
    cheap = machine_type_with_hosts(6, price_per_machine_hour=Decimal("0.50"))
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("9.99"))
    response = post(member_client, cheap, machines=2)
    assert "$9.99" in response.text and "$10.00" in response.text
    assert_nothing_created()


def test_it_refuses_an_offer_that_can_no_longer_start(member_client, machine_type):
    taken = machine_type.hosts.order_by("id")[:4]
    Host.objects.filter(pk__in=[h.pk for h in taken]).update(state=Host.State.RESERVED)
    response = post(member_client, machine_type)
    assert response.status_code == 200
    assert "This offer can no longer start 4 machines now (2 free)" in response.text
    assert not Cluster.objects.exists()
    assert Host.objects.filter(state=Host.State.RESERVED).count() == 4


def test_it_refuses_a_retired_offer(member_client, machine_type):
    machine_type.active = False
    machine_type.save()
    response = post(member_client, machine_type)
    assert "Select a valid choice" in response.text
    assert_nothing_created()


@pytest.mark.parametrize("name", ["Train", "-x", "a_b", ""])
def test_it_refuses_a_name_that_is_not_a_dns_label(member_client, machine_type, name):
    response = post(member_client, machine_type, name=name)
    assert response.status_code == 200
    assert_nothing_created()


def test_it_refuses_a_name_already_live_in_the_environment(member_client, machine_type):
    post(member_client, machine_type, machines=2)
    response = post(member_client, machine_type, machines=2)
    assert "A live cluster named &#x27;train&#x27; already exists" in response.text
    assert Cluster.objects.count() == 1


def test_anonymous_is_sent_to_sign_in(client, machine_type):
    assert client.get(URL).status_code == 302
    assert post(client, machine_type).status_code == 302
    assert_nothing_created()


def test_the_workspaces_only_ssh_key_is_ticked_and_no_key_is_warned_about(member_client, machine_type, workspace):
    text = member_client.get(URL, {"offer": machine_type.pk}).text
    assert "This workspace has no SSH key: nobody could log in" in text
    key = SSHKey.objects.create(workspace=workspace, name="laptop", public_key="ssh-ed25519 AAAA", fingerprint="x")
    text = member_client.get(URL, {"offer": machine_type.pk}).text
    assert f'value="{key.pk}" id="id_ssh_keys_0" checked' in text or f'value="{key.pk}" checked' in text


def test_offers_without_enough_free_machines_are_not_choices(member_client, machine_type):
    small = machine_type_with_hosts(3, price_per_machine_hour=Decimal("1.00"))
    text = member_client.get(URL, {"offer": machine_type.pk, "machines": 4}).text
    # An offer option carries its price (the workspace switcher's options do not, and may share the id).
    assert f'<option value="{small.pk}" data-price' not in text
    assert f'<option value="{small.pk}" data-price' in member_client.get(URL, {"offer": machine_type.pk, "machines": 3}).text


def test_each_software_says_what_it_installs_and_when_it_is_ready(member_client, machine_type):
    text = member_client.get(URL, {"offer": machine_type.pk}).text
    assert "Ready when every node is idle in sinfo" in text
    assert "Ready when every node is Ready with its GPUs allocatable" in text
    assert "Ready when every node is alive in ray status" in text
    assert "Ready as soon as every machine has joined" in text


def refresh(client, **values):
    """What the page asks whenever a field changes: the `plan` partial for the form's values."""
    return client.get(URL, {"partial": "plan", **values}, **HTMX).text


def test_a_change_asks_the_server_for_the_price_and_what_is_free(member_client, machine_type):
    text = refresh(member_client, offer=machine_type.pk, machines=3, software="none")
    assert text.lstrip().startswith('<div id="plan"') and "<html" not in text
    assert "$7.50/h for the whole cluster ($2.50/h per machine × 3)" in text
    assert "6 machines of this offer are free now." in text
    text = refresh(member_client, offer=machine_type.pk, machines="")
    assert "$2.50/h per machine · enter 2 to 64 machines" in text
    assert MACHINE_COUNT_MESSAGES["range"] in text  # the plan's refusal, in the rules' words


def test_the_plan_says_what_refuses_the_create_before_it_is_sent(member_client, machine_type, workspace):
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("9.00"))
    text = refresh(member_client, offer=machine_type.pk, machines=8, name="")
    assert "Your balance of $9.00 does not cover $20.00" in text
    assert "This offer cannot start 8 machines now (6 free)" in text
    assert "lowercase letters" not in text  # a name not typed yet is no refusal
    assert "lowercase letters" in refresh(member_client, offer=machine_type.pk, machines=2, name="Bad Name")


def test_the_balances_runway_is_warned_about_from_the_plan(member_client, machine_type, workspace):
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("12.34"))
    assert "lasts" not in refresh(member_client, offer=machine_type.pk, machines=4)  # $12.34 at $10/h: over an hour
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("5.00"))
    text = member_client.get(URL, {"offer": machine_type.pk, "machines": 4}).text
    assert "the balance of $5.00 lasts 30 minutes" in text
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("0.17"))
    text = member_client.get(URL, {"offer": machine_type.pk, "machines": 4}).text
    assert "the balance of $0.17 lasts 1 minute:" in text, "one minute, not 1 minutes"


def test_a_budget_almost_spent_is_warned_about_with_its_runway(member_client, machine_type, environment, owner):
    from clusters.services.create import create_cluster

    create_cluster(environment=environment, name="running", machine_type=machine_type, machine_count=2,
                            created_by=owner)  # $5/h of the environment's spend already
    type(environment).objects.filter(pk=environment.pk).update(monthly_budget=Decimal("3.00"))
    text = refresh(member_client, offer=machine_type.pk, machines=2)
    assert "With this cluster the environment would spend $10.00/h and the $3.00 left of its monthly budget " \
           "lasts 18 minutes" in text
    response = post(member_client, machine_type, machines=2, name="late")
    assert response.status_code == 302
    said = [str(m) for m in response.wsgi_request._messages]
    assert any("lasts 18 minutes" in m for m in said), said


def test_kubernetes_and_a_volume_are_greyed_out_where_the_offer_does_not_allow_them(
    member_client, container_type, community_type, workspace, environment,
):
    volume = Volume.objects.create(workspace=workspace, environment=environment, name="data", size_gb=10)
    text = refresh(member_client, offer=container_type.pk, machines=2, software="kubernetes")
    assert re.search(r'<input type="radio" name="software" value="kubernetes"[^>]*disabled', text)
    assert re.search(r'<input type="radio" name="software" value="none"[^>]*checked', text)
    assert "this offer is a container" in text
    text = refresh(member_client, offer=community_type.pk, machines=2, volume=volume.pk)
    assert re.search(r'<select name="volume"[^>]*disabled', text) and COMMUNITY_WARNING in text
    text = refresh(member_client, offer=community_type.pk, machines=2, software="kubernetes")
    assert not re.search(r'value="kubernetes"[^>]*disabled', text) and "kubernetes-note" not in text


def test_kubernetes_on_real_machines_waits_for_the_operators_pins(member_client, settings):
    real = machine_type_with_hosts(4, provider="ssh")
    text = refresh(member_client, offer=real.pk, machines=2, software="kubernetes")
    assert re.search(r'value="kubernetes"[^>]*disabled', text)
    assert "its install on these machines has not been verified" in text
    response = post(member_client, real, machines=2, software="kubernetes")
    assert "operator to pin the flannel and NVIDIA device plugin manifests" in response.text
    assert_nothing_created()
    settings.KUBERNETES_FLANNEL_SHA256 = "a" * 64
    settings.KUBERNETES_DEVICE_PLUGIN_SHA256 = "b" * 64
    assert not re.search(r'value="kubernetes"[^>]*disabled', refresh(member_client, offer=real.pk, machines=2))


def test_no_key_ticked_is_warned_about_by_the_server(member_client, machine_type, workspace):
    key = SSHKey.objects.create(workspace=workspace, name="laptop", public_key="ssh-ed25519 AAAA", fingerprint="x")
    assert "No SSH key picked" in refresh(member_client, offer=machine_type.pk, machines=2)
    assert "No SSH key picked" not in refresh(member_client, offer=machine_type.pk, machines=2, ssh_keys=key.pk)


def test_the_name_of_a_live_cluster_is_an_error_on_the_name_field(member_client, machine_type, environment):
    post(member_client, machine_type, name="same", machines=2)
    response = post(member_client, machine_type, name="same", machines=2)
    assert response.status_code == 200
    assert response.context["form"].errors["name"] == ["A live cluster named 'same' already exists in this environment."]
    assert environment.clusters.filter(name="same").count() == 1
