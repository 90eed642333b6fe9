"""The Billing page and its partials (Owners and Managers only), top-ups and the Stripe webhook."""

from __future__ import annotations

import csv
import datetime as dt
import logging
from dataclasses import dataclass
from decimal import Decimal

import stripe
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from accounts.http import AuthenticatedHttpRequest, HtmxHttpRequest, page_redirect
from accounts.tenancy import require_tenancy
from billing import payments, queries
from billing.access import require_billing_access
from billing.models import AutoRecharge, LedgerEntry, TopUp
from billing.months import BadMonth, month_bounds, parse_month
from config.errors import DomainError, flash
from config.money import ASCII_DIGITS_MESSAGE, format_money, parse_amount

log = logging.getLogger(__name__)
USAGE_LINES_PER_PAGE = 25


def _month(request: AuthenticatedHttpRequest) -> dt.date:
    """?month=YYYY-MM, the current month by default; anything else is a 404."""
    try:
        return parse_month(request.GET.get("month"))
    except BadMonth as exc:
        raise Http404(str(exc)) from None


@dataclass(frozen=True)
class LinePage:
    """A page of usage lines without counting them: counting every cluster with usage in the
    month is the one read that grows with the workspace. The page reads one line more than it
    shows to know whether a next page exists; links go back and forth by number."""

    object_list: list[dict]
    number: int
    has_next: bool
    per_page: int = USAGE_LINES_PER_PAGE

    @classmethod
    def of(cls, lines: queries.UsageLines, raw_number: str | None, per_page: int = USAGE_LINES_PER_PAGE) -> LinePage:
        try:
            number = max(int(raw_number or 1), 1)
        except ValueError:
            number = 1
        number = min(number, 10**9 // per_page)  # the offset stays a sane bigint
        window = lines[(number - 1) * per_page:number * per_page + 1]
        return cls(object_list=window[:per_page], number=number, has_next=len(window) > per_page, per_page=per_page)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_other_pages(self) -> bool:
        return self.has_previous or self.has_next

    @property
    def previous_page_number(self) -> int:
        return self.number - 1

    @property
    def next_page_number(self) -> int:
        return self.number + 1

    @property
    def start_index(self) -> int:
        return (self.number - 1) * self.per_page + 1 if self.object_list else 0

    @property
    def end_index(self) -> int:
        return (self.number - 1) * self.per_page + len(self.object_list)


def _spend_chart(
    days: list[tuple[dt.date, Decimal]], width: int = 620, height: int = 160, today: dt.date | None = None
) -> dict:
    """Bars of daily spend and a cumulative line up to today (never into days that have not
    happened), as SVG coordinates (no JavaScript)."""
    today = today or timezone.now().date()
    top = max((amount for _, amount in days), default=Decimal(0)) or Decimal(1)
    total = sum((amount for _, amount in days), Decimal(0))
    slot = width / max(len(days), 1)
    bars, points, running = [], [], Decimal(0)
    for i, (day, amount) in enumerate(days):
        bar_height = float(amount / top) * (height - 20)
        bars.append({"x": round(i * slot + 1, 1), "y": round(height - bar_height, 1), "w": round(slot - 2, 1),
                     "h": round(bar_height, 1), "day": day, "amount": amount})
        running += amount
        if day > today:
            continue
        cumulative_y = height - float(running / (total or 1)) * (height - 20)
        points.append(f"{round(i * slot + slot / 2, 1)},{round(cumulative_y, 1)}")
    return {"width": width, "height": height, "bars": bars, "line": " ".join(points), "total": total, "peak": top}


@login_required
@require_GET
def billing_overview(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_billing_access(request)
    workspace = tenancy.workspace
    month = _month(request)
    start, end = month_bounds(month.year, month.month)
    # A page of "Cluster usage" lines, each summed in SQL; its machines load when it opens.
    usage_page = LinePage.of(queries.usage_lines(workspace, month.year, month.month), request.GET.get("page"))
    credits = (
        LedgerEntry.objects.filter(workspace=workspace, created_at__gte=start, created_at__lt=end)
        .exclude(kind=LedgerEntry.Kind.USAGE)
        .order_by("-created_at", "-id")
    )
    spend = queries.month_spend(workspace, month.year, month.month)
    context = {
        "workspace": workspace,
        "month": month,
        "month_param": f"{month:%Y-%m}",
        "month_label": f"{month:%b %Y}",
        "months": queries.months_with_activity(workspace),
        "summary": queries.balance_summary(workspace),
        "summary_workspace_id": workspace.pk,
        "environments": queries.spend_by_environment(workspace, month.year, month.month, spend),
        "usage": usage_page.object_list,
        "usage_page": usage_page,
        "usage_total": spend.total,
        "credits": credits,
        "top_ups": TopUp.objects.filter(workspace=workspace, mode=TopUp.Mode.PAYMENT)[:20],
        "chart": _spend_chart(spend.by_day),
        "auto_recharge": AutoRecharge.objects.filter(workspace=workspace).first(),
        "stripe_enabled": payments.stripe_enabled(),
        "dev_top_up": payments.dev_top_up_available(workspace),
        "dev_amounts": payments.DEV_TOP_UP_AMOUNTS,
        "minimum_top_up": payments.MINIMUM_TOP_UP,
    }
    return render(request, "billing/overview.html", context)


@login_required
@require_GET
def header_money(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The top bar's balance and runway, which every member sees: polled by each page."""
    require_tenancy(request)
    return render(request, "billing/_header_money.html")


@login_required
@require_GET
def usage_detail(request: AuthenticatedHttpRequest, cluster_id: int) -> HttpResponse:
    """One "Cluster usage <name>" line opened to its machines: an HTMX partial, or a page."""
    tenancy = require_billing_access(request)
    month = _month(request)
    item = queries.cluster_usage_for_month(tenancy.workspace, cluster_id, month.year, month.month)
    if item is None:
        raise Http404("No usage of that cluster in this workspace that month.")
    template = "billing/usage_detail.html#machine-rows" if request.htmx else "billing/usage_detail.html"
    return render(request, template, {"item": item, "month": month})


@login_required
@require_GET
def export_csv(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_billing_access(request)
    month = _month(request)
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="runcrate-billing-{month:%Y-%m}.csv"'
    writer = csv.writer(response)
    writer.writerow(["type", "description", "cluster_id", "node", "gpu", "start", "end", "hours", "rate", "amount"])
    for item in queries.usage_for_month(tenancy.workspace, month.year, month.month):
        writer.writerow(["usage", item["description"], item["cluster_id"], "", "", "", "", "", "", f"-{item['amount']}"])
        for row in item["rows"]:
            writer.writerow([
                "machine", item["description"], item["cluster_id"], row["node"], row["gpu"], row["start"].isoformat(),
                row["end"].isoformat() if row["end"] else "", row["hours"], row["rate"], f"-{row['amount']}",
            ])
    start, end = month_bounds(month.year, month.month)
    for entry in LedgerEntry.objects.filter(workspace=tenancy.workspace, created_at__gte=start, created_at__lt=end).exclude(
        kind=LedgerEntry.Kind.USAGE
    ).order_by("created_at", "id"):
        writer.writerow([entry.kind, f"{entry.description} ({entry.get_state_display()})", "", "", "", entry.created_at.isoformat(),
                         "", "", "", entry.amount])
    return response


def _amount(value: str | None) -> Decimal:
    amount = parse_amount(str(value or ""))
    if amount is None:
        raise payments.PaymentError(ASCII_DIGITS_MESSAGE)
    return amount


@login_required
@require_POST
def top_up(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_billing_access(request)
    back = request.build_absolute_uri(reverse("billing:overview"))
    try:
        session = payments.create_top_up_session(
            workspace=tenancy.workspace, amount=_amount(request.POST.get("amount")), user=request.user,
            success_url=back + "?top_up=success", cancel_url=back + "?top_up=cancelled",
        )
    except DomainError as exc:
        flash(request, exc)
        return page_redirect(request, "billing:overview")
    return page_redirect(request, session.url)


@login_required
@require_POST
def dev_top_up(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_billing_access(request)
    try:
        entry = payments.dev_top_up(workspace=tenancy.workspace, amount=_amount(request.POST.get("amount")))
    except payments.PaymentError as exc:
        raise Http404(str(exc)) from None
    messages.success(request, f"Development top-up: {format_money(entry.amount)} added (no payment was taken).")
    return page_redirect(request, "billing:overview")


@login_required
@require_POST
def auto_recharge(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_billing_access(request)
    try:
        payments.save_auto_recharge(
            workspace=tenancy.workspace, enabled=request.POST.get("enabled") == "on",
            threshold=_amount(request.POST.get("threshold")), amount=_amount(request.POST.get("amount")),
        )
        messages.success(request, "Auto-recharge saved.")
    except DomainError as exc:
        flash(request, exc)
    return page_redirect(request, "billing:overview")


@login_required
@require_POST
def save_card(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_billing_access(request)
    back = request.build_absolute_uri(reverse("billing:overview"))
    try:
        session = payments.create_card_setup_session(
            workspace=tenancy.workspace, user=request.user, success_url=back + "?card=saved", cancel_url=back,
        )
    except DomainError as exc:
        flash(request, exc)
        return page_redirect(request, "billing:overview")
    return page_redirect(request, session.url)


@csrf_exempt
@require_POST
def stripe_webhook(request: HtmxHttpRequest) -> HttpResponse:
    """Stripe calls this; the signature over the raw body is the only authentication."""
    try:
        event = payments.verify_event(request.body, request.headers.get("Stripe-Signature"))
    except (stripe.SignatureVerificationError, ValueError, UnicodeDecodeError) as exc:
        log.warning("Rejected a Stripe webhook: %s", exc)
        return HttpResponseBadRequest("invalid signature or payload")
    outcome = payments.handle_event(event)
    return HttpResponse(outcome, content_type="text/plain")
