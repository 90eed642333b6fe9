"""A new workspace's getting-started checklist on the Clusters page: what is done is read from
the data itself (a credit, a key, a cluster), so it ticks itself off and never needs to be kept
in step. It reads accounts, billing and clusters, so it lives in the highest of them."""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse

from accounts.models import Membership
from billing.queries import credits_received
from clusters.models import Cluster


@dataclass(frozen=True)
class Step:
    label: str
    done: bool
    url: str | None  # None: this member cannot do it (credits are for Owners and Managers)
    hint: str = ""


def getting_started(membership: Membership) -> list[Step] | None:
    """The checklist for this member's workspace, or None once every step is done."""
    workspace = membership.workspace
    has_credit = workspace.credit_balance > 0 or credits_received(workspace.pk).exists()
    steps = [
        Step("Add credits", has_credit, reverse("billing:overview") if membership.can_see_billing else None,
             "A cluster needs one hour of its price in credit, and never less than $10."),
        Step("Add an SSH key", workspace.ssh_keys.exists(), reverse("accounts:ssh_keys"),
             "Every machine of a new cluster gets the workspace's keys."),
        Step("Create a cluster", Cluster.objects.filter(environment__workspace=workspace).exists(), reverse("offers:list"),
             "Pick a GPU and a machine count; the offers page lists what can start now."),
    ]
    if all(step.done for step in steps):
        return None
    return steps
