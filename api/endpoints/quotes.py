"""Request a quote: reserved capacity, clusters over 64 machines, InfiniBand or RoCE."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Status

from api import schemas
from api.app import ApiError, context, ok, responses
from quotes.services import allow_quote_request, create_quote_request

router = Router(tags=["Quotes"])


@router.post("quotes", operation_id="createQuote", summary="Request a quote",
             description="Reserved capacity, clusters over 64 machines, InfiniBand or RoCE. Shares the quote "
                         "form's limit per client address.",
             response=responses({201: schemas.envelope(schemas.Quote)}, 400))
def create_quote(request: HttpRequest, payload: schemas.CreateQuote) -> Status:
    ctx = context(request)
    if not allow_quote_request(request.META.get("REMOTE_ADDR")):
        raise ApiError(429, "rate_limited", "Too many quote requests from this address; try again later or write to sales.")
    values = payload.model_dump(exclude_defaults=True)
    quote = create_quote_request(**values, user=ctx.api_key.created_by, source_ip=request.META.get("REMOTE_ADDR"))
    return Status(201, ok(quote))
