"""Webhook endpoints of the workspace (Owners and Managers): add, change, remove, test-send,
and the delivery log with re-send."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Status

from api import schemas
from api.app import ApiContext, ApiError, context, not_found, ok, page, responses
from webhooks import services
from webhooks.models import Delivery, Endpoint

router = Router(tags=["Webhooks"])


def _manager(request: HttpRequest) -> ApiContext:
    ctx = context(request)
    if not ctx.membership.can_manage_members:
        raise ApiError(403, "forbidden", "Webhooks are managed by the workspace's Owners and Managers; "
                       "this key acts for a Developer.")
    return ctx


def _endpoint(request: HttpRequest, endpoint_id: int) -> Endpoint:
    endpoint = services.endpoints_of(_manager(request).workspace).filter(pk=endpoint_id).first()
    if endpoint is None:
        raise not_found("That webhook endpoint")
    return endpoint


@router.get("webhooks", operation_id="listWebhookEndpoints", summary="The workspace's webhook endpoints",
            response=responses({200: schemas.list_envelope(schemas.WebhookEndpoint)}, 400, 403))
def list_endpoints(request: HttpRequest, pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    return page(services.endpoints_of(_manager(request).workspace), pages)


@router.post("webhooks", operation_id="createWebhookEndpoint",
             summary="Add an endpoint; the answer carries its signing secret",
             description="Each event is POSTed as JSON with `Runcrate-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "
                         "\"<t>.<body>\" with the secret>` and `Runcrate-Event-Id`. URLs must use HTTPS on a public "
                         "address (400 webhook_url_refused otherwise).",
             response=responses({201: schemas.envelope(schemas.WebhookEndpointWithSecret)}, 400, 403))
def create_endpoint(request: HttpRequest, payload: schemas.CreateWebhookEndpoint) -> Status:
    ctx = _manager(request)
    endpoint = services.create_endpoint(workspace=ctx.workspace, url=payload.url, events=payload.events,
                                        description=payload.description, created_by=ctx.api_key.created_by)
    return Status(201, ok(_with_secret(endpoint)))


@router.get("webhooks/{endpoint_id}", operation_id="getWebhookEndpoint", summary="One endpoint with its secret",
            response=responses({200: schemas.envelope(schemas.WebhookEndpointWithSecret)}, 403))
def get_endpoint(request: HttpRequest, endpoint_id: schemas.PathId) -> dict[str, Any]:
    endpoint = _endpoint(request, endpoint_id)
    return ok(_with_secret(endpoint))


@router.patch("webhooks/{endpoint_id}", operation_id="updateWebhookEndpoint",
              summary="Change an endpoint's URL, events, description, or switch it off and on",
              response=responses({200: schemas.envelope(schemas.WebhookEndpoint)}, 400, 403))
def update_endpoint(request: HttpRequest, endpoint_id: schemas.PathId, payload: schemas.UpdateWebhookEndpoint) -> dict[str, Any]:
    endpoint = _endpoint(request, endpoint_id)
    services.update_endpoint(endpoint, url=payload.url, events=payload.events, description=payload.description,
                             is_active=payload.is_active)
    return ok(endpoint)


@router.delete("webhooks/{endpoint_id}", operation_id="deleteWebhookEndpoint", summary="Remove an endpoint and its log",
               response=responses({200: schemas.envelope(schemas.WebhookEndpoint)}, 403))
def delete_endpoint(request: HttpRequest, endpoint_id: schemas.PathId) -> dict[str, Any]:
    endpoint = _endpoint(request, endpoint_id)
    answer = schemas.WebhookEndpoint.model_validate(endpoint).model_dump()
    services.delete_endpoint(endpoint)
    return ok(answer)


@router.post("webhooks/{endpoint_id}/rotate-secret", operation_id="rotateWebhookSecret",
             summary="Make a new signing secret; the answer carries it",
             description="Deliveries are signed with the new secret from now on; the old one stops verifying.",
             response=responses({200: schemas.envelope(schemas.WebhookEndpointWithSecret)}, 403))
def rotate_secret(request: HttpRequest, endpoint_id: schemas.PathId) -> dict[str, Any]:
    endpoint = _endpoint(request, endpoint_id)
    services.rotate_secret(endpoint)
    return ok(_with_secret(endpoint))


@router.post("webhooks/{endpoint_id}/test", operation_id="testWebhookEndpoint",
             summary="Send a webhook.test event to this endpoint",
             response=responses({202: schemas.envelope(schemas.WebhookDelivery)}, 403))
def test_endpoint(request: HttpRequest, endpoint_id: schemas.PathId) -> Status:
    delivery = services.send_test_event(_endpoint(request, endpoint_id))
    return Status(202, ok(_fresh(delivery.pk)))


@router.get("webhooks/{endpoint_id}/deliveries", operation_id="listWebhookDeliveries",
            summary="The endpoint's delivery log, newest first: status, attempts, answers and response times",
            response=responses({200: schemas.list_envelope(schemas.WebhookDelivery)}, 400, 403))
def list_deliveries(request: HttpRequest, endpoint_id: schemas.PathId, pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    return page(services.deliveries_of(_endpoint(request, endpoint_id)), pages)


@router.post("webhooks/{endpoint_id}/deliveries/{delivery_id}/resend", operation_id="resendWebhookDelivery",
             summary="Send a delivery's event again (same event id) as a new delivery",
             response=responses({202: schemas.envelope(schemas.WebhookDelivery)}, 403))
def resend_delivery(request: HttpRequest, endpoint_id: schemas.PathId, delivery_id: schemas.PathId) -> Status:
    endpoint = _endpoint(request, endpoint_id)
    delivery = Delivery.objects.filter(endpoint=endpoint, pk=delivery_id).select_related("event", "endpoint").first()
    if delivery is None:
        raise not_found("That delivery")
    return Status(202, ok(_fresh(services.resend(delivery).pk)))


def _with_secret(endpoint: Endpoint) -> dict[str, Any]:
    return {**schemas.WebhookEndpoint.model_validate(endpoint).model_dump(), "secret": endpoint.secret}


def _fresh(delivery_id: int) -> Delivery:
    return Delivery.objects.select_related("event").prefetch_related("attempt_log").get(pk=delivery_id)
