"""Each /api/v1 endpoint: its success, and each error code it can answer."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from accounts.models import Environment, SSHKey, Workspace
from api.models import IdempotentRequest
from clusters.models import Cluster, Status
from offers import lab
from offers.models import HostFault
from tests.api.conftest import ApiClient, drive, error_of, make_cluster
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db


def create_body(machine_type, **overrides) -> dict:
    return {"name": "train", "offer_id": machine_type.pk, "machines": 2, "software": "none", **overrides}


# -- authentication and the envelope -----------------------------------------------------------


def test_no_key_answers_401_with_a_bearer_challenge(db):
    status, body = ApiClient(None).get("/clusters")
    assert status == 401
    assert error_of(body)["code"] == "unauthenticated"
    assert ApiClient(None).client.get("/api/v1/clusters").headers["WWW-Authenticate"].startswith("Bearer")


def test_a_made_up_key_answers_401(db):
    assert ApiClient("rc_live_madeup").get("/clusters")[0] == 401
    assert ApiClient("not-even-a-key").get("/clusters")[0] == 401


def test_a_signed_in_session_is_not_an_api_credential(owner_client):
    response = owner_client.post("/api/v1/clusters", data="{}", content_type="application/json")
    assert response.status_code == 401


def test_bearer_requests_need_no_csrf_token(owner_key, machine_type):
    client = Client(enforce_csrf_checks=True)
    response = client.post("/api/v1/clusters", data=create_body(machine_type), content_type="application/json",
                           headers={"Authorization": f"Bearer {owner_key}"})
    assert response.status_code == 201


def test_unknown_endpoints_and_methods_answer_json_errors(api):
    status, body = api.get("/nothing-here")
    assert status == 404 and error_of(body)["code"] == "not_found"
    status, body = api.call("PUT", "/clusters")
    assert status == 405 and error_of(body)["code"] == "method_not_allowed"
    assert api.last.headers["Allow"] == "GET, POST"


def test_a_body_that_is_not_a_json_object_is_400(api):
    response = api.client.post("/api/v1/clusters", data="{nope", content_type="application/json", headers=api.headers())
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    status, body = api.post("/clusters", [1, 2])
    assert status == 400 and error_of(body)["code"] == "invalid_json"


@override_settings(API_RATE_LIMIT=3, API_RATE_WINDOW_SECONDS=60)
def test_a_key_over_its_rate_limit_gets_429_with_retry_after(api, dev_api):
    for _ in range(3):
        assert api.get("/gpu-types")[0] == 200
    status, body = api.get("/gpu-types")
    assert status == 429
    assert error_of(body)["code"] == "rate_limited"
    assert api.last.headers["Retry-After"] == "60"
    # The limit is per key: another key of the workspace is unaffected.
    assert dev_api.get("/gpu-types")[0] == 200


# -- catalogue ---------------------------------------------------------------------------------


def test_gpu_types_lists_models_with_active_offers(api, machine_type):
    status, body = api.get("/gpu-types")
    assert status == 200
    assert body["data"] == [{"id": "H100", "name": "H100", "description": "NVIDIA H100 80GB SXM", "memory_gb": 80}]
    assert body["meta"] == {"total": 1, "limit": 50, "offset": 0}


def test_offers_list_only_what_can_start_now_with_cluster_and_machine_prices(api):
    four = machine_type_with_hosts(4, price_per_machine_hour=Decimal("2.5000"))
    machine_type_with_hosts(2, price_per_machine_hour=Decimal("1.0000"))
    status, body = api.get("/cluster-offers", gpu="H100", machines=4)
    assert status == 200
    assert [o["id"] for o in body["data"]] == [four.pk]
    offer = body["data"][0]
    assert offer["price_per_machine_hour"] == "2.50"
    assert offer["price_per_cluster_hour"] == "10.00"
    assert offer["available_machines"] == 4
    assert offer["software"] == ["none", "slurm", "kubernetes", "ray"]
    for field in ("gpu", "gpus_per_machine", "machine_kind", "location", "interconnect", "community"):
        assert field in offer


def test_community_offers_are_left_out_unless_asked_for(api):
    community = machine_type_with_hosts(2, community=True)
    assert api.get("/cluster-offers", machines=2)[1]["data"] == []
    data = api.get("/cluster-offers", machines=2, include_community="true")[1]["data"]
    assert [o["id"] for o in data] == [community.pk]
    assert data[0]["community"] is True and "secrets" in data[0]["warning"]


def test_container_offers_do_not_list_kubernetes(api):
    machine_type_with_hosts(2, kind="container")
    assert api.get("/cluster-offers")[1]["data"][0]["software"] == ["none", "slurm", "ray"]


def test_offers_reject_bad_sizes_and_flags_per_field(api):
    status, body = api.get("/cluster-offers", machines=65, include_community="maybe")
    assert status == 400
    assert set(error_of(body)["details"]) == {"machines", "include_community"}


def test_lists_page_with_limit_and_offset(api, environment):
    for index in range(3):
        make_cluster(environment, machine_type_with_hosts(2), name=f"c{index}")
    status, body = api.get("/clusters", limit=2, offset=1)
    assert status == 200
    assert [c["name"] for c in body["data"]] == ["c1", "c0"]
    assert body["meta"] == {"total": 3, "limit": 2, "offset": 1}
    status, body = api.get("/clusters", limit=0, offset=-1)
    assert status == 400 and set(error_of(body)["details"]) == {"limit", "offset"}


# -- create ------------------------------------------------------------------------------------


def test_create_reserves_every_machine_and_answers_201(api, machine_type, owner):
    status, body = api.post("/clusters", create_body(machine_type, software="slurm"))
    assert status == 201
    data = body["data"]
    assert data["status"] == "provisioning" and data["machines"] == 2 and data["software"] == "slurm"
    assert data["price_per_hour"] == "5.00" and data["billing_started_at"] is None
    assert [n["name"] for n in data["nodes"]] == ["node-0", "node-1"]
    assert [n["role"] for n in data["nodes"]] == ["head", "worker"]
    assert api.last.headers["Location"] == f"/api/v1/clusters/{data['id']}"
    cluster = Cluster.objects.get()
    assert cluster.created_by == owner
    assert cluster.events.get().actor.startswith("api key rc_live_")


def test_create_accepts_ids_as_strings(api, machine_type):
    assert api.post("/clusters", create_body(machine_type, offer_id=str(machine_type.pk)))[0] == 201


def test_create_reports_every_missing_field(api):
    status, body = api.post("/clusters", {})
    assert status == 400
    assert set(error_of(body)["details"]) == {"name", "offer_id", "machines"}


@pytest.mark.parametrize(
    "overrides, code, field",
    [
        ({"name": "Not A DNS Label"}, "invalid_name", "name"),
        ({"machines": 1}, "invalid_machine_count", "machines"),
        ({"machines": "many"}, "invalid", "machines"),
        ({"software": "windows"}, "invalid_software", "software"),
        ({"offer_id": 999999}, "invalid", "offer_id"),
        ({"ssh_key_ids": [424242]}, "invalid", "ssh_key_ids"),
        ({"volume_id": 424242}, "invalid", "volume_id"),
    ],
)
def test_create_refuses_bad_input_with_400_per_field(api, machine_type, overrides, code, field):
    status, body = api.post("/clusters", create_body(machine_type, **overrides))
    assert status == 400
    error = error_of(body)
    assert error["code"] == code
    assert field in error["details"]
    assert not Cluster.objects.exists()


def test_create_refuses_every_bad_field_at_once(api, machine_type):
    """A client fixes a create in one round: unknown ids and broken rules answer together."""
    status, body = api.post("/clusters", create_body(machine_type, name="Bad Name!", machines=65, software="windows",
                                                     ssh_key_ids=[424242], volume_id=424242))
    assert status == 400
    error = error_of(body)
    assert error["code"] == "invalid"
    assert set(error["details"]) == {"name", "machines", "software", "ssh_key_ids", "volume_id"}
    assert error["details"]["machines"] == ["A cluster has 2 to 64 machines. For more, request a quote."]
    assert not Cluster.objects.exists()


def test_a_taken_name_beside_another_refusal_is_one_400_naming_both(api, machine_type):
    assert api.post("/clusters", create_body(machine_type, name="train"))[0] == 201
    status, body = api.post("/clusters", create_body(machine_type, name="train", offer_id=999999))
    assert status == 400
    details = error_of(body)["details"]
    assert set(details) == {"name", "offer_id"} and "train" in details["name"][0]
    assert Cluster.objects.count() == 1


def test_kubernetes_on_a_container_offer_is_400(api):
    container = machine_type_with_hosts(2, kind="container")
    status, body = api.post("/clusters", create_body(container, software="kubernetes"))
    assert status == 400 and error_of(body)["code"] == "kubernetes_unsupported"
    assert "software" in error_of(body)["details"]


def test_a_create_naming_no_key_installs_every_key_of_the_workspace_and_an_empty_list_none(api, machine_type, workspace):
    laptop, desktop = (SSHKey.objects.create(workspace=workspace, name=name, public_key=f"ssh-ed25519 AAAA {name}",
                                             fingerprint=f"SHA256:{name}") for name in ("laptop", "desktop"))
    body = create_body(machine_type, name="keys")
    body.pop("ssh_key_ids", None)
    status, plan = api.post("/clusters/plan", body)
    assert status == 200 and plan["data"]["ssh_key_ids"] == [laptop.pk, desktop.pk]
    assert not any("No SSH key" in warning for warning in plan["data"]["warnings"])
    assert api.post("/clusters", body)[0] == 201
    assert set(Cluster.objects.get(name="keys").ssh_keys.all()) == {laptop, desktop}

    status, plan = api.post("/clusters/plan", create_body(machine_type, name="nokeys", ssh_key_ids=[]))
    assert plan["data"]["ssh_key_ids"] == []
    assert any(warning.startswith("No SSH key: nobody could log in") for warning in plan["data"]["warnings"])
    assert api.post("/clusters", create_body(machine_type, name="nokeys", ssh_key_ids=[]))[0] == 201
    assert not Cluster.objects.get(name="nokeys").ssh_keys.exists()


def test_another_workspaces_ssh_key_is_unknown(api, machine_type, outsider):
    from accounts.models import Membership

    theirs = SSHKey.objects.create(workspace=Membership.objects.get(user=outsider).workspace, name="theirs",
                                   public_key="ssh-ed25519 AAAA x", fingerprint="SHA256:x")
    status, body = api.post("/clusters", create_body(machine_type, ssh_key_ids=[theirs.pk]))
    assert status == 400 and "ssh_key_ids" in error_of(body)["details"]


def test_create_without_the_balance_is_402_with_required_and_available(api, machine_type, workspace):
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("9.99"))
    status, body = api.post("/clusters", create_body(machine_type))
    assert status == 402
    error = error_of(body)
    assert error["code"] == "insufficient_credits"
    assert error["details"] == {"required": "10.00", "available": "9.99"}


def test_create_more_machines_than_are_free_is_409_offer_unavailable(api, environment):
    small = machine_type_with_hosts(2)
    make_cluster(environment, small, name="first")
    status, body = api.post("/clusters", create_body(small, name="second"))
    assert status == 409 and error_of(body)["code"] == "offer_unavailable"


def test_an_idempotency_key_replays_the_first_result(api, machine_type):
    headers = {"Idempotency-Key": "create-train-1"}
    first_status, first = api.post("/clusters", create_body(machine_type), headers=headers)
    second_status, second = api.post("/clusters", create_body(machine_type), headers=headers)
    assert first_status == second_status == 201
    assert second == first
    assert api.last.headers["Idempotent-Replayed"] == "true"
    assert Cluster.objects.count() == 1


def test_an_idempotency_key_reused_for_another_body_is_409(api, machine_type):
    headers = {"Idempotency-Key": "k1"}
    api.post("/clusters", create_body(machine_type), headers=headers)
    status, body = api.post("/clusters", create_body(machine_type, name="other"), headers=headers)
    assert status == 409 and error_of(body)["code"] == "idempotency_key_reused"
    assert Cluster.objects.count() == 1


def test_idempotency_keys_belong_to_one_api_key(api, dev_api, machine_type):
    api.post("/clusters", create_body(machine_type), headers={"Idempotency-Key": "same"})
    status, _ = dev_api.post("/clusters", create_body(machine_type, name="theirs"), headers={"Idempotency-Key": "same"})
    assert status == 201
    assert Cluster.objects.count() == 2
    assert IdempotentRequest.objects.count() == 2


def test_a_failed_create_is_not_remembered_so_a_retry_can_succeed(api, machine_type, workspace):
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal(0))
    assert api.post("/clusters", create_body(machine_type), headers={"Idempotency-Key": "r"})[0] == 402
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal(100))
    assert api.post("/clusters", create_body(machine_type), headers={"Idempotency-Key": "r"})[0] == 201


# -- environments ------------------------------------------------------------------------------


def test_x_environment_picks_the_environment_by_name_or_id(owner_key, workspace, machine_type):
    staging = Environment.objects.create(workspace=workspace, name="staging")
    make_cluster(staging, machine_type, name="in-staging")
    assert ApiClient(owner_key).get("/clusters")[1]["data"] == []
    by_name = ApiClient(owner_key, environment="staging").get("/clusters")[1]["data"]
    by_id = ApiClient(owner_key, environment=str(staging.pk)).get("/clusters")[1]["data"]
    assert [c["name"] for c in by_name] == [c["name"] for c in by_id] == ["in-staging"]
    assert by_name[0]["environment"] == "staging"


def test_an_unknown_environment_is_404(owner_key):
    status, body = ApiClient(owner_key, environment="prod-typo").get("/clusters")
    assert status == 404 and error_of(body)["code"] == "environment_not_found"


def test_a_cluster_of_another_environment_answers_404(owner_key, workspace, machine_type):
    staging = Environment.objects.create(workspace=workspace, name="staging")
    cluster = make_cluster(staging, machine_type)
    assert ApiClient(owner_key).get(f"/clusters/{cluster.pk}")[0] == 404
    assert ApiClient(owner_key, environment="staging").get(f"/clusters/{cluster.pk}")[0] == 200


# -- one cluster -------------------------------------------------------------------------------


def test_cluster_detail_has_status_price_billing_environment_and_nodes(api, environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    status, body = api.get(f"/clusters/{cluster.pk}")
    assert status == 200
    data = body["data"]
    assert data["status"] == "ready"
    assert data["termination_reason"] is None
    assert data["price_per_hour"] == "5.00"
    assert data["billing_started_at"] is not None
    assert data["environment"] == "default"
    keys = ("name", "role", "status", "private_ip")
    assert [{k: n[k] for k in keys} for n in data["nodes"]] == [
        {"name": "node-0", "role": "head", "status": "ready", "private_ip": "10.77.0.1"},
        {"name": "node-1", "role": "worker", "status": "ready", "private_ip": "10.77.0.2"},
    ]


def test_another_workspaces_clusters_answer_404_to_every_endpoint(outsider_api, environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    for method, path in [
        ("GET", f"/clusters/{cluster.pk}"), ("GET", f"/clusters/{cluster.pk}/events"),
        ("DELETE", f"/clusters/{cluster.pk}"), ("POST", f"/clusters/{cluster.pk}/retry-install"),
        ("POST", f"/clusters/{cluster.pk}/workers"), ("DELETE", f"/clusters/{cluster.pk}/nodes/node-1"),
    ]:
        status, body = outsider_api.call(method, path)
        assert status == 404, (method, path)
        assert error_of(body)["code"] == "not_found"
    assert outsider_api.get("/clusters")[1]["data"] == []
    cluster.refresh_from_db()
    assert cluster.status == Status.PROVISIONING


def test_a_cluster_id_that_is_not_a_number_is_404(api):
    assert api.get("/clusters/abc")[0] == 404
    assert api.get("/clusters/99999999999999999999999")[0] == 404


def test_events_list_oldest_first(api, environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    status, body = api.get(f"/clusters/{cluster.pk}/events")
    assert status == 200
    events = [e["event"] for e in body["data"]]
    assert events[0] == "created" and events[-1] == "ready"
    assert set(body["data"][0]) == {"id", "created_at", "actor", "event", "label", "message", "reason", "audit_event_id"}
    assert [e["label"] for e in body["data"]][:1] == ["Created"] and body["data"][-1]["label"] == "Ready"
    # The create is an action: its event links to the audit entry; the lifecycle's own steps are not.
    assert body["data"][0]["audit_event_id"] is not None and body["data"][-1]["audit_event_id"] is None


def test_delete_terminates_with_202_then_409_once_terminated(api, environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    status, body = api.delete(f"/clusters/{cluster.pk}")
    assert status == 202
    assert body["data"]["status"] == "terminating"
    assert body["data"]["termination_reason"] == "user_requested"
    assert api.delete(f"/clusters/{cluster.pk}")[0] == 202  # asking again while it stops is fine
    drive(cluster)
    assert cluster.status == Status.TERMINATED
    status, body = api.delete(f"/clusters/{cluster.pk}")
    assert status == 409 and error_of(body)["code"] == "already_terminated"


def test_a_node_cannot_be_terminated_on_its_own(api, environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    status, body = api.delete(f"/clusters/{cluster.pk}/nodes/node-1")
    assert status == 409
    error = error_of(body)
    assert error["code"] == "node_terminate_refused"
    assert "Terminate the whole cluster" in error["message"]
    assert api.delete(f"/clusters/{cluster.pk}/nodes/node-7")[0] == 404


def test_retry_install_needs_a_degraded_cluster(api, environment):
    broken = machine_type_with_hosts(2)
    lab.inject(broken.hosts, fault=HostFault.INSTALL_FAILS)
    cluster = make_cluster(environment, broken, software="slurm")
    status, body = api.post(f"/clusters/{cluster.pk}/retry-install")
    assert status == 409 and error_of(body)["code"] == "not_degraded"
    drive(cluster)
    assert cluster.status == Status.DEGRADED
    status, body = api.post(f"/clusters/{cluster.pk}/retry-install")
    assert status == 202 and body["data"]["status"] == "installing"


def test_workers_are_added_to_a_ready_cluster_only(api, environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    status, body = api.post(f"/clusters/{cluster.pk}/workers", {"count": 1})
    assert status == 409 and error_of(body)["code"] == "not_ready"
    drive(cluster)
    status, body = api.post(f"/clusters/{cluster.pk}/workers", {"count": 0})
    assert status == 400 and "count" in error_of(body)["details"]
    status, body = api.post(f"/clusters/{cluster.pk}/workers", {"count": 2})
    assert status == 202
    assert body["data"]["machines"] == 4
    assert [n["name"] for n in body["data"]["nodes"]][-2:] == ["node-2", "node-3"]


def test_adding_more_workers_than_are_free_is_409(api, environment):
    machine_type = machine_type_with_hosts(3)
    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    status, body = api.post(f"/clusters/{cluster.pk}/workers", {"count": 2})
    assert status == 409 and error_of(body)["code"] == "offer_unavailable"


def test_clusters_list_can_filter_by_status(api, environment, machine_type):
    ready = make_cluster(environment, machine_type, name="ready-one")
    drive(ready)
    make_cluster(environment, machine_type, name="new-one")
    assert [c["name"] for c in api.get("/clusters", status="ready")[1]["data"]] == ["ready-one"]
    assert len(api.get("/clusters", status="live")[1]["data"]) == 2
    assert api.get("/clusters", status="bogus")[0] == 400


# -- billing and quotes ------------------------------------------------------------------------


def test_balance_shows_credits_burn_rate_hours_and_the_budget(api, environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    status, body = api.get("/billing/balance")
    assert status == 200
    data = body["data"]
    assert data["credits_balance"] == "1000.00"
    assert data["active_usage_cost_per_hour"] == "5.00"
    assert data["hours_remaining"] == "200.00"
    assert data["monthly_budget"] == "5000.00"
    assert data["budget_remaining"] is not None


def test_a_developers_key_sees_the_balance_but_not_usage(dev_api, environment, machine_type):
    status, body = dev_api.get("/billing/balance")
    assert status == 200 and "credits_balance" in body["data"]
    status, body = dev_api.get("/billing/usage")
    assert status == 403 and error_of(body)["code"] == "forbidden"
    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    status, body = dev_api.get(f"/billing/usage/{cluster.pk}")
    assert status == 403 and error_of(body)["code"] == "forbidden"


def test_usage_lists_one_line_per_cluster_and_its_rows_only_when_asked(api, environment, machine_type):
    from billing.services import meter_cluster

    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    meter_cluster(cluster.pk)
    status, body = api.get("/billing/usage")
    assert status == 200
    [line] = body["data"]
    assert line["cluster_id"] == cluster.pk and line["name"] == "train"
    assert line["description"] == "Cluster usage train"
    assert line["machines"] == 2 and line["accruing"] is True and line["rows"] is None
    status, body = api.get("/billing/usage", rows="true")
    [with_rows] = body["data"]
    assert [r["node"] for r in with_rows["rows"]] == ["node-0", "node-1"]
    assert Decimal(with_rows["amount"]) == sum(Decimal(r["amount"]) for r in with_rows["rows"]) == Decimal(line["amount"])
    assert set(with_rows["rows"][0]) >= {"node", "gpu", "start", "end", "hours", "rate", "amount"}
    assert api.get("/billing/usage", rows="maybe")[0] == 400


def test_a_usage_line_opens_to_its_machines(api, environment, machine_type):
    from billing.services import meter_cluster

    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    meter_cluster(cluster.pk)
    month = f"{timezone.now():%Y-%m}"
    status, body = api.get(f"/billing/usage/{cluster.pk}", month=month)
    assert status == 200 and body["meta"]["month"] == month
    line = body["data"]
    assert line["description"] == "Cluster usage train" and line["machines"] == 2
    assert [r["node"] for r in line["rows"]] == ["node-0", "node-1"]
    assert Decimal(line["amount"]) == sum(Decimal(r["amount"]) for r in line["rows"])
    [listed] = api.get("/billing/usage")[1]["data"]
    assert listed["amount"] == line["amount"]


def test_a_usage_line_of_an_unknown_cluster_or_month_is_refused(api, outsider_api, environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    status, body = api.get("/billing/usage/999999")
    assert status == 404 and error_of(body)["code"] == "not_found"
    status, body = outsider_api.get(f"/billing/usage/{cluster.pk}")
    assert status == 404 and error_of(body)["code"] == "not_found"
    status, body = api.get(f"/billing/usage/{cluster.pk}", month="2024-01")  # no usage that month
    assert status == 404
    status, body = api.get(f"/billing/usage/{cluster.pk}", month="2026-13")
    assert status == 400 and "month" in error_of(body)["details"]
    for bad in ("0", str(2**63), "abc"):  # a path id that is not an id names nothing, as elsewhere
        status, body = api.get(f"/billing/usage/{bad}")
        assert status == 404 and error_of(body)["code"] == "not_found", bad


@pytest.mark.parametrize("month", ["June", "2026-1", "2026-13", "1999-12", "9999-12"])
def test_usage_month_must_be_yyyy_mm_in_range(api, month):
    status, body = api.get("/billing/usage", month=month)
    assert status == 400 and "month" in error_of(body)["details"]


def test_usage_of_a_month_in_range_is_listed(api):
    status, body = api.get("/billing/usage", month="2024-01")
    assert status == 200 and body["data"] == [] and body["meta"]["month"] == "2024-01"


def test_a_quote_request_is_stored_and_answered_201(api):
    from quotes.models import QuoteRequest

    status, body = api.post("/quotes", {"contact_name": "Ada", "email": "ada@example.com", "gpu": "H100",
                                        "machines": 128, "network": "infiniband"})
    assert status == 201
    assert body["data"]["machines"] == 128 and body["data"]["network"] == "infiniband"
    assert QuoteRequest.objects.get().email == "ada@example.com"


def test_a_quote_request_with_missing_fields_is_400(api):
    status, body = api.post("/quotes", {"gpu": "H100"})
    assert status == 400
    assert {"contact_name", "email", "machines"} <= set(error_of(body)["details"])


def test_create_with_the_name_of_a_live_cluster_is_409_name_taken(api, machine_type, environment):
    first_status, first = api.post("/clusters", create_body(machine_type, name="same"))
    status, body = api.post("/clusters", create_body(machine_type, name="same"))
    assert first_status == 201
    assert status == 409 and error_of(body)["code"] == "name_taken"
