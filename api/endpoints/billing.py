"""The balance (every member) and usage (Owners and Managers)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router

from api import schemas
from api.app import context, invalid, not_found, ok, page, responses
from billing import queries as billing_queries
from billing import services as billing_services
from billing.months import BadMonth, parse_month

router = Router(tags=["Billing"])


@router.get("billing/balance", operation_id="getBalance", summary="Credits, burn rate and the environment's budget",
            response=responses({200: schemas.envelope(schemas.Balance)}, 403))
def billing_balance(request: HttpRequest) -> dict[str, Any]:
    ctx = context(request)
    # Anyone who may create clusters may see whether the balance covers one: the
    # dashboard shows it to every member too. Usage and money movements stay Owner/Manager.
    summary = billing_queries.balance_summary(ctx.workspace)
    now = timezone.now()
    spend = next(
        (row for row in billing_queries.spend_by_environment(ctx.workspace, now.year, now.month)
         if row["environment_id"] == ctx.environment.pk),
        None,
    )
    return ok({
        "credits_balance": summary["credits_balance"],
        "active_usage_cost_per_hour": summary["active_usage_cost_per_hour"],
        "hours_remaining": str(summary["hours_remaining"]) if summary["hours_remaining"] is not None else None,
        "environment": ctx.environment.name,
        "monthly_budget": ctx.environment.monthly_budget,
        "budget_spent": spend["spent"] if spend else None,
        "budget_remaining": billing_services.budget_remaining(spend["budget"], spend["spent"]) if spend else None,
    })


def _month(raw: str) -> tuple[int, int]:
    try:
        month = parse_month(raw)
    except BadMonth as exc:
        raise invalid({"month": [str(exc)]}) from None
    return month.year, month.month


@router.get("billing/usage", operation_id="listUsage", summary="Usage in a month, one line per cluster",
            description="One item per cluster (\"Cluster usage <name>\"): its amount, machine count and whether "
                        "it is still accruing. A line's machine rows come with GET /billing/usage/{cluster_id}, "
                        "or for every line of the page with `?rows=true`.",
            response=responses({200: schemas.list_envelope(schemas.UsageItem, schemas.UsageMeta)}, 400, 403))
def billing_usage(request: HttpRequest, filters: Query[schemas.UsageQuery], pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    ctx = context(request)
    ctx.require_billing()
    year, month = _month(filters.month)
    # Lines summed and sliced in the database; machine rows read (for this page's lines
    # only) when asked for.
    items = billing_queries.usage_lines(ctx.workspace, year, month, environment=ctx.environment, with_rows=filters.rows)
    return page(items, pages, month=f"{year:04d}-{month:02d}", environment=ctx.environment.name,
                total_amount=billing_queries.usage_total(ctx.workspace, year, month, environment=ctx.environment))


@router.get("billing/usage/{cluster_id}", operation_id="getUsageLine", summary="One cluster's usage line with its machines",
            description="The month's \"Cluster usage <name>\" line of one cluster of this environment, opened to a "
                        "row per machine; the line's amount is the sum of its rows. 404 when the cluster had no "
                        "usage that month.",
            response=responses({200: schemas.envelope(schemas.UsageItem)}, 400, 403))
def billing_usage_line(request: HttpRequest, cluster_id: schemas.PathId, filters: Query[schemas.UsageLineQuery]) -> dict[str, Any]:
    ctx = context(request)
    ctx.require_billing()
    year, month = _month(filters.month)
    line = billing_queries.cluster_usage_for_month(ctx.workspace, cluster_id, year, month, environment=ctx.environment)
    if line is None:
        raise not_found(f"Usage of cluster {cluster_id} in {year:04d}-{month:02d}")
    return ok(line, month=f"{year:04d}-{month:02d}", environment=ctx.environment.name)
