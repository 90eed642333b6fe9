from __future__ import annotations

from decimal import Decimal

import factory
from django.contrib.auth import get_user_model

from accounts.models import Environment, Membership, Role, Workspace
from offers.models import GPUModel, Host, Location, MachineType


class UserFactory(factory.django.DjangoModelFactory):
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


class WorkspaceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Workspace
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"Workspace {n}")
    credit_balance = Decimal("1000.00")

    @factory.post_generation
    def default_environment(self, create, extracted, **kwargs):
        if create:
            Environment.objects.create(workspace=self, name="default", is_default=True, monthly_budget=Decimal("5000"))


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    workspace = factory.SubFactory(WorkspaceFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.OWNER


class GPUModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GPUModel
        django_get_or_create = ("slug",)

    slug = "H100"
    name = "NVIDIA H100 80GB SXM"
    memory_gb = 80


class LocationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Location
        django_get_or_create = ("code",)

    code = "us-east-1"
    name = "Ashburn, Virginia"
    country = "US"


class MachineTypeFactory(factory.django.DjangoModelFactory):
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


class HostFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Host

    machine_type = factory.SubFactory(MachineTypeFactory)
    name = factory.Sequence(lambda n: f"host-{n:04d}")


def machine_type_with_hosts(count: int = 4, **kwargs) -> MachineType:
    machine_type = MachineTypeFactory(**kwargs)
    HostFactory.create_batch(count, machine_type=machine_type)
    return machine_type
