"""Turn a Delivery into an email: the kind's context builder, then its text and HTML templates
in the shared layout (templates/emails/base.txt and base.html)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string
from django.urls import reverse

from notifications.kinds import SPECS, Kind, context_builder
from notifications.models import Delivery


def template_context(kind: str, stored: dict[str, Any], *, user: User | None = None) -> dict[str, Any]:
    spec = SPECS[kind]
    context = {
        "kind": kind,
        "kind_label": Kind(kind).label,
        "critical": spec.critical,
        "site_url": settings.SITE_URL,
        "dashboard_url": settings.SITE_URL + reverse("clusters:list"),
        "settings_url": settings.SITE_URL + reverse("notifications:settings"),
        "recipient": user,
        # Sales' copy is internal; it gets no "turn this off" footer.
        "to_sales": kind == Kind.QUOTE_RECEIVED,
    }
    context.update(context_builder(kind)(stored))
    return context


def render(kind: str, stored: dict[str, Any], *, user: User | None = None) -> tuple[str, str, str]:
    """(subject, text, html) for one notification."""
    context = template_context(kind, stored, user=user)
    subject = " ".join(SPECS[kind].subject.format(**context).split())
    return subject, render_to_string(f"emails/{kind}.txt", context), render_to_string(f"emails/{kind}.html", context)


def build_message(delivery: Delivery) -> EmailMultiAlternatives:
    notification = delivery.notification
    subject, text, html = render(notification.kind, notification.context, user=delivery.user)
    message = EmailMultiAlternatives(
        subject=subject, body=text, from_email=settings.DEFAULT_FROM_EMAIL, to=[delivery.email],
        reply_to=notification.reply_to or None,
        # Lets mail clients thread, and lets anyone checking the mailbox match one email to one delivery.
        headers={"X-Runcrate-Notification": f"{notification.kind}; {notification.dedupe_key}"},
    )
    message.attach_alternative(html, "text/html")
    return message
