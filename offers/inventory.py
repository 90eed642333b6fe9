"""Offers that can start now, and the host inventory's reservations."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, TypedDict

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from notifications.kinds import Kind, email_context
from notifications.services import notify
from offers.models import GPUModel, Host, MachineType, PhysicalHost

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class FreeHosts(TypedDict):
    free_hosts: int



@dataclass(frozen=True)
class Offer:
    machine_type: MachineType
    machines: int
    available_machines: int

    @property
    def id(self) -> int:
        return self.machine_type.pk

    @property
    def price_per_machine_hour(self) -> Decimal:
        return self.machine_type.price_per_machine_hour

    @property
    def price_per_cluster_hour(self) -> Decimal:
        return self.machine_type.price_for(self.machines)

    @property
    def software_choices(self) -> list[str]:
        choices = ["none", "slurm", "ray"]
        if self.machine_type.supports_kubernetes:
            choices.insert(2, "kubernetes")
        return choices


def find_offer(offer_id: int | str | None) -> MachineType | None:
    """The active offer a customer named by id (a form field, a query string, the API), or
    None: anything that is not a plain id (text, "²", a number too big for a bigint) included."""
    if isinstance(offer_id, str):
        if not (offer_id.isascii() and offer_id.isdigit() and len(offer_id) <= 18):
            return None
        offer_id = int(offer_id)
    if not isinstance(offer_id, int) or isinstance(offer_id, bool):
        return None
    return MachineType.objects.select_related("gpu", "location").filter(pk=offer_id, active=True).first()


def for_sale(prefix: str = "") -> Q:
    """A machine on sale: free, and on no server or on one that sells (a slot of a draining
    or down host is not). The server's state is read through a subquery, not a join, so
    reserve_hosts' FOR UPDATE locks slots only: two clusters landing on one server at once
    never skip each other's slots."""
    selling = PhysicalHost.objects.filter(state=PhysicalHost.State.ON_SALE).values("pk")
    return Q(**{f"{prefix}state": Host.State.FREE}) & (
        Q(**{f"{prefix}physical_host__isnull": True}) | Q(**{f"{prefix}physical_host__in": selling})
    )


def machine_types_with_availability() -> QuerySet[WithAnnotations[MachineType, FreeHosts]]:
    return (
        MachineType.objects.filter(active=True)
        .select_related("gpu", "location")
        .annotate(free_hosts=Count("hosts", filter=for_sale("hosts__")))
    )


SORTS = {
    "price": "Price: lowest first",
    "-price": "Price: highest first",
    "location": "Location",
    "free": "Most machines free",
}


def list_offers(
    gpu: GPUModel | str | None, machines: int, include_community: bool = False, *,
    location: str = "", kind: str = "", sort: str = "price",
) -> list[Offer]:
    """Offers that can start a cluster of `machines` now, cheapest whole cluster first unless
    another sort is asked for; optionally only one location (code) or machine kind."""
    types = machine_types_with_availability().filter(free_hosts__gte=machines)
    if gpu:
        types = types.filter(gpu__slug__iexact=gpu) if isinstance(gpu, str) else types.filter(gpu=gpu)
    if not include_community:
        types = types.filter(community=False)
    if location:
        types = types.filter(location__code=location)
    if kind:
        types = types.filter(kind=kind)
    offers = sorted(
        (Offer(mt, machines, mt.free_hosts) for mt in types),
        key=lambda o: (o.price_per_cluster_hour, o.machine_type.community, o.id),
    )
    if sort == "-price":
        offers.sort(key=lambda o: o.price_per_cluster_hour, reverse=True)
    elif sort == "location":
        offers.sort(key=lambda o: o.machine_type.location.name)
    elif sort == "free":
        offers.sort(key=lambda o: o.available_machines, reverse=True)
    return offers


def offers_like(machine_type: MachineType, machines: int, *, software: str = "none", volume: bool = False) -> list[Offer]:
    """Offers that can start now for the same GPU and size as `machine_type`, the same
    location first, then the cheapest: what a failed cluster's page offers instead. Only
    those that can run the same cluster (Kubernetes needs VM or bare metal, a volume needs a
    non-community host); community ones only when the cluster was already on one."""
    found = list_offers(machine_type.gpu, machines, include_community=machine_type.community)
    found = [
        o for o in found
        if o.machine_type.gpus_per_machine == machine_type.gpus_per_machine
        and (software != "kubernetes" or o.machine_type.supports_kubernetes)
        and (not volume or o.machine_type.takes_volume)
    ]
    return sorted(found, key=lambda o: o.machine_type.location_id != machine_type.location_id)


def free_host_count(machine_type: MachineType) -> int:
    return machine_type.hosts.filter(for_sale()).count()


def reserve_hosts(machine_type: MachineType, count: int) -> list[Host] | None:
    """Reserve `count` free hosts of a machine type at once, or none at all.

    SKIP LOCKED lets concurrent creates take different hosts instead of queueing behind
    each other; the UPDATE of `state` makes a host another transaction already took fail
    the re-check of `state = free` when its lock is released. Must run inside the caller's
    transaction so the reservation commits (or rolls back) with the cluster.
    """
    assert transaction.get_connection().in_atomic_block, "reserve_hosts needs the caller's transaction"
    hosts = list(
        Host.objects.select_for_update(skip_locked=True)
        .filter(for_sale(), machine_type=machine_type)
        .order_by("id")[:count]
    )
    if len(hosts) < count:
        return None
    Host.objects.filter(pk__in=[h.pk for h in hosts]).update(state=Host.State.RESERVED)
    for host in hosts:
        host.state = Host.State.RESERVED
    return hosts


def release_hosts(host_ids: list[int]) -> int:
    """Give reserved hosts back: on sale again, unless quarantined while they were held."""
    held = Host.objects.filter(pk__in=host_ids, state=Host.State.RESERVED)
    held.filter(quarantined_at__isnull=False).update(state=Host.State.QUARANTINED)
    return held.filter(quarantined_at__isnull=True).update(state=Host.State.FREE)


def operator_addresses() -> list[str]:
    """Who hears about hosts: OPERATOR_EMAILS and every active staff member with an address."""
    staff = get_user_model().objects.filter(is_staff=True, is_active=True).exclude(email="").values_list("email", flat=True)
    return [*settings.OPERATOR_EMAILS, *staff]


def quarantine_hosts(reasons: dict[int, str]) -> list[int]:
    """Take hosts whose machine failed a boot, a join or an install out of sale (host id ->
    what happened, in an operator's words), and tell the operators once per quarantine. A
    host still held by a cluster (a degraded install: its machine stays up) keeps its
    reservation and goes to `quarantined` when it is released. Returns the hosts newly
    quarantined. Call it inside the caller's transaction, before release_hosts."""
    now = timezone.now()
    newly = []
    for host_id, reason in sorted(reasons.items()):
        # Compare-and-set: a host already quarantined keeps its first reason and its one email.
        if Host.objects.filter(pk=host_id, quarantined_at__isnull=True).update(
            quarantined_at=now, quarantine_reason=reason[:255]
        ):
            newly.append(host_id)
    Host.objects.filter(pk__in=newly, state=Host.State.FREE).update(state=Host.State.QUARANTINED)
    if newly:
        notify(
            Kind.HOST_QUARANTINED, recipients=operator_addresses(), context={"host_ids": newly},
            dedupe_key=f"hosts-quarantined:{','.join(map(str, newly))}:{now.isoformat()}",
        )
    return newly


def return_hosts_to_sale(host_ids: list[int]) -> int:
    """An operator cleared the hosts: a quarantined one is on sale again; one still held by a
    cluster goes back on sale when that cluster lets it go."""
    with transaction.atomic():
        Host.objects.filter(pk__in=host_ids, state=Host.State.QUARANTINED).update(state=Host.State.FREE)
        return Host.objects.filter(pk__in=host_ids, quarantined_at__isnull=False).update(
            quarantined_at=None, quarantine_reason=""
        )


@email_context(Kind.HOST_QUARANTINED)
def quarantine_context(stored: dict) -> dict:
    """The operators' email: which hosts left sale and why, with a link to each in /admin/."""
    hosts = list(Host.objects.select_related("machine_type__gpu", "machine_type__location").filter(pk__in=stored["host_ids"]))
    return {
        "hosts": hosts,
        "host_names": ", ".join(h.name for h in hosts),
        "admin_url": settings.SITE_URL + reverse("admin:offers_host_changelist") + "?state__exact=quarantined",
    }
