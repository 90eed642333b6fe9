"""Seed the demo catalogue, inventory and the `demo` user, idempotently."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from accounts.models import Membership, Workspace
from accounts.services import create_workspace
from billing import ledger
from billing.models import LedgerEntry
from config.money import format_money
from offers import catalogue, lab
from offers.models import GPUModel, Host, Location, MachineType

DEMO_CREDIT = Decimal("2500.00")


class Command(BaseCommand):
    help = "Create the demo catalogue, host inventory and the demo/demo Owner of a funded workspace (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--provider", default=settings.DEFAULT_PROVIDER, help="Provider for every machine type.")
        parser.add_argument("--boot-seconds", type=float, default=4.0, help="Simulated boot time per host.")

    @transaction.atomic
    def handle(self, *args: Any, provider: str, boot_seconds: float, **options: Any) -> None:
        gpus = {
            slug: GPUModel.objects.update_or_create(slug=slug, defaults={"name": name, "memory_gb": mem})[0]
            for slug, name, mem in catalogue.GPUS
        }
        locations = {
            code: Location.objects.update_or_create(
                code=code, defaults={"name": name, "country": country, "gateway_host": gateway}
            )[0]
            for code, name, country, gateway in catalogue.LOCATIONS
        }
        hosts_made = 0
        serial = 0
        for gpu, loc, kind, per, interconnect, price, deadline, community, count in catalogue.MACHINE_TYPES:
            machine_type, _ = MachineType.objects.update_or_create(
                gpu=gpus[gpu], location=locations[loc], kind=kind, gpus_per_machine=per, interconnect=interconnect,
                defaults={
                    "price_per_machine_hour": catalogue.price(price), "boot_deadline_minutes": deadline,
                    "community": community, "provider": provider,
                    "vcpus": 26 * per if per > 1 else 16, "memory_gb": 225 * per if per > 1 else 128,
                    "disk_gb": {1: 500, 2: 1000, 4: 3800, 8: 7600}[per],
                },
            )
            for i in range(count):
                serial += 1
                host, created = Host.objects.get_or_create(
                    name=f"{loc}-{gpu.lower()}-{kind.replace('_', '')}-{per}x-{i:02d}",
                    defaults={"machine_type": machine_type},
                )
                if created:
                    # The demo's machines take a few seconds to boot, join and install, as real ones do.
                    lab.inject(host, boot_seconds=boot_seconds + (i % 4), join_seconds=1.5, install_seconds=3.0)
                hosts_made += created
                if provider == "local":
                    # Each local machine listens on its own loopback address.
                    address = f"127.78.{serial // 250}.{serial % 250 + 1}"
                    Host.objects.filter(pk=host.pk).update(address=address, port=2222)

        user_model = get_user_model()
        demo, created = user_model.objects.get_or_create(username="demo", defaults={"email": "demo@runcrate.example"})
        if created:
            demo.set_password("demo")
            demo.is_staff = demo.is_superuser = True
            demo.save()
        # The demo signs in without a verification email (email verification is mandatory).
        EmailAddress.objects.get_or_create(user=demo, email__iexact=demo.email,
                                           defaults={"email": demo.email, "verified": True, "primary": True})
        membership = Membership.objects.filter(user=demo).select_related("workspace").first()
        workspace = membership.workspace if membership else create_workspace(name="Demo Lab", owner=demo)
        ledger.post_entry(
            workspace_id=workspace.pk, kind=LedgerEntry.Kind.ADJUSTMENT, amount=DEMO_CREDIT,
            idempotency_key=f"seed:demo-credit:{workspace.pk}", description="Demo credit",
        )
        workspace = Workspace.objects.get(pk=workspace.pk)
        self.stdout.write(
            f"Seeded {len(gpus)} GPU models, {MachineType.objects.count()} machine types, {hosts_made} new hosts "
            f"(provider: {provider}); demo workspace balance {format_money(workspace.credit_balance)}."
        )
