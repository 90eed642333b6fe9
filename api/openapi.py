"""The OpenAPI 3.1 description of /api/v1, kept by hand next to the views it describes.

tests/api/test_openapi.py runs schemathesis against it, so a view and its description cannot drift
apart silently: an answer whose shape or status the schema does not allow fails the test.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from clusters.models import Reason, Software, Status
from offers.models import Interconnect, MachineKind

NULLABLE_STRING = {"type": ["string", "null"]}
MONEY = {"type": "string", "pattern": r"^-?\d+\.\d{2,4}$", "description": "US dollars as a decimal string."}
NULLABLE_MONEY = {**MONEY, "type": ["string", "null"]}
TIMESTAMP = {"type": "string", "format": "date-time"}
NULLABLE_TIMESTAMP = {"type": ["string", "null"], "format": "date-time"}


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict, required: list[str] | None = None, description: str = "") -> dict:
    node: dict[str, Any] = {"type": "object", "properties": properties,
                            "required": list(properties) if required is None else required}
    if description:
        node["description"] = description
    return node


def envelope(data: dict) -> dict:
    return obj({"data": data, "meta": {"type": "object"}})


def list_envelope(item: dict) -> dict:
    return obj({"data": {"type": "array", "items": item}, "meta": ref("ListMeta")})


def json_response(description: str, schema: dict) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def errors(*statuses: int) -> dict:
    return {str(s): {"$ref": f"#/components/responses/{ERROR_RESPONSES[s][0]}"} for s in statuses}


ERROR_RESPONSES = {
    400: ("BadRequest", "Bad input; `details` maps each field to its problems."),
    401: ("Unauthenticated", "No key, an unknown key, or a deactivated key."),
    402: ("InsufficientCredits", "The balance does not cover one hour of the whole cluster (never less than $10); "
          "`details` has `required` and `available`."),
    403: ("Forbidden", "The key's role may not do this (billing is for Owners and Managers)."),
    404: ("NotFound", "No such object in this workspace and environment (other workspaces' objects answer 404 too)."),
    409: ("Conflict", "The state does not allow it: offer_unavailable, node_terminate_refused, not_degraded, "
          "not_ready, already_terminated, idempotency_key_reused."),
    429: ("RateLimited", "Too many requests for this key; retry after `Retry-After` seconds."),
}
COMMON = (401, 404, 429)

PAGINATION = [
    {"name": "limit", "in": "query", "required": False, "description": "Items per page (1–200, default 50).",
     "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}},
    {"name": "offset", "in": "query", "required": False, "description": "Items to skip (default 0).",
     "schema": {"type": "integer", "minimum": 0, "default": 0}},
]
ENVIRONMENT_HEADER = {
    "name": "X-Environment", "in": "header", "required": False,
    "description": "Environment name or id to act in; the workspace's default when absent.",
    "schema": {"type": "string"},
}
CLUSTER_ID = {"name": "cluster_id", "in": "path", "required": True, "description": "The cluster's id.",
              "schema": {"type": "integer", "minimum": 1}}


def op(operation_id: str, summary: str, tag: str, responses: dict, *, description: str = "",
       parameters: list | None = None, body: dict | None = None, body_required: bool = True) -> dict:
    node: dict[str, Any] = {"operationId": operation_id, "summary": summary, "tags": [tag],
                            "parameters": [ENVIRONMENT_HEADER, *(parameters or [])], "responses": responses}
    if description:
        node["description"] = description
    if body is not None:
        node["requestBody"] = {"required": body_required, "content": {"application/json": {"schema": body}}}
    return node


SCHEMAS: dict[str, Any] = {
    "Error": obj({"error": obj({
        "code": {"type": "string", "description": "Stable machine-readable code, e.g. insufficient_credits."},
        "message": {"type": "string", "description": "What went wrong and what to do, for people."},
        "details": {"type": "object", "description": "Per-field messages (400), required/available (402), …"},
    })}),
    "ListMeta": obj({
        "total": {"type": "integer", "minimum": 0}, "limit": {"type": "integer"}, "offset": {"type": "integer"},
    }),
    "GpuType": obj({
        "id": {"type": "string"}, "name": {"type": "string", "description": "Pass as `gpu` to cluster-offers."},
        "description": {"type": "string"}, "memory_gb": {"type": "integer"},
    }),
    "OfferSummary": obj({
        "id": {"type": "integer", "description": "The offer id to create a cluster from."},
        "gpu": {"type": "string"},
        "gpus_per_machine": {"type": "integer", "enum": [1, 2, 4, 8]},
        "machine_kind": {"type": "string", "enum": list(MachineKind.values)},
        "location": {"type": "string"}, "location_name": {"type": "string"},
        "interconnect": {"type": "string", "enum": list(Interconnect.values)},
        "community": {"type": "boolean", "description": "Independent operator's host: keep secrets off it."},
    }),
    "Offer": {"allOf": [ref("OfferSummary"), obj({
        "vcpus": {"type": "integer"}, "memory_gb": {"type": "integer"}, "disk_gb": {"type": "integer"},
        "machines": {"type": "integer", "description": "The cluster size the prices are for."},
        "available_machines": {"type": "integer", "description": "Machines of this offer free right now."},
        "price_per_machine_hour": MONEY,
        "price_per_cluster_hour": {**MONEY, "description": "price_per_machine_hour × machines."},
        "software": {"type": "array", "items": {"type": "string", "enum": list(Software.values)}},
        "warning": NULLABLE_STRING,
    })]},
    "Node": obj({
        "name": {"type": "string", "description": "node-0 (the head) … node-N-1."},
        "role": {"type": "string", "enum": ["head", "worker"]},
        "status": {"type": "string"},
        "private_ip": {"type": ["string", "null"], "description": "10.77.0.x once the node joined the network."},
        "step": NULLABLE_STRING, "detail": NULLABLE_STRING,
    }),
    "Cluster": obj({
        "id": {"type": "integer"}, "name": {"type": "string"},
        "status": {"type": "string", "enum": list(Status.values)},
        "termination_reason": {"type": ["string", "null"], "enum": [*Reason.values, None],
                               "description": "Why it was terminated or failed."},
        "failure_reason": {"type": ["string", "null"], "enum": [*Reason.values, None]},
        "environment": {"type": "string"}, "environment_id": {"type": "integer"},
        "machines": {"type": "integer"},
        "software": {"type": "string", "enum": list(Software.values)},
        "offer": ref("OfferSummary"),
        "volume_id": {"type": ["integer", "null"]},
        "price_per_machine_hour": MONEY,
        "price_per_hour": {**MONEY, "description": "The whole cluster per hour."},
        "created_at": TIMESTAMP,
        "billing_started_at": {**NULLABLE_TIMESTAMP, "description": "When every machine had joined."},
        "billing_ended_at": NULLABLE_TIMESTAMP, "ready_at": NULLABLE_TIMESTAMP,
        "terminated_at": NULLABLE_TIMESTAMP, "deadline_at": TIMESTAMP,
        "nodes": {"type": "array", "items": ref("Node")},
    }),
    "ClusterEvent": obj({
        "id": {"type": "integer"}, "created_at": TIMESTAMP,
        "actor": {"type": "string", "description": "A username, 'api key <prefix>' or 'system'."},
        "event": {"type": "string"}, "message": {"type": "string"},
        "reason": {"type": ["string", "null"]},
    }),
    "CreateCluster": obj({
        "name": {"type": "string", "description": "1–63 lowercase letters, digits and hyphens."},
        "offer_id": {"type": ["integer", "string"], "description": "An offer id from cluster-offers."},
        "machines": {"type": "integer", "minimum": 2, "maximum": 64},
        "software": {"type": "string", "enum": list(Software.values), "default": "none",
                     "description": "Kubernetes only on vm and bare_metal offers."},
        "volume_id": {"type": ["integer", "string", "null"], "description": "Not on community offers."},
        "ssh_key_ids": {"type": "array", "items": {"type": ["integer", "string"]}},
    }, required=["name", "offer_id", "machines"]),
    "AddWorkers": obj({"count": {"type": "integer", "minimum": 1, "maximum": 62, "default": 1}}, required=[]),
    "Balance": obj({
        "credits_balance": MONEY,
        "active_usage_cost_per_hour": MONEY,
        "hours_remaining": {"type": ["string", "null"], "description": "null when nothing is billed."},
        "environment": {"type": "string"},
        "monthly_budget": MONEY,
        "budget_spent": NULLABLE_MONEY,
        "budget_remaining": NULLABLE_MONEY,
    }),
    "UsageRow": obj({
        "node": {"type": "string"}, "gpu": {"type": "string"}, "start": TIMESTAMP,
        "end": {**NULLABLE_TIMESTAMP, "description": "null while the machine runs."},
        "hours": {"type": "string"}, "rate": MONEY, "amount": MONEY,
    }),
    "UsageItem": obj({
        "cluster_id": {"type": "integer"}, "name": {"type": "string"}, "environment_id": {"type": "integer"},
        "description": {"type": "string", "description": "\"Cluster usage <name>\"."},
        "amount": {**MONEY, "description": "Always the sum of its rows."},
        "rows": {"type": "array", "items": ref("UsageRow")},
    }),
    "CreateQuote": obj({
        "contact_name": {"type": "string"}, "email": {"type": "string", "format": "email"},
        "company": {"type": "string"}, "gpu": {"type": "string"},
        "machines": {"type": "integer", "minimum": 1},
        "network": {"type": "string", "enum": ["ethernet", "infiniband", "roce"]},
        "term": {"type": "string", "enum": ["on_demand", "reserved"]},
        "term_months": {"type": ["integer", "null"], "description": "Required for a reserved term."},
        "start_date": {"type": "string", "format": "date"}, "notes": {"type": "string"},
    }, required=["contact_name", "email", "gpu", "machines"]),
    "Volume": obj({
        "id": {"type": "integer"}, "name": {"type": "string"}, "size_gb": {"type": "integer"},
        "environment": {"type": "string"}, "created_at": TIMESTAMP,
    }),
    "CreateVolume": obj({
        "name": {"type": "string", "maxLength": 100, "description": "Lowercase letters, digits, . _ -"},
        "size_gb": {"type": "integer", "minimum": 1, "maximum": 100000},
    }, required=["name", "size_gb"]),
    "Quote": obj({
        "id": {"type": "integer"}, "status": {"type": "string"}, "contact_name": {"type": "string"},
        "email": {"type": "string"}, "company": {"type": "string"}, "gpu": {"type": "string"},
        "machines": {"type": "integer"}, "network": {"type": "string"}, "term": {"type": "string"},
        "term_months": {"type": ["integer", "null"]}, "start_date": {"type": ["string", "null"]},
        "notes": {"type": "string"}, "created_at": TIMESTAMP,
    }),
}


@cache
def schema() -> dict:
    error = json_response("", ref("Error"))
    cluster = json_response("The cluster.", envelope(ref("Cluster")))
    paths = {
        "/api/v1/gpu-types": {"get": op(
            "listGpuTypes", "List GPU models", "Catalogue", {
                "200": json_response("GPU models with active offers.", list_envelope(ref("GpuType"))),
                **errors(400, *COMMON)}, parameters=PAGINATION)},
        "/api/v1/cluster-offers": {"get": op(
            "listClusterOffers", "Offers that can start now", "Catalogue", {
                "200": json_response("Cheapest whole cluster first.", list_envelope(ref("Offer"))),
                **errors(400, *COMMON)},
            description="Only offers with `machines` free machines now. Community hosts are left out unless "
                        "`include_community` is true. Priced per machine, never per GPU.",
            parameters=[
                {"name": "gpu", "in": "query", "required": False, "schema": {"type": "string"},
                 "description": "GPU model, e.g. H100."},
                {"name": "machines", "in": "query", "required": False, "description": "Cluster size (default 2).",
                 "schema": {"type": "integer", "minimum": 2, "maximum": 64, "default": 2}},
                {"name": "include_community", "in": "query", "required": False,
                 "schema": {"type": "boolean", "default": False}},
                *PAGINATION,
            ])},
        "/api/v1/clusters": {
            "get": op("listClusters", "List clusters", "Clusters", {
                "200": json_response("Clusters of the environment, newest first.", list_envelope(ref("Cluster"))),
                **errors(400, *COMMON)},
                parameters=[{"name": "status", "in": "query", "required": False,
                             "description": "`live`, or one status.",
                             "schema": {"type": "string", "enum": ["live", *Status.values]}}, *PAGINATION]),
            "post": op("createCluster", "Create a cluster", "Clusters", {
                "201": json_response("Created; every machine is reserved and booting.", envelope(ref("Cluster"))),
                **errors(400, 402, 409, *COMMON)},
                description="Reserves every machine at once, or none. With an `Idempotency-Key` header, a retry "
                            "with the same key and body answers the first result (header `Idempotent-Replayed`); "
                            "the same key with another body is 409 idempotency_key_reused.",
                parameters=[{"name": "Idempotency-Key", "in": "header", "required": False,
                             "schema": {"type": "string", "maxLength": 255}}],
                body=ref("CreateCluster")),
        },
        "/api/v1/clusters/{cluster_id}": {
            "parameters": [CLUSTER_ID],
            "get": op("getCluster", "A cluster and its nodes", "Clusters", {"200": cluster, **errors(*COMMON)}),
            "delete": op("terminateCluster", "Terminate a cluster", "Clusters", {
                "202": json_response("Every machine is stopping; billing has ended.", envelope(ref("Cluster"))),
                **errors(409, *COMMON)}),
        },
        "/api/v1/clusters/{cluster_id}/events": {
            "parameters": [CLUSTER_ID],
            "get": op("listClusterEvents", "What happened to a cluster, oldest first", "Clusters", {
                "200": json_response("Events.", list_envelope(ref("ClusterEvent"))), **errors(400, *COMMON)},
                parameters=PAGINATION),
        },
        "/api/v1/clusters/{cluster_id}/retry-install": {
            "parameters": [CLUSTER_ID],
            "post": op("retryInstall", "Retry the software install of a degraded cluster", "Clusters", {
                "202": json_response("Installing again.", envelope(ref("Cluster"))), **errors(409, *COMMON)}),
        },
        "/api/v1/clusters/{cluster_id}/workers": {
            "parameters": [CLUSTER_ID],
            "post": op("addWorkers", "Add workers to a ready cluster", "Clusters", {
                "202": json_response("Workers reserved; each is billed from when it is up.", envelope(ref("Cluster"))),
                **errors(400, 402, 409, *COMMON)},
                body=ref("AddWorkers"), body_required=False),
        },
        "/api/v1/clusters/{cluster_id}/nodes/{node_name}": {
            "parameters": [CLUSTER_ID, {"name": "node_name", "in": "path", "required": True,
                                        "schema": {"type": "string"}, "description": "e.g. node-1"}],
            "delete": op("terminateNode", "Always refused: a node ends with its cluster", "Clusters",
                         {"409": {"$ref": "#/components/responses/Conflict"}, **errors(*COMMON)},
                         description="Answers 409 node_terminate_refused: terminate the whole cluster instead."),
        },
        "/api/v1/billing/balance": {"get": op(
            "getBalance", "Credits, burn rate and the environment's budget", "Billing", {
                "200": json_response("The balance.", envelope(ref("Balance"))), **errors(403, *COMMON)})},
        "/api/v1/billing/usage": {"get": op(
            "listUsage", "Usage in a month, one line per cluster", "Billing", {
                "200": json_response("One item per cluster with a row per machine.", list_envelope(ref("UsageItem"))),
                **errors(400, 403, *COMMON)},
            parameters=[{"name": "month", "in": "query", "required": False, "description": "YYYY-MM; default this month.",
                         "schema": {"type": "string", "pattern": r"^\d{4}-\d{2}$"}}, *PAGINATION])},
        "/api/v1/volumes": {
            "get": op("listVolumes", "Volumes of the environment", "Volumes", {
                "200": json_response("Volumes, by name.", list_envelope(ref("Volume"))), **errors(400, *COMMON)},
                parameters=PAGINATION),
            "post": op("createVolume", "Create a volume (attach it with volume_id when creating a cluster)", "Volumes", {
                "201": json_response("The volume.", envelope(ref("Volume"))), **errors(400, *COMMON)},
                body=ref("CreateVolume")),
        },
        "/api/v1/volumes/{volume_id}": {
            "parameters": [{"name": "volume_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "delete": op("deleteVolume", "Delete a volume no live cluster uses", "Volumes", {
                "200": json_response("The deleted volume.", envelope(ref("Volume"))), **errors(409, *COMMON)}),
        },
        "/api/v1/quotes": {"post": op(
            "createQuote", "Request a quote", "Quotes", {
                "201": json_response("Sales will answer by email.", envelope(ref("Quote"))), **errors(400, *COMMON)},
            description="Reserved capacity, clusters over 64 machines, InfiniBand or RoCE.",
            body=ref("CreateQuote"))},
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Runcrate Clusters API",
            "version": "1.0.0",
            "description": "GPU clusters of 2–64 machines. Authenticate with `Authorization: Bearer rc_live_…` "
                           "(make keys on the API keys page). Success bodies are `{data, meta}`; errors are "
                           "`{error: {code, message, details}}`; money is a decimal string in USD.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "rc_live_…"}},
            "schemas": SCHEMAS,
            "responses": {
                name: {**error, "description": description} for name, description in ERROR_RESPONSES.values()
            },
        },
    }
