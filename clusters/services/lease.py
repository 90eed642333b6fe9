"""The lease: one worker moves a cluster at a time, and a wake-up asked for while another
holds it is honoured before that holder lets go (docs/architecture.md)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from clusters.models import FINAL_STATUSES, Cluster, ClusterEvent, Reason
from clusters.services.common import SYSTEM, after_commit_changed


@dataclass
class Lease:
    """A pass's hold on one cluster. `expires_at` is also the holder's token: every renewal
    and the release compare-and-set on it, so a holder that lost the lease touches nothing."""

    cluster_id: int
    expires_at: dt.datetime


def lease_length() -> dt.timedelta:
    return dt.timedelta(seconds=settings.CLUSTER_LEASE_SECONDS)


def claim_lease(cluster_id: int) -> Lease | None:
    """Compare-and-set the lease when it is free or has lapsed.

    A lease is short and renewed by the holder's heartbeat, and released when its pass ends,
    so one found lapsed (set, but in the past) belonged to a worker that died mid-pass: the
    customer is told the step is being repeated."""
    now = timezone.now()
    current = (
        Cluster.objects.filter(pk=cluster_id).exclude(status__in=FINAL_STATUSES)
        .values_list("lease_expires_at", flat=True).first()
    )
    row = Cluster.objects.filter(pk=cluster_id).exclude(status__in=FINAL_STATUSES)
    if current is None:
        row = row.filter(lease_expires_at__isnull=True)
    elif current >= now:
        return None
    else:
        row = row.filter(lease_expires_at=current)
    expires = now + lease_length()
    # The queued mark goes with the claim: the task that was queued is running now.
    if not row.update(lease_expires_at=expires, wake_requested=False, advance_queued_at=None):
        return None
    if current is not None:
        ClusterEvent.objects.create(
            cluster_id=cluster_id, event="pass_interrupted", actor=SYSTEM, reason=Reason.PROVIDER_ERROR,
            message="The control plane worker moving this cluster stopped mid-step; another worker took over "
            "and is repeating that step.",
        )
        after_commit_changed(cluster_id)
    return Lease(cluster_id, expires)


def renew_lease(lease: Lease) -> bool:
    """Push the expiry on while the pass runs; False when the lease was lost meanwhile."""
    expires = timezone.now() + lease_length()
    if not Cluster.objects.filter(pk=lease.cluster_id, lease_expires_at=lease.expires_at).update(lease_expires_at=expires):
        return False
    lease.expires_at = expires
    return True


def release_lease(lease: Lease) -> bool:
    """End the hold, unless a wake-up was asked for while the pass ran: then keep the lease,
    clear the mark and return False, so the holder takes another pass before it lets go.
    Only the holder's own lease: one that lapsed and was claimed by another worker is theirs."""
    held = Cluster.objects.filter(pk=lease.cluster_id, lease_expires_at=lease.expires_at)
    if held.filter(wake_requested=False).update(lease_expires_at=None):
        return True
    return not held.filter(wake_requested=True).update(wake_requested=False)


def request_wake(cluster_id: int) -> None:
    """A pass was asked for while another holds the lease: leave a mark its holder honours
    before releasing (release_lease), instead of waiting for the next sweep."""
    Cluster.objects.filter(pk=cluster_id, lease_expires_at__isnull=False).update(
        wake_requested=True, advance_queued_at=None
    )


def mark_queued(cluster_ids: Iterable[int], at: dt.datetime | None) -> None:
    """Note that a pass is queued (to run from `at`; None: it could not be), so the sweep
    does not queue another."""
    Cluster.objects.filter(pk__in=list(cluster_ids)).update(advance_queued_at=at)


def claim_for_sweep(cluster_ids: Iterable[int]) -> list[int]:
    """Those of `cluster_ids` not queued already (or queued so long ago that the task was
    lost), marked queued now. Rows another sweep is marking are skipped, not waited for."""
    now = timezone.now()
    not_queued = Q(advance_queued_at__isnull=True) | Q(
        advance_queued_at__lt=now - dt.timedelta(seconds=settings.CLUSTER_QUEUED_GRACE_SECONDS)
    )
    with transaction.atomic():
        ids = list(
            Cluster.objects.select_for_update(skip_locked=True).filter(not_queued, pk__in=list(cluster_ids))
            .order_by("pk").values_list("pk", flat=True)
        )
        Cluster.objects.filter(pk__in=ids).update(advance_queued_at=now)
    return ids
