from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar, cast

import factory
import factory.django
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from accounts.models import Environment, Membership, Role, Workspace
from offers.models import GPUModel, Host, Location, MachineType

T = TypeVar("T")


class ModelFactory(factory.django.DjangoModelFactory[T]):
    """Calling a factory returns its model's instance, and mypy is told so."""

    class Meta:
        abstract = True

    if TYPE_CHECKING:

        def __new__(cls, *args: Any, **kwargs: Any) -> T: ...  # type: ignore[misc]


class UserFactory(ModelFactory[User]):
    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    # Hashed into the saved row (a post-generation set_password would not be saved, and
    # force_login's session hash would then not match the stored password).
    password = factory.django.Password("pw")

    @factory.post_generation
    def verified_email(self, create, extracted, **kwargs):
        """The address counts as verified (as after sign-up) unless verified_email=False."""
        if create and self.email and extracted is not False:
            from allauth.account.models import EmailAddress

            EmailAddress.objects.get_or_create(user=self, email=self.email, defaults={"verified": True, "primary": True})


class WorkspaceFactory(ModelFactory[Workspace]):
    class Meta:
        model = Workspace
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"Workspace {n}")
    credit_balance = Decimal("1000.00")

    @factory.post_generation
    def default_environment(self, create: bool, extracted: object, **kwargs: object) -> None:
        # factory_boy calls this with the created Workspace as `self`.
        workspace = cast(Workspace, self)
        if create:
            Environment.objects.create(workspace=workspace, name="default", is_default=True, monthly_budget=Decimal("5000"))


class MembershipFactory(ModelFactory[Membership]):
    class Meta:
        model = Membership

    workspace = factory.SubFactory(WorkspaceFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.OWNER


class GPUModelFactory(ModelFactory[GPUModel]):
    class Meta:
        model = GPUModel
        django_get_or_create = ("slug",)

    slug = "H100"
    name = "NVIDIA H100 80GB SXM"
    memory_gb = 80


class LocationFactory(ModelFactory[Location]):
    class Meta:
        model = Location
        django_get_or_create = ("code",)

    code = "us-east-1"
    name = "Ashburn, Virginia"
    country = "US"


class MachineTypeFactory(ModelFactory[MachineType]):
    class Meta:
        model = MachineType

    gpu = factory.SubFactory(GPUModelFactory)
    location = factory.SubFactory(LocationFactory)
    kind = "vm"
    gpus_per_machine = 8
    interconnect = "eth_100g"
    price_per_machine_hour = Decimal("2.50")
    boot_deadline_minutes = 25
    community = False
    provider = "simulated"


class HostFactory(ModelFactory[Host]):
    class Meta:
        model = Host

    machine_type = factory.SubFactory(MachineTypeFactory)
    name = factory.Sequence(lambda n: f"host-{n:04d}")


def machine_type_with_hosts(count: int = 4, **kwargs) -> MachineType:
    machine_type = MachineTypeFactory(**kwargs)
    HostFactory.create_batch(count, machine_type=machine_type)
    return machine_type


def ready_cluster(environment: Environment, machine_type: MachineType, owner: User, count: int = 3) -> Any:
    """A cluster named "train" on the simulated provider, driven to ready by the eager tasks."""
    from clusters.models import Status
    from clusters.services.create import create_cluster

    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=count, created_by=owner,
    )
    cluster.refresh_from_db()
    assert cluster.status == Status.READY
    return cluster
