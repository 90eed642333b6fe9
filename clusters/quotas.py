"""Quotas (accounts.models.Quota) against what is running and spent: which quotas bind a request
to add machines, how much of each is in use, and the refusal when the request would pass one.

Machines count against the member who created their cluster (`Cluster.created_by`), whoever adds
workers or replaces a node later: a member's GPUs and spend are those of their clusters. A
spend quota stops new machines only; running clusters are never stopped for it (the balance and
the environment's budget stop clusters, clusters.enforcement), it is shown as a warning."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Q, QuerySet, Sum
from django.utils import timezone

from accounts.models import Environment, Membership, Quota
from billing.models import LedgerEntry
from billing.months import month_start
from clusters.errors import ClusterError
from clusters.models import Node
from config.money import format_money

RAISED_BY = "An Owner of the workspace can raise it on the Quotas page."


@dataclass
class QuotaUse:
    """One quota that binds a request, with what is in use now and what the request adds."""

    quota: Quota
    gpus_in_use: int
    spent: Decimal
    adding_gpus: int = 0
    adding_per_hour: Decimal = Decimal(0)

    @property
    def label(self) -> str:
        return f"{self.quota.subject} in {self.quota.scope}"

    @property
    def gpus_after(self) -> int:
        return self.gpus_in_use + self.adding_gpus

    @property
    def gpus_exceeded(self) -> bool:
        return self.quota.max_gpus is not None and self.adding_gpus > 0 and self.gpus_after > self.quota.max_gpus

    @property
    def spend_reached(self) -> bool:
        return self.quota.monthly_spend is not None and self.spent >= self.quota.monthly_spend

    @property
    def spend_warning(self) -> str:
        """Said when the month's spend is at the quota, or one hour of the request would reach it."""
        limit = self.quota.monthly_spend
        if limit is None:
            return ""
        if self.spend_reached:
            return (f"The spend quota of {self.label} ({format_money(limit)} a month) is reached: {format_money(self.spent)} spent. "
                    "Running clusters keep running; no more machines start this month. " + RAISED_BY)
        if self.adding_per_hour and self.spent + self.adding_per_hour >= limit:
            return (f"With this request the spend quota of {self.label} ({format_money(limit)} a month, {format_money(self.spent)} "
                    "spent) is reached within the hour: running clusters keep running, but no more machines start.")
        return ""

    def problem(self) -> ClusterError | None:
        """The refusal, in the words of the balance and budget's: the limit, what is in use, who raises it."""
        if self.gpus_exceeded:
            return ClusterError(
                "quota_gpus",
                f"This needs {self.adding_gpus} more GPUs: the quota of {self.label} is {self.quota.max_gpus} GPUs "
                f"running at once and {self.gpus_in_use} are running. {RAISED_BY}",
                field="__all__", status=403,
                details={"quota_id": self.quota.pk, "limit": self.quota.max_gpus, "in_use": self.gpus_in_use,
                         "requested": self.adding_gpus},
            )
        if self.adding_gpus and self.spend_reached:
            assert self.quota.monthly_spend is not None
            return ClusterError(
                "quota_spend",
                f"The quota of {self.label} is {format_money(self.quota.monthly_spend)} of spend a month and "
                f"{format_money(self.spent)} is spent this month, so no more machines start. {RAISED_BY}",
                field="__all__", status=403,
                details={"quota_id": self.quota.pk, "limit": str(self.quota.monthly_spend), "spent": str(self.spent)},
            )
        return None


def binding_quotas(environment: Environment, membership: Membership | None) -> list[Quota]:
    """The quotas that bind machines of `membership`'s clusters in `environment` (None: a
    cluster no member created binds only the everyone-together ones). A member's own quota
    replaces their role's for the same environment scope."""
    whom = Q(membership__isnull=True, role="")
    if membership is not None:
        whom |= Q(membership=membership) | Q(membership__isnull=True, role=membership.role)
    quotas = list(
        Quota.objects.filter(whom, workspace_id=environment.workspace_id)
        .filter(Q(environment__isnull=True) | Q(environment=environment))
        .select_related("membership__user", "environment")
    )
    own_scopes = {q.environment_id for q in quotas if q.membership_id is not None}
    return [q for q in quotas if not (q.role and q.environment_id in own_scopes)]


def _scoped(quota: Quota, user_id: int | None, prefix: str) -> Q:
    """The clusters a quota counts: its member's (or, for a role quota, the acting member's), in its environment."""
    where = Q(**{f"{prefix}workspace_id": quota.workspace_id})
    if quota.environment_id is not None:
        where &= Q(**{f"{prefix}environment_id": quota.environment_id})
    if quota.membership_id is not None or quota.role:
        where &= Q(**{f"{prefix}created_by_id": user_id})
    return where


def gpus_running(quota: Quota, user_id: int | None, excluding_cluster_id: int | None = None) -> int:
    """GPUs of every machine held now (booting, running, or being swapped in) that the quota counts
    (but those of `excluding_cluster_id`: the cluster being created, written before its check)."""
    nodes: QuerySet[Node] = Node.objects.filter(_scoped(quota, user_id, "cluster__"), released_at__isnull=True)
    if excluding_cluster_id is not None:
        nodes = nodes.exclude(cluster_id=excluding_cluster_id)
    return int(nodes.aggregate(total=Sum("cluster__machine_type__gpus_per_machine"))["total"] or 0)


def spent_this_month(quota: Quota, user_id: int | None) -> Decimal:
    entries = LedgerEntry.objects.filter(
        _scoped(quota, user_id, "cluster__"), kind=LedgerEntry.Kind.USAGE, state=LedgerEntry.State.COMPLETED,
        period=month_start(timezone.now()),
    )
    return -(entries.aggregate(total=Sum("amount"))["total"] or Decimal("0.00"))


def quota_uses(environment: Environment, membership: Membership | None, *, adding_gpus: int = 0,
               adding_per_hour: Decimal = Decimal(0), excluding_cluster_id: int | None = None) -> list[QuotaUse]:
    user_id = membership.user_id if membership is not None else None
    return [
        QuotaUse(quota, gpus_running(quota, user_id, excluding_cluster_id), spent_this_month(quota, user_id),
                 adding_gpus, adding_per_hour)
        for quota in binding_quotas(environment, membership)
    ]


def membership_of(environment: Environment, user_id: int | None) -> Membership | None:
    if user_id is None:
        return None
    return Membership.objects.filter(workspace_id=environment.workspace_id, user_id=user_id).first()


def check_quotas(environment: Environment, created_by_id: int | None, *, adding_gpus: int,
                 adding_per_hour: Decimal, excluding_cluster_id: int | None = None) -> None:
    """Refuse machines that would pass a quota. Called under the workspace lock, beside the
    balance and budget checks, so two requests cannot both fit under the same limit.
    `excluding_cluster_id`: a cluster whose machines are the ones being added (a create writes
    them before it takes the lock), not counted as running."""
    for use in quota_uses(environment, membership_of(environment, created_by_id), adding_gpus=adding_gpus,
                          adding_per_hour=adding_per_hour, excluding_cluster_id=excluding_cluster_id):
        if (problem := use.problem()) is not None:
            raise problem


@dataclass
class QuotaRow:
    """A quota as its page and the API list it: what each member it binds has in use."""

    quota: Quota
    uses: list[tuple[str, int, Decimal]]  # (whom, GPUs running, spent this month)


def quota_rows(workspace_id: int) -> list[QuotaRow]:
    quotas = Quota.objects.filter(workspace_id=workspace_id).select_related("membership__user", "environment")
    rows = []
    for quota in quotas:
        if quota.membership is not None:
            members: list[tuple[str, int | None]] = [(quota.subject, quota.membership.user_id)]
        elif quota.role:
            members = [(m.user.get_username(), m.user_id) for m in Membership.objects.filter(
                workspace_id=workspace_id, role=quota.role).select_related("user").order_by("user__username")]
        else:
            members = [(quota.subject, None)]
        rows.append(QuotaRow(quota, [(who, gpus_running(quota, uid), spent_this_month(quota, uid)) for who, uid in members]))
    return rows
