"""Template context for the two quote emails (to sales, and the requester's confirmation)."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from notifications.kinds import Kind, email_context
from quotes.models import QuoteRequest


@email_context(Kind.QUOTE_RECEIVED, Kind.QUOTE_CONFIRMATION)
def quote_context(stored: dict) -> dict:
    quote = QuoteRequest.objects.select_related("user").get(pk=stored["quote_id"])
    return {
        "quote": quote,
        "quote_from": quote.company or quote.contact_name,
        "admin_url": settings.SITE_URL + reverse("admin:quotes_quoterequest_change", args=[quote.pk]),
        "quote_url": settings.SITE_URL + reverse("quotes:request"),
    }
