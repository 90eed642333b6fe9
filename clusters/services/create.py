"""Creating a cluster: the plan (every check, nothing reserved), the create itself (all
machines reserved at once under the workspace lock) and creating a failed cluster again."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Environment, SSHKey, Workspace
from audit.recording import Action
from billing import services as billing
from billing.money import hours_lasting
from billing.services import month_to_date_spend, required_balance
from clusters import rules
from clusters.errors import ClusterError, Conflict
from clusters.image_facts import ImageFacts
from clusters.images import default_image, offer_images
from clusters.models import Cluster, Node, Software, Status, Volume
from clusters.queries import committed_rate
from clusters.quotas import QuotaUse, check_quotas, membership_of, quota_uses
from clusters.services.common import SYSTEM, after_commit_changed, record_event
from config.money import format_money
from offers import inventory
from offers.models import COMMUNITY_WARNING, MachineType


def check_balance(workspace: Workspace, price_per_hour: Decimal) -> None:
    problem = rules.balance_problem(workspace.credit_balance, price_per_hour)
    if problem is not None:
        raise problem


@dataclass
class ClusterPlan:
    """What creating a cluster would do, checked exactly as create_cluster checks it, with
    nothing reserved: the price, the balance rule, the budget, the runway of the whole workspace
    once it runs too, and every refusal (each a ClusterError with its code)."""

    machine_type: MachineType | None
    machines: int | None
    software: str
    # The image a create would boot (the one asked for, or the offer's default), and every
    # image the offer can start.
    image: str
    images: list[ImageFacts] | None
    price_per_machine_hour: Decimal
    price_per_hour: Decimal
    required_balance: Decimal
    balance: Decimal
    available_machines: int
    monthly_budget: Decimal
    budget_spent: Decimal
    committed_per_hour: Decimal
    problems: list[ClusterError] = field(default_factory=list)
    # What the environment's own clusters cost per hour (booting ones too): the budget's spend.
    environment_per_hour: Decimal = Decimal(0)
    # Every quota that binds this request, with what is in use (clusters.quotas).
    quotas: list[QuotaUse] = field(default_factory=list)

    @property
    def can_create(self) -> bool:
        return not self.problems

    @property
    def budget_remaining(self) -> Decimal:
        return billing.budget_remaining(self.monthly_budget, self.budget_spent)

    @property
    def per_hour_after(self) -> Decimal:
        """What everything the workspace runs would cost per hour with this cluster too."""
        return self.committed_per_hour + self.price_per_hour

    @property
    def runway_hours(self) -> Decimal | None:
        """Hours the balance lasts once this cluster runs beside everything else (None: free)."""
        return hours_lasting(self.balance, self.per_hour_after)

    @property
    def budget_runway_hours(self) -> Decimal | None:
        """Hours the environment's budget left lasts once this cluster runs beside its other
        clusters (None: nothing would be billed)."""
        return hours_lasting(self.budget_remaining, self.environment_per_hour + self.price_per_hour)

    @property
    def warnings(self) -> list[str]:
        """Everything to know before creating: the money warnings, then the offer's."""
        return self.money_warnings + self.offer_warnings

    @property
    def offer_warnings(self) -> list[str]:
        if self.machine_type is not None and self.machine_type.community:
            return [COMMUNITY_WARNING]
        return []

    @property
    def money_warnings(self) -> list[str]:
        """The balance's runway and the budget against one hour of this cluster."""
        found = []
        if self.runway_hours is not None and self.runway_hours < 1:
            found.append(
                f"With this cluster the workspace would spend {format_money(self.per_hour_after)}/h and the balance of "
                f"{format_money(self.balance)} lasts {_minutes(self.runway_hours)}: every cluster is stopped when "
                "it runs out. Top up first."
            )
        if self.price_per_hour and self.budget_runway_hours is not None and self.budget_runway_hours < 1:
            found.append(
                f"With this cluster the environment would spend {format_money(self.environment_per_hour + self.price_per_hour)}/h "
                f"and the {format_money(self.budget_remaining)} left of its monthly budget lasts "
                f"{_minutes(self.budget_runway_hours)}: its clusters are stopped when the budget is reached. "
                "Raise the budget first."
            )
        found += [use.spend_warning for use in self.quotas if use.spend_warning]
        return found


def plan_cluster(
    *, environment: Environment, name: str, machine_type: MachineType | None, machine_count: int | None,
    software: str = Software.NONE, volume: Volume | None = None, created_by_id: int | None = None,
    image: str | None = None,
) -> ClusterPlan:
    """create_cluster's checks without the locks or the reservation, every refusal collected.
    `created_by_id`: the user who would create it, whose quotas bind it; `image` None: the
    offer's default."""
    workspace = Workspace.objects.get(pk=environment.workspace_id)
    problems = list(rules.request_problems(
        environment=environment, name=name, machine_type=machine_type, machine_count=machine_count,
        software=software, volume=volume, image=image,
    ))
    images = offer_images(machine_type) if machine_type is not None and machine_type.active else None
    count = machine_count or 0
    per_machine = machine_type.price_per_machine_hour if machine_type is not None else Decimal(0)
    price = machine_type.price_for(count) if machine_type is not None else Decimal(0)
    available = inventory.free_host_count(machine_type) if machine_type is not None else 0
    if machine_type is not None and count and available < count:
        problems.append(Conflict(
            "offer_unavailable",
            f"This offer cannot start {count} machines now ({available} free). Pick another offer or fewer machines.",
            field="offer",
        ))
    if (problem := rules.balance_problem(workspace.credit_balance, price)) is not None:
        problems.append(problem)
    try:
        billing.check_budget(environment)
    except ClusterError as problem:
        problems.append(problem)
    gpus = machine_type.gpus_per_machine * count if machine_type is not None else 0
    quotas = quota_uses(environment, membership_of(environment, created_by_id), adding_gpus=gpus, adding_per_hour=price)
    problems += [refusal for use in quotas if (refusal := use.problem()) is not None]
    return ClusterPlan(
        machine_type=machine_type, machines=machine_count, software=software,
        image=image or default_image(images), images=images, price_per_machine_hour=per_machine,
        price_per_hour=price, required_balance=required_balance(price), balance=workspace.credit_balance,
        available_machines=available, monthly_budget=environment.monthly_budget,
        budget_spent=month_to_date_spend([environment.pk])[environment.pk],
        committed_per_hour=committed_rate(workspace.pk), problems=problems,
        environment_per_hour=committed_rate(workspace.pk, environment_id=environment.pk), quotas=quotas,
    )


def create_cluster(
    *, environment: Environment, name: str, machine_type: MachineType | None, machine_count: int | None,
    software: str = Software.NONE, volume: Volume | None = None, ssh_keys: Iterable[SSHKey] = (),
    created_by: User | None = None, actor: str = SYSTEM, image: str | None = None,
) -> Cluster:
    """`image`: one the offer's machines can start (clusters.images); None, the offer's default."""
    # The checks that need no lock; the money and inventory ones are repeated under locks.
    rules.check_request(
        environment=environment, name=name, machine_type=machine_type, machine_count=machine_count,
        software=software, volume=volume, image=image,
    )
    assert machine_type is not None and machine_count is not None
    image = image or default_image(offer_images(machine_type))
    price = machine_type.price_for(machine_count)
    # Refused before anything is written when the balance is plainly short (read without the
    # lock: the check that counts is the one under it, below).
    unlocked = Workspace.objects.get(pk=environment.workspace_id)
    check_balance(unlocked, price)
    try:
        with transaction.atomic():
            # Everything that needs no other create to wait is written first: the machines (SKIP
            # LOCKED: concurrent creates take different ones), the cluster, its nodes, its event,
            # audit entry and webhook deliveries. The workspace row lock comes last, so the
            # creates of one workspace queue only for the money and quota checks and the
            # commit, not for every insert (issue 38: 200 creates at once waited on each
            # other's whole transaction). A check that refuses rolls all of it back: the
            # reservation stays all or nothing.
            hosts = inventory.reserve_hosts(machine_type, machine_count)
            if hosts is None:
                raise Conflict(
                    "offer_unavailable",
                    f"This offer can no longer start {machine_count} machines now "
                    f"({inventory.free_host_count(machine_type)} free). Pick another offer or fewer machines.",
                    field="offer",
                )
            now = timezone.now()
            cluster = Cluster.objects.create(
                workspace=unlocked, environment=environment, name=name, machine_type=machine_type,
                machine_count=machine_count, software=software, image=image, volume=volume,
                price_per_machine_hour=machine_type.price_per_machine_hour, provider=machine_type.provider,
                status=Status.PROVISIONING, status_changed_at=now, created_by=created_by,
                deadline_at=now + dt.timedelta(minutes=machine_type.boot_deadline_minutes),
            )
            # add, not set: a new cluster has no keys to compare with (set reads them first).
            if keys := list(ssh_keys):
                cluster.ssh_keys.add(*keys)
            Node.objects.bulk_create([Node(cluster=cluster, index=i, host=host) for i, host in enumerate(hosts)])
            record_event(
                cluster, "created",
                f"Reserved {machine_count} machines ({machine_type}) at {format_money(cluster.price_per_hour)}/h; software: "
                f"{cluster.get_software_display()}{f'; image: {image}' if image else ''}.",
                actor=actor, audit=Action("cluster.create", after={
                    "name": name, "offer": machine_type.pk, "machines": machine_count, "software": software,
                    "image": image,
                    "volume": volume.pk if volume else None, "environment": environment.name}),
            )
            # Lock the workspace so two creates cannot both pass the same balance, budget and
            # quota checks; held until the commit. The quotas count what is running without
            # this cluster's own machines, written above in this transaction.
            workspace = Workspace.objects.select_for_update().get(pk=environment.workspace_id)
            check_balance(workspace, price)
            billing.check_budget(environment)
            check_quotas(environment, created_by.pk if created_by is not None else None,
                         adding_gpus=machine_type.gpus_per_machine * machine_count, adding_per_hour=price,
                         excluding_cluster_id=cluster.pk)
            cluster.workspace = workspace
            after_commit_changed(cluster.pk, advance=True)
    except IntegrityError as exc:
        # The host constraint caught a double booking the lock would have prevented; treat
        # it as the offer having gone, never as two clusters on one machine.
        if "host_held_by_one_live_node" in str(exc):
            raise Conflict("offer_unavailable", "Those machines were just taken. Try again.", field="offer") from None
        if "cluster_name_unique_among_live" in str(exc):
            # Another create with this name committed first.
            raise rules.name_taken(name) from None
        raise
    return cluster


def recreate_cluster(failed: Cluster, machine_type: MachineType | None, *, created_by: User | None = None, actor: str = SYSTEM) -> Cluster:
    """The customer's choice on a failed cluster's page: the same cluster (name, size,
    software, image, SSH keys, volume) on an offer that can start it now. Nothing is retried
    without this choice."""
    if failed.status != Status.FAILED:
        raise Conflict("not_failed", f"{failed.name} did not fail; only a failed cluster is created again.")
    same_machine = machine_type is not None and (
        machine_type.gpu_id == failed.machine_type.gpu_id
        and machine_type.gpus_per_machine == failed.machine_type.gpus_per_machine
    )
    if not same_machine:
        raise ClusterError(
            "offer_not_found", "Pick one of the offers listed for the same GPU and size.", field="offer"
        )
    return create_cluster(
        environment=failed.environment, name=failed.name, machine_type=machine_type,
        machine_count=failed.machine_count, software=failed.software, volume=failed.volume,
        image=failed.image or None, ssh_keys=list(failed.ssh_keys.all()), created_by=created_by, actor=actor,
    )


def _minutes(hours: Decimal | float) -> str:
    """A runway under an hour in whole minutes, in English ("1 minute", "25 minutes")."""
    count = round(hours * 60)
    return f"{count} minute{'' if count == 1 else 's'}"
