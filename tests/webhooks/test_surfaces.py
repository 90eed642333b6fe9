"""The Webhooks page and API: Owners and Managers add endpoints, read the secret and the
delivery log, test-send and re-send; Developers and other workspaces cannot."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from accounts.models import Role
from api.keys import create_api_key
from tests.api.conftest import ApiClient, error_of
from tests.factories import MembershipFactory, UserFactory
from webhooks import services, signing
from webhooks.models import Delivery, Endpoint, EventType

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def manager(workspace):
    return MembershipFactory(workspace=workspace, role=Role.MANAGER, user=UserFactory(username="meg")).user


@pytest.fixture
def endpoint(workspace) -> Endpoint:
    return services.create_endpoint(workspace=workspace, url="http://127.0.0.1:9/hook", events=[EventType.CLUSTER_READY])


# -- the page ------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["owner", "manager"])
def test_owners_and_managers_add_an_endpoint_on_the_page_and_see_its_secret(request, workspace, who):
    client = client_for(request.getfixturevalue(who))
    response = client.post("/account/webhooks/", {"url": "http://127.0.0.1:9/hook", "description": "ci",
                                                  "events": ["cluster.ready", "cluster.failed"]})
    endpoint = Endpoint.objects.get(workspace=workspace)
    assert response.status_code == 302 and response["Location"] == f"/account/webhooks/{endpoint.pk}/"
    assert endpoint.events == ["cluster.ready", "cluster.failed"]
    page = client.get(f"/account/webhooks/{endpoint.pk}/").content.decode()
    assert endpoint.secret.startswith("whsec_") and endpoint.secret in page


def test_a_private_url_is_refused_on_the_page_under_the_field(owner):
    response = client_for(owner).post("/account/webhooks/", {"url": "http://10.0.0.8/hook", "events": ["cluster.ready"]})
    assert response.status_code == 400
    assert "private or reserved range" in response.content.decode()
    assert not Endpoint.objects.exists()


def test_developers_neither_see_nor_reach_webhooks(developer, endpoint):
    client = client_for(developer)
    assert "/account/webhooks/" not in client.get("/clusters/").content.decode()
    assert client.get("/account/webhooks/").status_code == 404
    assert client.get(f"/account/webhooks/{endpoint.pk}/").status_code == 404
    assert client.post(f"/account/webhooks/{endpoint.pk}/test/").status_code == 404


def test_another_workspaces_endpoint_is_404(outsider, endpoint):
    client = client_for(outsider)
    assert client.get(f"/account/webhooks/{endpoint.pk}/").status_code == 404
    assert client.post(f"/account/webhooks/{endpoint.pk}/delete/").status_code == 404
    assert Endpoint.objects.filter(pk=endpoint.pk).exists()


def test_test_send_and_resend_from_the_page_fill_the_delivery_log(owner, endpoint, django_capture_on_commit_callbacks):
    client = client_for(owner)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/account/webhooks/{endpoint.pk}/test/")
    delivery = Delivery.objects.get()
    assert delivery.event.type == "webhook.test" and delivery.attempts == 1
    assert delivery.last_error  # nothing listens on port 9
    # The first delivery of the test event is no re-send.
    page = client.get(f"/account/webhooks/{endpoint.pk}/").content.decode()
    assert "re-sent" not in page and " · test</div>" in page
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/account/webhooks/{endpoint.pk}/deliveries/{delivery.pk}/resend/")
    assert Delivery.objects.filter(event=delivery.event).count() == 2
    page = client.get(f"/account/webhooks/{endpoint.pk}/").content.decode()
    assert page.count('id="delivery-') == 2 and "retrying" in page and delivery.event.public_id in page
    assert page.count(" · re-sent</div>") == 1 and page.count(" · test</div>") == 1


def test_the_delivery_log_polls_and_changes_only_when_a_delivery_does(owner, endpoint, django_capture_on_commit_callbacks):
    client = client_for(owner)
    page = client.get(f"/account/webhooks/{endpoint.pk}/").content.decode()
    [poll] = re.findall(r'id="deliveries" hx-get="([^"]+)"', page)
    assert "No deliveries yet" in page
    assert client.get(poll, headers={"HX-Request": "true"}).status_code == 204
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/account/webhooks/{endpoint.pk}/test/")
    fresh = client.get(poll, headers={"HX-Request": "true"})
    assert fresh.status_code == 200
    partial = fresh.content.decode()
    assert partial.lstrip().startswith('<section class="card" id="deliveries"') and "<html" not in partial
    assert "webhook.test" in partial and "retrying" in partial
    [poll] = re.findall(r'id="deliveries" hx-get="([^"]+)"', partial)
    assert client.get(poll, headers={"HX-Request": "true"}).status_code == 204
    # An attempt that finishes changes it again.
    delivery = Delivery.objects.get()
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/account/webhooks/{endpoint.pk}/deliveries/{delivery.pk}/resend/")
    assert client.get(poll, headers={"HX-Request": "true"}).status_code == 200


def test_the_endpoint_page_says_events_once(owner, endpoint):
    page = client_for(owner).get(f"/account/webhooks/{endpoint.pk}/").content.decode()
    card = page.split("<h2>Events</h2>")[1].split("</section>")[0]
    assert "Sent to this endpoint" in card and not re.search(r">\s*Events:?\s*<", card)


def test_the_endpoints_events_are_changed_and_switched_off_on_the_page(owner, endpoint):
    client = client_for(owner)
    client.post(f"/account/webhooks/{endpoint.pk}/", {"events": ["node.unhealthy", "budget.reached"]})
    endpoint.refresh_from_db()
    assert endpoint.events == ["node.unhealthy", "budget.reached"] and not endpoint.is_active


# -- the API -------------------------------------------------------------------------------------


@pytest.fixture
def api(owner, workspace) -> ApiClient:
    return ApiClient(create_api_key(workspace=workspace, created_by=owner, name="k")[1])


def test_an_endpoint_is_added_over_the_api_with_its_secret_and_listed_without_it(api, workspace):
    status, body = api.post("/webhooks", {"url": "http://127.0.0.1:9/hook", "events": ["cluster.ready", "balance.low"]})
    assert status == 201
    created = body["data"]
    assert created["secret"] == Endpoint.objects.get().secret and created["events"] == ["cluster.ready", "balance.low"]
    listed = api.get("/webhooks")[1]["data"]
    assert [e["id"] for e in listed] == [created["id"]] and "secret" not in listed[0]
    status, body = api.call("PATCH", f"/webhooks/{created['id']}", {"is_active": False})
    assert status == 200 and body["data"]["is_active"] is False
    assert api.delete(f"/webhooks/{created['id']}")[0] == 200
    assert not Endpoint.objects.exists()


@pytest.mark.parametrize("body, field", [
    ({"url": "http://169.254.169.254/", "events": ["cluster.ready"]}, "url"),
    ({"url": "not a url", "events": ["cluster.ready"]}, "url"),
    ({"url": "http://127.0.0.1:9/", "events": ["cluster.exploded"]}, "events"),
    ({"url": "http://127.0.0.1:9/", "events": []}, "events"),
    ({"events": ["cluster.ready"]}, "url"),
])
def test_bad_endpoints_are_400_on_their_field(api, body, field):
    status, answer = api.post("/webhooks", body)
    assert status == 400, answer
    assert field in error_of(answer)["details"]


def test_developer_keys_are_403_and_other_workspaces_404(workspace, developer, endpoint):
    dev = ApiClient(create_api_key(workspace=workspace, created_by=developer, name="d")[1])
    assert dev.get("/webhooks")[0] == 403
    assert dev.post(f"/webhooks/{endpoint.pk}/test")[0] == 403
    other = MembershipFactory(role=Role.OWNER)
    outsider = ApiClient(create_api_key(workspace=other.workspace, created_by=other.user, name="o")[1])
    assert outsider.get(f"/webhooks/{endpoint.pk}/deliveries")[0] == 404


def test_test_send_and_resend_over_the_api_report_each_delivery(api, endpoint, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        status, body = api.post(f"/webhooks/{endpoint.pk}/test")
    assert status == 202 and body["data"]["event_type"] == "webhook.test"
    status, body = api.get(f"/webhooks/{endpoint.pk}/deliveries")
    [delivery] = body["data"]
    assert delivery["attempts"] == 1 and delivery["status"] == "pending" and delivery["last_error"]
    assert delivery["attempt_log"][0]["status_code"] is None and delivery["next_attempt_at"]
    with django_capture_on_commit_callbacks(execute=True):
        status, body = api.post(f"/webhooks/{endpoint.pk}/deliveries/{delivery['id']}/resend")
    assert status == 202 and body["data"]["event_id"] == delivery["event_id"] and body["data"]["manual"]
    assert api.get(f"/webhooks/{endpoint.pk}/deliveries")[1]["meta"]["total"] == 2


# -- billing events ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_low_balance_and_a_reached_budget_are_sent_once(workspace, environment, machine_type, owner, receiver):
    from decimal import Decimal

    from clusters import enforcement
    from tests.factories import ready_cluster

    endpoint = services.create_endpoint(workspace=workspace, url=receiver.url,
                                        events=[EventType.BALANCE_LOW, EventType.BUDGET_REACHED])
    cluster = ready_cluster(environment, machine_type, owner, count=2)
    type(workspace).objects.filter(pk=workspace.pk).update(credit_balance=Decimal("4.00"))
    from billing import services as billing
    from billing.models import BillingNotice

    billing.warn_low_balances()
    warnings = BillingNotice.objects.filter(kind=BillingNotice.Kind.BALANCE_LOW).count()
    billing.warn_low_balances()
    # One per warning the emails give (each threshold crossed), and none again for the same one.
    assert warnings >= 1 and receiver.types() == ["balance.low"] * warnings
    assert receiver.requests[0].json["data"]["balance"] == "4.00"
    assert {r.json["data"]["threshold_hours"] for r in receiver.requests} == set(
        BillingNotice.objects.values_list("context__threshold_hours", flat=True))
    type(environment).objects.filter(pk=environment.pk).update(monthly_budget=Decimal("0.00"))
    enforcement.stop_over_budget_environments()
    enforcement.stop_over_budget_environments()
    assert receiver.types() == ["balance.low"] * warnings + ["budget.reached"]
    budget = receiver.requests[-1].json["data"]
    assert budget["environment"]["id"] == environment.pk and budget["stopped_cluster_ids"] == [cluster.pk]
    assert all(signing.verify(endpoint.secret, r.headers["Runcrate-Signature"], r.body) for r in receiver.requests)


# -- loopback answers (development) ----------------------------------------------------------------


def test_answers_from_loopback_show_only_their_class_on_the_page_and_the_api_and_the_page_says_so(
    owner, workspace, api, receiver, django_capture_on_commit_callbacks
):
    """Under `make run` a tenant may add a loopback endpoint; the log must not tell it which of
    this computer's ports listen (refused vs answered) or what answers there (codes, timings)."""
    receiver.answer(404, 503)
    listening = services.create_endpoint(workspace=workspace, url=receiver.url, events=[EventType.CLUSTER_READY])
    closed = services.create_endpoint(workspace=workspace, url="http://127.0.0.1:9/hook", events=[EventType.CLUSTER_READY])
    client = client_for(owner)
    for endpoint in (listening, closed, listening, listening):
        with django_capture_on_commit_callbacks(execute=True):
            client.post(f"/account/webhooks/{endpoint.pk}/test/")
    assert len(receiver.requests) == 3  # really sent: 404, 503, then 200

    page = client.get(f"/account/webhooks/{listening.pk}/").content.decode()
    assert "4xx" in page and "5xx" in page and "2xx" in page
    assert "HTTP 404" not in page and "HTTP 503" not in page and not re.search(r"\d ms\b", page)
    assert "only the class of the answer" in page
    page = client.get(f"/account/webhooks/{closed.pk}/").content.decode()
    assert "no answer" in page and "ConnectError" not in page and "refused" not in page.lower()

    _, body = api.get(f"/webhooks/{listening.pk}/deliveries")
    answers = sorted((d["last_status_code"], d["last_response_ms"], d["last_error"], d["last_to_loopback"])
                     for d in body["data"])
    assert answers == [(None, None, "2xx", True), (None, None, "4xx", True), (None, None, "5xx", True)]
    assert all(a["status_code"] is None and a["response_ms"] is None for d in body["data"] for a in d["attempt_log"])
    _, body = api.get(f"/webhooks/{closed.pk}/deliveries")
    assert body["data"][0]["last_error"] == "no answer" and body["data"][0]["attempt_log"][0]["error"] == "no answer"
