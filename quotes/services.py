"""Quote requests: validate, store, and tell sales and the requester (after commit)."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from config import ratelimit
from config.errors import DomainError
from notifications import services as notifications
from notifications.kinds import Kind
from quotes.forms import QuoteRequestForm
from quotes.models import QuoteRequest


class InvalidQuoteRequest(DomainError):
    """Bad input. `errors` maps a field name (or "__all__") to its messages, like a form's."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("invalid", "Some fields of the quote request are not valid.", details=errors)
        self.errors = errors

    @property
    def field_errors(self) -> dict[str, list[str]]:
        return self.errors


def create_quote_request(
    *, contact_name: str, email: str, company: str = "", gpu: str, machines: int | str, network: str = "ethernet",
    term: str = "on_demand", term_months: int | str | None = None, start_date: dt.date | str | None = None,
    notes: str = "", user: User | None = None, source_ip: str | None = None,
) -> QuoteRequest:
    """Store a quote request and queue the two emails: one to SALES_EMAIL, one confirming to the
    requester. Raises InvalidQuoteRequest with per-field messages on bad input. Used by the
    /quote/ page and the API alike, so both validate the same way."""
    form = QuoteRequestForm(
        data={
            "contact_name": contact_name, "email": email, "company": company or "", "gpu": gpu,
            "machines": machines, "network": network, "term": term,
            "term_months": "" if term_months is None else term_months,
            "start_date": start_date.isoformat() if isinstance(start_date, dt.date) else (start_date or ""),
            "notes": notes or "",
        }
    )
    if not form.is_valid():
        raise InvalidQuoteRequest({field: [str(m) for m in msgs] for field, msgs in form.errors.items()})

    with transaction.atomic():
        quote = form.save(commit=False)
        quote.user = user if user is not None and user.is_authenticated else None
        quote.source_ip = source_ip
        quote.save()
        context = {"quote_id": quote.pk}
        notifications.notify(
            Kind.QUOTE_RECEIVED, recipients=[str(settings.SALES_EMAIL)], context=context,
            dedupe_key=f"quote:{quote.pk}:sales", reply_to=[quote.email],
        )
        notifications.notify(
            Kind.QUOTE_CONFIRMATION, recipients=[quote.email], context=context, dedupe_key=f"quote:{quote.pk}:confirmation",
            reply_to=[str(settings.SALES_EMAIL)],
        )
    return quote


def allow_quote_request(ip: str | None) -> bool:
    """Count a submission from this address (form or API alike); False once it is over the limit."""
    return ratelimit.allow(f"quote:{ip or 'unknown'}", limit=settings.QUOTE_RATE_LIMIT,
                           window=settings.QUOTE_RATE_WINDOW_SECONDS)
