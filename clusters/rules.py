"""The product's rules for a cluster request, written once. The create form, the plan endpoint,
the API, the CLI's --dry-run and the MCP server's plan all reach these through
clusters.services.create (`create_cluster`, `plan_cluster`); forms, templates and API schemas import
the bounds from here instead of restating them.

- a cluster has MIN_MACHINES..MAX_MACHINES machines (more is a quote);
- Kubernetes only on `vm` and `bare_metal` machines, and on real machines (the `ssh`
  provider) only once the operator has pinned what its install fetches;
- no volume on community hosts;
- the image is one the offer's machines can start now (clusters.images; none named: the default);
- to start (or grow) a cluster the balance covers one hour of the whole cluster, and never
  less than settings.MINIMUM_CREATE_BALANCE ($10) — billing.services.required_balance.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from django.conf import settings

from accounts.models import Environment
from billing.services import required_balance
from clusters.errors import ClusterError, Conflict, InsufficientCredits
from clusters.images import image_problem, offer_images
from clusters.models import Cluster, Software, Volume
from clusters.providers.kubernetes import kubernetes_unpinned
from config.money import format_money
from offers.models import MACHINE_COUNT_MESSAGES, MAX_MACHINES, MIN_MACHINES, PRIVATE_NETWORK_MIN_GBPS, MachineType

__all__ = ["MAX_MACHINES", "MIN_MACHINES"]  # the bounds, from offers.models, with the rules that use them
NAME_MAX_LENGTH = 63
NAME_RE = re.compile(rf"^[a-z0-9]([a-z0-9-]{{0,{NAME_MAX_LENGTH - 2}}}[a-z0-9])?$")


def minimum_balance() -> Decimal:
    return settings.MINIMUM_CREATE_BALANCE


def request_problems(
    *, environment: Environment, name: str, machine_type: MachineType | None, machine_count: int | None, software: str,
    volume: Volume | None, image: str | None = None,
) -> Iterator[ClusterError]:
    """Every refusal of a cluster request that needs no lock, in the order a person fixes them."""
    if not NAME_RE.match(name or ""):
        yield ClusterError(
            "invalid_name", f"Use 1–{NAME_MAX_LENGTH} lowercase letters, digits and hyphens, starting and ending with a letter or digit.",
            field="name",
        )
    elif Cluster.objects.live().filter(environment=environment, name=name).exists():
        yield name_taken(name)
    if machine_count is None or not (MIN_MACHINES <= machine_count <= MAX_MACHINES):
        yield machine_count_problem()
    if machine_type is None or not machine_type.active:
        yield ClusterError("offer_not_found", "Pick one of the offers listed for this size.", field="offer")
        return
    if software not in Software.values:
        yield ClusterError("invalid_software", "Pick None, Slurm, Kubernetes or Ray.", field="software")
    elif software == Software.KUBERNETES and (problem := kubernetes_problem(machine_type)) is not None:
        yield problem
    if (problem := image_problem(offer_images(machine_type), image)) is not None:
        yield problem
    if volume is not None:
        if machine_type.community:
            yield ClusterError(
                "volume_on_community",
                "A volume cannot be attached to a cluster on community hosts (independent operators). "
                "Detach the volume or pick a non-community offer.",
                field="volume",
            )
        elif volume.environment_id != environment.pk:
            yield ClusterError("volume_not_found", "That volume is not in this environment.", field="volume")


def kubernetes_problem(machine_type: MachineType) -> ClusterError | None:
    """Why Kubernetes cannot be installed on this offer's machines, if it cannot: containers
    cannot run it, and on real machines its install is unverified and refuses to run until
    the operator has pinned what it fetches (clusters.providers.kubernetes_unpinned)."""
    if not machine_type.supports_kubernetes:
        return ClusterError(
            "kubernetes_unsupported",
            "Kubernetes runs only on VM and bare-metal offers; this offer is a container. "
            "Pick Slurm, Ray or None, or a VM/bare-metal offer.",
            field="software",
        )
    if kubernetes_unpinned(machine_type.provider):
        return ClusterError(
            "kubernetes_unavailable",
            "Kubernetes is not available on this offer yet: its install on these machines has not been verified, "
            "and it waits for the operator to pin the flannel and NVIDIA device plugin manifests it fetches. "
            "Pick Slurm, Ray or None.",
            field="software",
        )
    return None


def machine_count_problem() -> ClusterError:
    return ClusterError(
        "invalid_machine_count",
        MACHINE_COUNT_MESSAGES["range"],
        field="machines",
    )


def check_request(**request: Any) -> None:
    """Raise the first refusal of `request_problems`."""
    for problem in request_problems(**request):
        raise problem


def worker_count_problem(cluster: Cluster, adding: int) -> ClusterError | None:
    if adding < 1:
        return ClusterError("invalid_count", "Add at least one worker.", field="count")
    if cluster.machine_count + adding > MAX_MACHINES:
        return ClusterError(
            "invalid_count",
            f"A cluster has at most {MAX_MACHINES} machines; {cluster.name} has {cluster.machine_count}.",
            field="count",
        )
    return None


def balance_problem(balance: Decimal, price_per_hour: Decimal) -> InsufficientCredits | None:
    """The money rule: the balance covers one hour of the whole cluster, never less than $10."""
    required = required_balance(price_per_hour)
    if balance >= required:
        return None
    return InsufficientCredits(
        "insufficient_credits",
        f"Your balance of {format_money(balance)} does not cover {format_money(required)} "
        f"(one hour of the whole cluster, and never less than ${minimum_balance():,.0f}). Top up to continue.",
        field="__all__",
        details={"required": str(required), "available": str(balance)},
    )


def network_test_floor_gbps() -> float:
    """What a pair of nodes must carry in a network test not to be marked slow: the low end of
    the offer's promise (offers.models.PRIVATE_NETWORK_MIN_GBPS), unless settings say otherwise."""
    return float(getattr(settings, "NETWORK_TEST_SLOW_BELOW_GBPS", PRIVATE_NETWORK_MIN_GBPS))


def name_taken(name: str) -> Conflict:
    return Conflict("name_taken", f"A live cluster named {name!r} already exists in this environment.", field="name")
