"""A real SMTP server (aiosmtpd on 127.0.0.1) and a way to run notification tasks the way a
worker does, so retries are scheduled instead of run inline."""

from __future__ import annotations

import email
import socket
from contextlib import contextmanager
from email import policy
from email.message import EmailMessage
from unittest import mock

import pytest
from aiosmtpd.controller import Controller

from notifications.tasks import send_notification


class Inbox:
    """aiosmtpd handler: keeps every message it accepted."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("bounce@"):
            return "550 5.1.1 No such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        message = email.message_from_bytes(envelope.content, policy=policy.default)
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        self.messages.append(message)
        return "250 Message accepted for delivery"

    def to(self, address: str) -> list[EmailMessage]:
        return [m for m in self.messages if address in m["X-Envelope-To"]]

    def subjects(self) -> list[str]:
        return [subject_of(m) for m in self.messages]


def subject_of(message: EmailMessage) -> str:
    # A folded, encoded subject (non-ASCII, long) parses with stray whitespace.
    return " ".join(str(message["Subject"]).split())


def body_of(message: EmailMessage, subtype: str) -> str:
    part = message.get_body(preferencelist=(subtype,))
    assert part is not None, f"the message has no text/{subtype} part"
    return part.get_content()


def text_of(message: EmailMessage) -> str:
    return body_of(message, "plain")


def html_of(message: EmailMessage) -> str:
    return body_of(message, "html")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SMTPServer:
    def __init__(self) -> None:
        self.inbox = Inbox()
        self.port = _free_port()
        self.controller: Controller | None = None

    def start(self) -> None:
        # A fresh controller each time, on the same port, as if the mail relay came back.
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    @property
    def messages(self) -> list[EmailMessage]:
        return self.inbox.messages


@pytest.fixture
def smtp(settings):
    server = SMTPServer()
    server.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = server.port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_HOST_USER = ""
    settings.EMAIL_HOST_PASSWORD = ""
    settings.EMAIL_TIMEOUT = 5
    settings.SITE_URL = "https://clusters.example.test"
    yield server
    server.stop()


class Broker:
    """Stands in for the Celery broker: records what was queued, runs it when told, as a
    worker would (a retry is scheduled, i.e. queued again with a countdown, not run inline)."""

    def __init__(self) -> None:
        self.queued: list[dict] = []

    def apply_async(self, args=None, kwargs=None, countdown=None, **options):
        self.queued.append({"args": tuple(args or ()), "countdown": countdown, "retries": options.get("retries", 0)})

    def run_next(self):
        job = self.queued.pop(0)
        return run_like_a_worker(job["args"][0], retries=job["retries"])

    def run_all(self) -> list:
        results = []
        while self.queued:
            results.append(self.run_next())
        return results


def run_like_a_worker(delivery_id: int, *, retries: int = 0):
    """Run the task body with a worker's request (not eager), so self.retry() queues a retry."""
    send_notification.push_request(
        id=f"test-{delivery_id}-{retries}", retries=retries, is_eager=False, called_directly=False,
        args=(delivery_id,), kwargs={},
    )
    try:
        return send_notification.run(delivery_id)
    finally:
        send_notification.pop_request()


@pytest.fixture
def broker():
    fake = Broker()
    with mock.patch.object(send_notification, "apply_async", side_effect=fake.apply_async):
        yield fake


@contextmanager
def smtp_down(server: SMTPServer):
    server.stop()
    try:
        yield
    finally:
        server.start()

