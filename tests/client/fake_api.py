"""A small, real HTTP server that answers like /api/v1 (issue 5's contract), for client tests.

It runs on 127.0.0.1 in a thread, keeps its state in memory and lets a test steer it: a cluster
walks provisioning -> installing -> ready one step per GET (or to failed/degraded when its name says
so), `fail_next` makes the next request answer an error, `html_mode` makes it answer like a server
that is not the API. It is deliberately small: the real server is tested against the same contract
elsewhere; this one only has to answer in the same shape.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

VALID_KEY = "rc_live_testkey0123456789abcdef"
DEACTIVATED_KEY = "rc_live_deactivated0000000000000"
ENVIRONMENTS = {"default": "env_1", "staging": "env_2"}

GPU_TYPES = [
    {"id": "gpu_h100", "name": "H100", "memory_gb": 80},
    {"id": "gpu_a100", "name": "A100", "memory_gb": 80},
]

OFFERS = [
    {
        "id": "off_h100_vm", "gpu": "H100", "gpus_per_machine": 8, "machine_kind": "vm", "location": "us-east-1",
        "interconnect": "ethernet 100G", "community": False, "available_machines": 16,
        "price_per_machine_hour": "19.60", "software": ["none", "slurm", "kubernetes", "ray"],
    },
    {
        "id": "off_h100_ct", "gpu": "H100", "gpus_per_machine": 1, "machine_kind": "container", "location": "eu-west-2",
        "interconnect": "ethernet 25G", "community": False, "available_machines": 6,
        "price_per_machine_hour": "2.45", "software": ["none", "slurm", "ray"],
    },
    {
        "id": "off_h100_comm", "gpu": "H100", "gpus_per_machine": 4, "machine_kind": "bare_metal",
        "location": "community-de", "interconnect": "ethernet 10G", "community": True, "available_machines": 4,
        "price_per_machine_hour": "6.00", "software": ["none", "slurm", "kubernetes", "ray"],
    },
    {
        "id": "off_a100_vm", "gpu": "A100", "gpus_per_machine": 8, "machine_kind": "vm", "location": "us-west-2",
        "interconnect": "ethernet 100G", "community": False, "available_machines": 8,
        "price_per_machine_hour": "11.00", "software": ["none", "slurm", "kubernetes", "ray"],
    },
]

# The steps a cluster walks through, one per GET of the cluster: (cluster status, node status).
HAPPY_PATH = [("provisioning", "booting"), ("provisioning", "joined"), ("installing", "installing"), ("ready", "ready")]


@dataclass
class FakeState:
    balance: Decimal = Decimal("500.00")
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    idempotency: dict[str, str] = field(default_factory=dict)
    quotes: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_next: list[tuple[int, str, str, dict[str, Any]]] = field(default_factory=list)
    html_mode: bool = False
    monthly_budget_remaining: str | None = None
    clock: int = 0

    def now(self) -> str:
        self.clock += 1
        return f"2025-06-01T10:{self.clock // 60:02d}:{self.clock % 60:02d}Z"


class ApiException(Exception):
    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        self.status, self.code, self.message, self.details = status, code, message, details or {}


def offer_view(offer: dict[str, Any], machines: int | None) -> dict[str, Any]:
    count = machines or 2
    price = Decimal(offer["price_per_machine_hour"])
    return {**offer, "price_per_cluster_hour": str((price * count).quantize(Decimal("0.01")))}


class FakeApi:
    def __init__(self) -> None:
        self.state = FakeState()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeApi:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fail_next(self, status: int, code: str, message: str = "", details: dict[str, Any] | None = None) -> None:
        self.state.fail_next.append((status, code, message or code.replace("_", " "), details or {}))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                split = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(split.query).items()}
                with api.lock:
                    api.state.requests.append(
                        {"method": method, "path": split.path, "query": query, "headers": dict(self.headers),
                         "body": raw.decode() if raw else None}
                    )
                    if api.state.html_mode:
                        return self._send_raw(200, b"<html><body>Welcome to nginx</body></html>", "text/html")
                    try:
                        status, body = api.route(method, split.path, query, raw, self.headers)
                    except ApiException as exc:
                        headers = {"Retry-After": "7"} if exc.status == 429 else {}
                        return self._send(exc.status, {"error": {"code": exc.code, "message": exc.message,
                                                                 "details": exc.details}}, headers)
                self._send(status, body)

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                self._send_raw(status, json.dumps(body).encode(), "application/json", headers)

            def _send_raw(self, status: int, payload: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        return Handler

    # -- routing: returns (status, body) or raises ApiException

    def route(self, method: str, path: str, query: dict[str, str], raw: bytes, headers: Any) -> tuple[int, Any]:
        auth = headers.get("Authorization") or ""
        if auth == f"Bearer {DEACTIVATED_KEY}":
            raise ApiException(401, "unauthenticated", "This API key is deactivated.")
        if auth != f"Bearer {VALID_KEY}":
            raise ApiException(401, "unauthenticated", "Missing or invalid API key.")
        env = headers.get("X-Environment") or "default"
        if env not in ENVIRONMENTS and env not in ENVIRONMENTS.values():
            raise ApiException(404, "not_found", f"Environment {env!r} not found.")
        if self.state.fail_next:
            status, code, message, details = self.state.fail_next.pop(0)
            raise ApiException(status, code, message, details)
        if not path.startswith("/api/v1/"):
            raise ApiException(404, "not_found", "Not found.")
        parts = path[len("/api/v1/"):].strip("/").split("/")
        body = json.loads(raw) if raw else {}

        match method, parts:
            case "GET", ["gpu-types"]:
                return 200, self.page(GPU_TYPES, query)
            case "GET", ["cluster-offers"]:
                return 200, self.list_offers(query)
            case "POST", ["clusters"]:
                return self.create_cluster(body, headers.get("Idempotency-Key"), env)
            case "GET", ["clusters"]:
                items = sorted(self.state.clusters.values(), key=lambda c: c["created_at"], reverse=True)
                return 200, self.page([self.summary(c) for c in items], query)
            case "GET", ["clusters", cid]:
                return 200, {"data": self.advance(self.cluster(cid)), "meta": {}}
            case "GET", ["clusters", cid, "events"]:
                self.cluster(cid)
                return 200, self.page(self.state.events[cid], query)
            case "DELETE", ["clusters", cid]:
                cluster = self.cluster(cid)
                if cluster["status"] in ("terminated", "failed"):
                    raise ApiException(409, "already_terminated", "This cluster is already terminated.")
                cluster["status"] = "terminating"
                self.event(cid, "terminate_requested", "Termination requested.", actor="api")
                return 202, {"data": self.summary(cluster), "meta": {}}
            case "POST", ["clusters", cid, "retry-install"]:
                cluster = self.cluster(cid)
                if cluster["status"] != "degraded":
                    raise ApiException(409, "not_degraded", "Only a degraded cluster can retry its install.")
                cluster["status"] = "installing"
                return 202, {"data": self.summary(cluster), "meta": {}}
            case "POST", ["clusters", cid, "workers"]:
                cluster = self.cluster(cid)
                count = body.get("count", 1)
                if not isinstance(count, int) or count < 1:
                    raise ApiException(400, "invalid", "Invalid input.", {"count": ["Must be at least 1."]})
                return 202, {"data": self.summary(cluster), "meta": {}}
            case "DELETE", ["clusters", cid, "nodes", name]:
                self.cluster(cid)
                raise ApiException(
                    409, "node_terminate_refused",
                    f"A node cannot be terminated on its own: {name} ends with its cluster. Terminate the cluster.",
                )
            case "GET", ["billing", "balance"]:
                running = [c for c in self.state.clusters.values() if c["status"] in ("ready", "installing", "degraded")]
                per_hour = sum((Decimal(c["price_per_hour"]) for c in running), Decimal(0))
                data: dict[str, Any] = {
                    "credits_balance": str(self.state.balance),
                    "active_usage_cost_per_hour": str(per_hour),
                    "hours_remaining": str((self.state.balance / per_hour).quantize(Decimal("0.01"))) if per_hour else None,
                }
                if self.state.monthly_budget_remaining is not None:
                    data["budget_remaining"] = self.state.monthly_budget_remaining
                return 200, {"data": data, "meta": {}}
            case "GET", ["billing", "usage"]:
                return 200, self.page(self.usage(), query)
            case "POST", ["quotes"]:
                missing = {k: ["This field is required."] for k in ("contact_name", "email", "gpu", "machines")
                           if not body.get(k)}
                if missing:
                    raise ApiException(400, "invalid", "Invalid input.", missing)
                quote = {"id": f"quo_{len(self.state.quotes) + 1}", **body}
                self.state.quotes.append(quote)
                return 201, {"data": quote, "meta": {}}
        raise ApiException(404, "not_found", "Not found.")

    def page(self, items: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
        limit = int(query.get("limit", 50))
        offset = int(query.get("offset", 0))
        return {"data": items[offset:offset + limit], "meta": {"total": len(items), "limit": limit, "offset": offset}}

    def list_offers(self, query: dict[str, str]) -> dict[str, Any]:
        machines = int(query["machines"]) if query.get("machines") else None
        community = query.get("include_community") in ("true", "1")
        found = [
            offer_view(o, machines) for o in OFFERS
            if (not query.get("gpu") or o["gpu"].lower() == query["gpu"].lower())
            and (machines is None or o["available_machines"] >= machines)
            and (community or not o["community"])
        ]
        found.sort(key=lambda o: Decimal(o["price_per_cluster_hour"]))
        return self.page(found, query)

    def create_cluster(self, body: dict[str, Any], key: str | None, env: str) -> tuple[int, Any]:
        if key and key in self.state.idempotency:
            return 201, {"data": self.summary(self.state.clusters[self.state.idempotency[key]]), "meta": {}}
        errors: dict[str, list[str]] = {}
        if not body.get("name"):
            errors["name"] = ["This field is required."]
        machines = body.get("machines")
        if not isinstance(machines, int) or not 2 <= machines <= 64:
            errors["machines"] = ["Must be between 2 and 64."]
        offer = next((o for o in OFFERS if o["id"] == body.get("offer_id")), None)
        if offer is None:
            errors["offer_id"] = ["Unknown offer."]
        software = body.get("software", "none")
        if offer is not None and software not in offer["software"]:
            errors["software"] = [f"{software} is not offered on {offer['machine_kind']} machines."]
        if offer is not None and offer["community"] and body.get("volume_id"):
            errors["volume_id"] = ["A volume cannot be attached to a community cluster."]
        if errors:
            raise ApiException(400, "invalid", "Invalid input.", errors)
        assert offer is not None and isinstance(machines, int)
        if machines > offer["available_machines"]:
            raise ApiException(409, "offer_unavailable", "This offer cannot start that many machines now.")
        price = (Decimal(offer["price_per_machine_hour"]) * machines).quantize(Decimal("0.01"))
        required = max(price, Decimal("10.00"))
        if self.state.balance < required:
            raise ApiException(402, "insufficient_credits", "Your balance does not cover one hour of this cluster.",
                               {"required": str(required), "available": str(self.state.balance)})
        cid = f"cl_{uuid.uuid4().hex[:8]}"
        cluster = {
            "id": cid, "name": body["name"], "status": "provisioning", "termination_reason": None,
            "price_per_hour": str(price), "billing_started_at": None, "environment": env,
            "machines": machines, "software": software, "offer": offer_view(offer, machines),
            "created_at": self.state.now(),
            "nodes": [
                {"name": f"node-{i}", "role": "head" if i == 0 else "worker", "status": "reserved",
                 "private_ip": None}
                for i in range(machines)
            ],
        }
        self.state.clusters[cid] = cluster
        self.state.events[cid] = []
        self.state.steps[cid] = 0
        self.event(cid, "created", f"Reserved {machines} machines.", actor="api")
        if key:
            self.state.idempotency[key] = cid
        return 201, {"data": self.summary(cluster), "meta": {}}

    def cluster(self, cid: str) -> dict[str, Any]:
        if cid not in self.state.clusters:
            raise ApiException(404, "not_found", f"Cluster {cid} not found.")
        return self.state.clusters[cid]

    def summary(self, cluster: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in cluster.items()}

    def event(self, cid: str, event: str, message: str, actor: str = "system", reason: str | None = None) -> None:
        self.state.events[cid].append(
            {"created_at": self.state.now(), "actor": actor, "event": event, "message": message, "reason": reason}
        )

    def advance(self, cluster: dict[str, Any]) -> dict[str, Any]:
        """Move the cluster one step along its path each time it is read."""
        cid = cluster["id"]
        if cluster["status"] == "terminating":
            cluster["status"] = "terminated"
            cluster["termination_reason"] = "user_request"
            for node in cluster["nodes"]:
                node["status"] = "terminated"
            self.event(cid, "terminated", "Every machine stopped; billing ended.", reason="user_request")
            return cluster
        if cluster["status"] in ("ready", "failed", "degraded", "terminated"):
            return cluster
        step = self.state.steps[cid]
        if "fail" in cluster["name"] and step >= 1:
            cluster["status"] = "failed"
            cluster["termination_reason"] = "join_timeout"
            for node in cluster["nodes"]:
                node["status"] = "released"
            self.event(cid, "failed", "node-1 never joined the private network; every machine was released.",
                       reason="join_timeout")
            return cluster
        if "degrade" in cluster["name"] and step >= 2:
            cluster["status"] = "degraded"
            for node in cluster["nodes"]:
                node["status"] = "install_failed"
            self.event(cid, "install_failed", "Slurm failed to install on node-0.")
            return cluster
        status, node_status = HAPPY_PATH[min(step, len(HAPPY_PATH) - 1)]
        cluster["status"] = status
        for i, node in enumerate(cluster["nodes"]):
            node["status"] = node_status
            if node_status != "booting":
                node["private_ip"] = f"10.77.0.{i + 1}"
        if status != "provisioning" and cluster["billing_started_at"] is None:
            cluster["billing_started_at"] = self.state.now()
            self.event(cid, "billing_started", "Every machine joined; billing started.")
        if status == "ready":
            self.event(cid, "ready", "Every node is ready.")
        self.state.steps[cid] = step + 1
        return cluster

    def usage(self) -> list[dict[str, Any]]:
        items = []
        for cluster in self.state.clusters.values():
            if not cluster["billing_started_at"]:
                continue
            rate = Decimal(cluster["offer"]["price_per_machine_hour"])
            rows = [
                {"node": n["name"], "gpu": cluster["offer"]["gpu"], "start": cluster["billing_started_at"],
                 "end": None, "hours": "1.50", "rate": str(rate), "amount": str((rate * Decimal("1.5")).quantize(Decimal("0.01")))}
                for n in cluster["nodes"]
            ]
            items.append({
                "cluster_id": cluster["id"], "description": f"Cluster usage {cluster['name']}",
                "amount": str(sum(Decimal(r["amount"]) for r in rows)), "rows": rows,
            })
        return items
