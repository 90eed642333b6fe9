"""A real HTTP receiver on 127.0.0.1, started by the test: it keeps every request it got and
answers with the status codes it is told to (200 once they run out)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)

    def answer(self, *codes: int) -> None:
        self.answers.extend(codes)

    def types(self) -> list[str]:
        return [r.json["type"] for r in self.requests]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            state.requests.append(Received(self.path, dict(self.headers.items()), body))
            code = state.answers.pop(0) if state.answers else 200
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/runcrate"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
