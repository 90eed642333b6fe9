"""Every kind of email the product sends: its label, whether a user may turn it off, its
subject line, and where its template context comes from.

A kind's template context comes from the app the email is about: each registers its builder
with `email_context` when it loads (clusters.emails, metrics.idle, …), so notifications, below
those apps, names none of them. A kind's templates are templates/emails/<kind>.txt and templates/emails/<kind>.html, both
extending the shared layout (emails/base.txt, emails/base.html)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import models


class Kind(models.TextChoices):
    CLUSTER_READY = "cluster_ready", "Cluster ready"
    CLUSTER_FAILED = "cluster_failed", "Cluster failed to start"
    CLUSTER_DEGRADED = "cluster_degraded", "Cluster software failed to install"
    CLUSTER_TERMINATED = "cluster_terminated", "Cluster terminated"
    CLUSTER_STOPPED = "cluster_stopped", "Cluster stopped: balance ran out or monthly budget reached"
    CLUSTER_IDLE = "cluster_idle", "Cluster idle while billed"
    NODE_UNHEALTHY = "node_unhealthy", "A cluster machine turned unhealthy"
    NODE_RECOVERED = "node_recovered", "A cluster machine is healthy again"
    BALANCE_LOW = "balance_low", "Low balance warning"
    TOPUP_RECEIVED = "topup_received", "Top-up received"
    AUTO_RECHARGE_FAILED = "auto_recharge_failed", "Auto-recharge failed"
    QUOTE_RECEIVED = "quote_received", "Quote request (to sales)"
    QUOTE_CONFIRMATION = "quote_confirmation", "Quote request confirmation"
    INVITATION = "invitation", "Invitation to a workspace"
    HOST_QUARANTINED = "host_quarantined", "Host taken out of sale (to operators)"
    HOST_DOWN = "host_down", "Host stopped answering (to operators)"
    HOST_GRADE_FELL = "host_grade_fell", "Host failed its grade and is draining (to operators)"


@dataclass(frozen=True)
class KindSpec:
    subject: str  # str.format() over the template context
    critical: bool = False  # critical kinds cannot be turned off
    help: str = ""


SPECS: dict[str, KindSpec] = {
    Kind.CLUSTER_READY: KindSpec("Your cluster {cluster.name} is ready",
                                 help="Every machine has joined and the software passed its checks."),
    Kind.CLUSTER_FAILED: KindSpec("Your cluster {cluster.name} failed to start — nothing was charged", critical=True),
    Kind.CLUSTER_DEGRADED: KindSpec("Your cluster {cluster.name} is degraded: {software} failed to install",
                                    help="The machines are up and billed, but the software did not install."),
    Kind.CLUSTER_TERMINATED: KindSpec("Your cluster {cluster.name} was terminated",
                                      help="Duration and total cost when a cluster ends."),
    Kind.CLUSTER_STOPPED: KindSpec("Your cluster {cluster.name} was stopped: {reason_short}", critical=True),
    Kind.CLUSTER_IDLE: KindSpec("{cluster.name} has been idle {idle_for} at ${price_per_hour}/h",
                                help="Every machine of a ready cluster stayed idle for the environment's idle "
                                     "hours (2 h unless changed); at most once a day. Nothing is stopped."),
    Kind.NODE_UNHEALTHY: KindSpec("{node_name} of your cluster {cluster.name} is {health_label}",
                                  help="A machine of a ready cluster stopped answering, lost the private "
                                       "network or its software's daemon; once when it turns bad."),
    Kind.NODE_RECOVERED: KindSpec("{node_name} of your cluster {cluster.name} is healthy again",
                                  help="The machine that turned unhealthy passed its checks again."),
    Kind.BALANCE_LOW: KindSpec("Your Runcrate balance is low: {balance}",
                               help="When the workspace's credit balance falls below the warning level."),
    Kind.TOPUP_RECEIVED: KindSpec("We received your top-up of {amount}", help="A receipt for each top-up."),
    Kind.AUTO_RECHARGE_FAILED: KindSpec("Auto-recharge of {amount} failed", critical=True),
    Kind.QUOTE_RECEIVED: KindSpec("Quote request: {quote.machines} × {quote.gpu} from {quote_from}", critical=True),
    Kind.QUOTE_CONFIRMATION: KindSpec("We received your quote request", critical=True),
    Kind.HOST_QUARANTINED: KindSpec("Taken out of sale: {host_names} (a machine failed to start, join or install)",
                                    critical=True),
    Kind.HOST_DOWN: KindSpec("Host down: {host.name} stopped answering ({machines_running} machines on it)",
                             critical=True),
    Kind.HOST_GRADE_FELL: KindSpec("Host draining: {host.name} failed its grade ({failing})", critical=True),
    Kind.INVITATION: KindSpec("{inviter} invited you to {workspace_name} on Runcrate Clusters", critical=True),
}

# Sent to the operators (settings.OPERATOR_EMAILS and staff), never to customers.
OPERATOR_KINDS = (Kind.HOST_QUARANTINED, Kind.HOST_DOWN, Kind.HOST_GRADE_FELL)
CRITICAL_KINDS = frozenset(kind for kind, spec in SPECS.items() if spec.critical)
# What a user sees on the settings page; sales' own copy is not a user's choice.
OPTIONAL_KINDS = [kind for kind in Kind if not SPECS[kind].critical]
# Sent to addresses, not to members: nothing a member could turn on or off.
USER_FACING_CRITICAL_KINDS = [
    kind for kind in Kind if SPECS[kind].critical and kind not in (Kind.QUOTE_RECEIVED, Kind.INVITATION, *OPERATOR_KINDS)
]


ContextBuilder = Callable[[dict[str, Any]], dict[str, Any]]
_CONTEXT_BUILDERS: dict[str, ContextBuilder] = {}


def email_context(*kinds: str) -> Callable[[ContextBuilder], ContextBuilder]:
    """Register fn(stored_context) -> template context for `kinds`, run when their emails are
    rendered. Used by the app each kind is about, in a module its AppConfig.ready loads."""
    def register(builder: ContextBuilder) -> ContextBuilder:
        for kind in kinds:
            _CONTEXT_BUILDERS[kind] = builder
        return builder
    return register


def context_builder(kind: str) -> ContextBuilder:
    return _CONTEXT_BUILDERS[kind]
