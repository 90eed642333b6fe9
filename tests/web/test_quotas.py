"""The Quotas page: an Owner sets and removes quotas, everyone else reads them; the create page
shows the quotas that bind the cluster being typed, before anything is reserved."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.models import Membership, Quota
from audit.models import AuditEvent
from clusters.models import Cluster
from clusters.services.create import create_cluster
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db

URL = reverse("clusters:quotas")


def test_an_owner_sets_a_members_quota_and_sees_what_they_run(owner_client, workspace, environment, machine_type,
                                                               developer):
    create_cluster(environment=environment, name="train", machine_type=machine_type, machine_count=2,
                   created_by=developer)
    member = Membership.objects.get(user=developer)
    response = owner_client.post(URL, {"member": member.pk, "max_gpus": "24", "monthly_spend": "$1,000"}, follow=True)
    assert response.status_code == 200
    quota = Quota.objects.get()
    assert (quota.membership, quota.max_gpus, str(quota.monthly_spend)) == (member, 24, "1000.00")
    page = response.content.decode()
    assert "Quota of dave in every environment set." in page
    assert "16 GPUs running, $0.00 spent this month" in page
    assert AuditEvent.objects.get(action="quota.set").surface == "page"
    owner_client.post(reverse("clusters:quota_delete", args=[quota.pk]))
    assert not Quota.objects.exists()


def test_bad_quota_input_shows_on_the_form_and_sets_nothing(owner_client, developer):
    member = Membership.objects.get(user=developer)
    for data, message in [
        ({"member": member.pk}, "Set the most GPUs, the most spend a month, or both."),
        ({"member": member.pk, "role": "developer", "max_gpus": "1"}, "A quota binds one member or one role, not both."),
        ({"max_gpus": "-3"}, "greater than or equal to 0"),
        ({"member": "999999", "max_gpus": "1"}, "Select a valid choice"),
    ]:
        response = owner_client.post(URL, data)
        assert response.status_code == 200
        assert message in response.content.decode(), data
    assert not Quota.objects.exists()


def test_a_developer_and_a_manager_read_quotas_but_cannot_change_them(workspace, owner, developer, manager):
    quota = Quota.objects.create(workspace=workspace, role="developer", max_gpus=8)
    for user in (developer, manager):
        client = client_for(user)
        page = client.get(URL).content.decode()
        assert "each Developer" in page and "Only an Owner sets quotas." in page and "Set quota" not in page
        client.post(URL, {"role": "developer", "max_gpus": "800"})
        client.post(reverse("clusters:quota_delete", args=[quota.pk]))
    quota.refresh_from_db()
    assert quota.max_gpus == 8


def test_another_workspaces_quota_cannot_be_removed(owner_client, outsider):
    theirs = Quota.objects.create(workspace=Membership.objects.get(user=outsider).workspace, max_gpus=1)
    assert owner_client.post(reverse("clusters:quota_delete", args=[theirs.pk])).status_code == 404
    assert Quota.objects.filter(pk=theirs.pk).exists()


def test_the_create_page_shows_the_quota_before_anything_is_reserved_and_refuses_past_it(
        workspace, environment, machine_type, developer):
    Quota.objects.create(workspace=workspace, membership=Membership.objects.get(user=developer), max_gpus=8)
    client = client_for(developer)
    query = {"partial": "plan", "offer": machine_type.pk, "machines": "2", "name": "train", "software": "none"}
    plan = client.get(reverse("clusters:create"), query, headers={"HX-Request": "true"}).content.decode()
    assert "Quota of dave in every environment: 0 of 8 GPUs running, 16 with this cluster." in plan
    assert "the quota of dave in every environment is 8 GPUs running at once and 0 are running" in plan
    response = client.post(reverse("clusters:create"), {"name": "train", "offer": machine_type.pk, "machines": 2,
                                                        "software": "none"})
    assert response.status_code == 200 and "8 GPUs running at once" in response.content.decode()
    assert not Cluster.objects.exists()
