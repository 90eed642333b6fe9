"""The operators' emails about fleet hosts: one that stopped answering, one whose grade fell."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from notifications.kinds import Kind, email_context
from offers.models import PhysicalHost


def _admin_url(host: PhysicalHost) -> str:
    return settings.SITE_URL + reverse("admin:offers_physicalhost_change", args=[host.pk])


@email_context(Kind.HOST_DOWN)
def host_down_context(stored: dict) -> dict:
    """Which host, since when, and whose machines were on it (cluster and node names)."""
    host = PhysicalHost.objects.get(pk=stored["host_id"])
    machines = stored.get("machines", [])
    return {
        "host": host, "down_since": stored["down_since"], "machines": machines,
        "machines_running": len(machines), "admin_url": _admin_url(host),
    }


@email_context(Kind.HOST_GRADE_FELL)
def grade_fell_context(stored: dict) -> dict:
    """The checks that failed, each with what the host answered."""
    host = PhysicalHost.objects.get(pk=stored["host_id"])
    failing = stored.get("failing", [])
    return {
        "host": host, "checks": failing, "failing": ", ".join(check["check"] for check in failing),
        "why": stored.get("why", ""), "admin_url": _admin_url(host),
    }
