"""What a cluster's page shows beyond its own columns: cost so far, offers to start again on,
and node steps and outcomes in a customer's words. Tags, so the page, the live pushes and the
socket's first frame (which all render the same partials) compute them alike."""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal
from typing import TYPE_CHECKING, NamedTuple, cast

from django import template
from django.conf import settings
from django.utils import timezone

from billing.services import machines_cost
from clusters.image_facts import ImageFacts
from clusters.images import offer_images
from clusters.models import Cluster, Status
from offers.inventory import offers_like

if TYPE_CHECKING:
    from billing.models import MachineUsage

register = template.Library()

@register.filter
def step_label(step: str) -> str:
    """A node's step is stored in words (clusters.models.NodeStep); none yet reads "—"."""
    return (step or "").strip() or "—"


def _server_dirs() -> list[str]:
    dirs = {str(settings.BASE_DIR), str(settings.VAR_DIR), str(settings.LOCAL_MACHINES_DIR), "/tmp", "/var/", "/home/",
            "/root/", "/srv/", "/opt/", "/work/"}
    return sorted((d.rstrip("/") for d in dirs if d), key=len, reverse=True)


_EXIT = re.compile(r"\(?\bexit (?:status|code) (\d+)\)?")


@register.filter
def image_facts(cluster: Cluster) -> ImageFacts | None:
    """What the cluster's image is, as its offer's machines describe it now (None: the offer
    no longer lists it, or its machines start no image)."""
    return next((found for found in offer_images(cluster.machine_type) or [] if found.name == cluster.image), None)


@register.filter
def customer_text(text: str) -> str:
    """A message as a customer should read it: no paths on our servers, no bare exit codes."""
    text = text or ""
    # Every server path starts with "/": most messages have none (a push runs this on each
    # changed node's detail).
    for directory in _server_dirs() if "/" in text else ():
        # "…; see /var/…/ssh.log" and any other mention of a server path.
        text = re.sub(rf"[;,]?\s*(?:see\s+)?{re.escape(directory)}/\S*", "", text)
    text = _EXIT.sub("it stopped with an error", text)
    return re.sub(r"\s{2,}", " ", text).strip()


class _Usage(NamedTuple):
    """What machines_cost reads of a MachineUsage."""

    rate: Decimal
    started_at: dt.datetime
    ended_at: dt.datetime | None


@register.simple_tag
def cluster_cost(cluster: Cluster) -> dict:
    """{amount, rate, at, ended, running}: what the machines cost so far as of `at`
    (billing.services.machines_cost, so it is the Billing line's amount to the cent), the
    dollars per hour still accruing (0 once billing ended), and what the page needs to tick it
    on between pushes by the same rule: `ended`, the fixed cost of machines that stopped, and
    `running`, the machines still billed as JSON [[rate, start ms, how many]], each machine's
    running total rounded to cents as the ledger does. So the live figure has one source (this
    rule, here and in static/js/app.js), and a push never shows less than the page already did."""
    now = timezone.now()
    # Three columns as plain values: every push renders this, and 64 model instances were
    # most of a status card's time.
    usages = [_Usage(*row) for row in cluster.usages.values_list("rate", "started_at", "ended_at")]
    rate = sum((usage.rate for usage in usages if usage.ended_at is None), Decimal("0"))
    amount = machines_cost(cast("list[MachineUsage]", usages), now)  # it reads these three fields
    ended = machines_cost(cast("list[MachineUsage]", [u for u in usages if u.ended_at is not None]), now)
    running: dict[tuple[str, int], int] = {}
    for usage in usages:
        if usage.ended_at is None:
            key = (str(usage.rate), int(usage.started_at.timestamp() * 1000))
            running[key] = running.get(key, 0) + 1
    return {
        "amount": amount, "exact": amount, "rate": rate, "at": now, "ended": ended,
        "running": json.dumps([[r, start, count] for (r, start), count in sorted(running.items())]),
        "at_ms": int(now.timestamp() * 1000),
    }


@register.simple_tag
def offers_instead(cluster: Cluster) -> list:
    """For a failed cluster: the offers that can start the same cluster now."""
    if cluster.status != Status.FAILED:
        return []

    return offers_like(
        cluster.machine_type, cluster.machine_count, software=cluster.software, volume=cluster.volume_id is not None
    )
