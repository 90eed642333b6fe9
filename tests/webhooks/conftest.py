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


class DripReceiver:
    """A real socket server on 127.0.0.1 that reads a request and answers it one header line
    every `interval` seconds: a status line, then `X-Drip-N` lines, never the blank line that
    ends the headers, until `lines` are sent or the test releases it (then it closes the
    connection). Each read on the client's side gets data well within any per-read timeout."""

    def __init__(self, interval: float, lines: int) -> None:
        import socket

        self.interval, self.lines = interval, lines
        self.released = threading.Event()
        self.answering = threading.Semaphore(0)  # one release per request being dripped
        self.requests = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/hooks/slow"
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.released.is_set():
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(connection,), daemon=True).start()

    def _drip(self, connection: Any) -> None:
        with connection:
            connection.settimeout(10)
            request = b""
            try:
                while b"\r\n\r\n" not in request:
                    request += connection.recv(65536)
                head, _, body = request.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(body) < length:
                    body += connection.recv(65536)
                self.requests += 1
                connection.sendall(b"HTTP/1.1 200 OK\r\n")
                self.answering.release()
                for n in range(self.lines):
                    if self.released.wait(self.interval):
                        return
                    connection.sendall(f"X-Drip-{n}: still here\r\n".encode())
            except OSError:
                return

    def close(self) -> None:
        self.released.set()
        self.server.close()


@pytest.fixture
def drip_receivers() -> Iterator[list[DripReceiver]]:
    """Eight slow receivers; each drips a header line a second for up to two minutes."""
    receivers = [DripReceiver(interval=1.0, lines=120) for _ in range(8)]
    try:
        yield receivers
    finally:
        for receiver in receivers:
            receiver.close()
