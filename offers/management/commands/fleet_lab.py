"""`FLEET_LAB=N make run`: N lab hosts up (bin/lab-hosts) and onboarded through `hosts add`, each
with 4 machines of the demo machine type, which is then served from lab hosts only."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from offers.models import Host, MachineType, PhysicalHost

MACHINES_PER_HOST = 4
LAB_HOSTS = Path(settings.BASE_DIR) / "bin" / "lab-hosts"


def demo_machine_type() -> MachineType:
    """The demo catalogue's first one-GPU `local` machine type (seed_demo --provider local)."""
    found = MachineType.objects.filter(provider="local", gpus_per_machine=1, community=False).order_by("id").first()
    if found is None:
        raise CommandError("no local demo machine type: run manage.py seed_demo --provider local first")
    return found


class Command(BaseCommand):
    help = "Bring N lab hosts up and onboard each with 4 machines of the demo machine type (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("count", type=int)

    def handle(self, *args: Any, count: int, **options: Any) -> None:
        if not 1 <= count <= 16:
            raise CommandError("FLEET_LAB is 1 to 16 lab hosts")
        machine_type = demo_machine_type()
        up = subprocess.run([str(LAB_HOSTS), "up", str(count)], capture_output=True, text=True, env=os.environ)
        if up.returncode != 0:
            raise CommandError(up.stderr.strip() or "bin/lab-hosts up failed")
        listed = subprocess.run([str(LAB_HOSTS), "list", "--json"], capture_output=True, text=True, check=True)
        lab = [host for host in json.loads(listed.stdout) if int(host["name"].rsplit("-", 1)[1]) <= count]
        for host in lab:
            if PhysicalHost.objects.filter(address=host["address"], port=host["port"]).exists():
                continue
            call_command("hosts", "add", host["address"], "--port", str(host["port"]), "--ssh-key", host["ssh_key"],
                         "--machine-type", str(machine_type.pk), "--machines", str(MACHINES_PER_HOST),
                         stdout=self.stdout)
        # Served from lab hosts only: this computer's own machines of the type leave sale.
        Host.objects.filter(machine_type=machine_type, physical_host__isnull=True, state=Host.State.FREE).update(
            state=Host.State.DISABLED
        )
        self.stdout.write(f"Lab fleet: {len(lab)} hosts, {MACHINES_PER_HOST} machines each of "
                          f"{machine_type.gpu.name} {machine_type.get_kind_display()} ({machine_type.location.name}).")
