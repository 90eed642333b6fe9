"""A tiny local HTTP server that answers like Stripe's API for the calls billing makes."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs


class FakeStripe:
    def __init__(self):
        self.requests: list[tuple[str, str, dict]] = []
        self.decline = False
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Request-Id", "req_fake")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake.requests.append(("GET", self.path, {}))
                if self.path.startswith("/v1/setup_intents/"):
                    seti = self.path.split("/")[3].split("?")[0]
                    return self._reply(200, {"id": seti, "object": "setup_intent", "payment_method": {
                        "id": "pm_card_1", "object": "payment_method", "card": {"brand": "visa", "last4": "4242"}}})
                self._reply(404, {"error": {"type": "invalid_request_error", "message": "no such path"}})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                fake.requests.append(("POST", self.path, form))
                n = len(fake.requests)
                if self.path == "/v1/checkout/sessions":
                    return self._reply(200, {"id": f"cs_test_{n}", "object": "checkout.session", "mode": form.get("mode"),
                                             "url": f"https://checkout.stripe.test/c/pay/cs_test_{n}"})
                if self.path == "/v1/customers":
                    return self._reply(200, {"id": "cus_1", "object": "customer"})
                if self.path == "/v1/payment_intents":
                    if fake.decline:
                        return self._reply(402, {"error": {"type": "card_error", "code": "card_declined",
                                                           "message": "Your card was declined.", "decline_code": "insufficient_funds"}})
                    return self._reply(200, {"id": f"pi_{n}", "object": "payment_intent", "status": "succeeded",
                                             "amount": int(form["amount"]), "metadata": {}})
                self._reply(404, {"error": {"type": "invalid_request_error", "message": "no such path"}})

        return Handler
