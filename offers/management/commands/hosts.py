"""Servers of the fleet: `hosts add`, `list`, `drain`, `remove` (docs/nodeops.md, "Hosts").

A refusal (a host that fails its grade, a name that is taken, a host still running machines)
is one line naming the reason, and exit status 2."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count, Q

from clusters.models import Node
from offers.fleet import Refused, drain_host, onboard_host, remove_host
from offers.models import Host, PhysicalHost

# A machine of a cluster still holds its slot until it is released.
GONE = (Node.State.RELEASED, Node.State.FAILED, Node.State.STOPPED)


class Command(BaseCommand):
    help = "Onboard, list, drain and remove the servers whose machines are sold."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="grade a host over SSH and put its machines on sale if it passes")
        add.add_argument("address")
        add.add_argument("--port", type=int, default=22)
        add.add_argument("--ssh-key", required=True, help="the operator's private key for the host's root")
        add.add_argument("--machine-type", type=int, required=True, help="id of the machine type its machines are sold as")
        add.add_argument("--machines", type=int, required=True, help="how many machines of that type it holds")
        add.add_argument("--user", default="root")
        add.add_argument("--name", default="", help="the host's name (default: the hostname it reports)")
        listing = actions.add_parser("list", help="every host, its grade and what runs there")
        listing.add_argument("--json", action="store_true")
        actions.add_parser("drain", help="no new machine lands on the host").add_argument("name")
        actions.add_parser("remove", help="forget a host that runs no machine").add_argument("name")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        # paramiko tells every connection and login at INFO; a refusal is one line.
        logging.getLogger("paramiko").setLevel(logging.WARNING)
        try:
            if action == "add":
                host = onboard_host(
                    options["address"], port=options["port"], ssh_key=options["ssh_key"],
                    machine_type_id=options["machine_type"], machines=options["machines"],
                    user=options["user"], name=options["name"],
                )
                self.stdout.write(f"{host.name} ({host.address}:{host.port}) passed its grade: "
                                  f"{host.slots.count()} machines on sale.")
            elif action == "list":
                self._list(as_json=options["json"])
            elif action == "drain":
                host = drain_host(options["name"])
                self.stdout.write(f"{host.name} is {host.get_state_display().lower()}: no new machine lands there.")
            elif action == "remove":
                remove_host(options["name"])
                self.stdout.write(f"{options['name']} removed.")
        except Refused as refused:
            where = f"{options['address']}:{options['port']} " if action == "add" else ""
            raise CommandError(f"{where}refused: {refused}", returncode=2) from None

    def _list(self, *, as_json: bool) -> None:
        hosts = list(PhysicalHost.objects.annotate(
            slots_total=Count("slots"), slots_used=Count("slots", filter=Q(slots__state=Host.State.RESERVED)),
        ))
        running: dict[int, list[dict[str, Any]]] = {}
        for node in (
            Node.objects.filter(host__physical_host__in=hosts).exclude(state__in=GONE)
            .select_related("cluster", "host").order_by("cluster_id", "index")
        ):
            assert node.host.physical_host_id is not None
            running.setdefault(node.host.physical_host_id, []).append(
                {"cluster": node.cluster.name, "cluster_id": node.cluster_id, "node": node.name, "slot": node.host.name}
            )
        rows = [
            {
                "name": h.name, "address": h.address, "port": h.port, "state": h.state,
                "grade": h.grade, "grade_passes": h.grade_passes,
                "graded_at": h.graded_at.isoformat() if h.graded_at else None,
                "gpus": h.gpus, "slots_total": h.slots_total, "slots_used": h.slots_used,
                "machines": running.get(h.pk, []),
            }
            for h in hosts
        ]
        if as_json:
            self.stdout.write(json.dumps(rows, indent=2))
            return
        if not rows:
            self.stdout.write("No hosts. Onboard one with: manage.py hosts add ADDRESS --ssh-key KEY --machine-type ID --machines N")
            return
        self.stdout.write(f"{'NAME':16} {'ADDRESS':24} {'STATE':10} {'GRADE':6} {'SLOTS':>9}  MACHINES")
        for row in rows:
            machines = ", ".join(f"{m['cluster']}/{m['node']}" for m in row["machines"]) or "—"
            self.stdout.write(
                f"{row['name']:16} {row['address'] + ':' + str(row['port']):24} {row['state']:10} "
                f"{'pass' if row['grade_passes'] else 'fail':6} {str(row['slots_used']) + '/' + str(row['slots_total']) + ' used':>9}  {machines}"
            )
