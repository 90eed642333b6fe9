"""A host that dies (lab-2 powered off with bin/lab-hosts stop): its machines stop being billed
from the instant it is marked down, the operators are emailed, and when it answers again its
leftover machines are released and wiped before any of its slots is sold again."""

from __future__ import annotations

import datetime as dt
import re
import time

import pytest
from django.test import Client

from billing.models import LedgerEntry, MachineUsage
from billing.money import posted_total
from billing.services import meter_usage
from clusters import tasks
from clusters.models import NodeHealth, Status
from clusters.node_health import tasks as health_tasks
from clusters.services.create import create_cluster
from clusters.services.terminate import terminate_cluster
from offers.inventory import list_offers
from offers.models import Host, PhysicalHost
from tests.factories import UserFactory
from tests.notifications.conftest import smtp, subject_of, text_of  # noqa: F401 - the fixture
from tests.providers.conftest import SETTLED, drive
from tests.providers.test_real_nodes import story

from .conftest import lab_hosts, needs_lab
from .test_runtime import CAN, WHY, onboarded

pytestmark = [needs_lab, pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}")]


@pytest.mark.django_db(transaction=True)
def test_a_dead_hosts_machines_stop_billing_when_it_goes_down_and_its_leftovers_are_wiped_before_it_sells_again(
    lab, environment, owner, settings, tmp_path, smtp
):
    UserFactory(username="ops", email="ops@runcrate.test", is_staff=True)
    settings.OPERATOR_EMAILS = ["fleet@runcrate.test"]
    with onboarded(lab["lab-2"], 3, settings, tmp_path) as (machine_type, host):
        try:
            cluster = create_cluster(environment=environment, name="doomed", machine_type=machine_type,
                                     machine_count=2, software="none", created_by=owner)
            cluster = drive(cluster, SETTLED, timeout=120)
            assert cluster.status == Status.READY, story(cluster)
            meter_usage()

            lab_hosts(lab["lab-2"]["dir"], "stop", "lab-2")
            assert health_tasks.check_cluster_health(cluster.pk) == {
                "node-0": NodeHealth.UNREACHABLE, "node-1": NodeHealth.UNREACHABLE}
            host.refresh_from_db()
            assert host.state == PhysicalHost.State.DOWN and host.down_since is not None
            down = host.down_since

            # Billed up to the instant the host was marked down, and not a cent after, however
            # late and however often metering runs; the ledger holds each machine's total once.
            usages = list(MachineUsage.objects.filter(cluster=cluster).order_by("node__index"))
            assert [usage.ended_at for usage in usages] == [down, down]
            meter_usage(down + dt.timedelta(hours=3))
            meter_usage(down + dt.timedelta(hours=5))
            owed = sum(posted_total(usage.rate, usage.started_at, down) for usage in usages)
            posted = -sum(LedgerEntry.objects.filter(cluster=cluster).values_list("amount", flat=True))
            assert posted == owed == sum(MachineUsage.objects.filter(cluster=cluster).values_list("posted_amount", flat=True))
            # A second round on the silent host changes nothing: one email, one stop.
            health_tasks.check_cluster_health(cluster.pk)
            assert MachineUsage.objects.filter(cluster=cluster, ended_at=down).count() == 2

            # The operators are told, once, with the machines that were on it.
            [mail] = [m for m in smtp.inbox.to("fleet@runcrate.test") if subject_of(m).startswith("Host down")]
            assert subject_of(mail) == "Host down: lab-2 stopped answering (2 machines on it)"
            assert smtp.inbox.to("ops@runcrate.test"), "staff are operators too"
            body = text_of(mail)
            assert "doomed: node-0" in body and "doomed: node-1" in body and "no longer billed" in body

            # The customer reads it on the cluster page, in their words (no host name).
            client = Client()
            client.force_login(owner)
            page = client.get(f"/clusters/{cluster.pk}/").content.decode()
            notes = re.findall(r'data-testid="billing-stopped">(.*?)</div>', page)
            assert len(notes) == 2, page
            assert all(f"{down:%Y-%m-%d %H:%M:%S} UTC</time>, when its host stopped answering" in note
                       and "lab-2" not in note for note in notes), notes
            said = list(cluster.events.filter(event="node_billing_stopped").values_list("message", flat=True))
            assert len(said) == 2 and all("not billed from" in line and "lab-2" not in line for line in said), said

            # Terminated while its host is silent: the slots wait out of sale for the return.
            terminate_cluster(cluster, actor="alice")
            cluster = drive(cluster, {Status.TERMINATED}, timeout=120)
            assert cluster.status == Status.TERMINATED, story(cluster)
            assert set(Host.objects.filter(physical_host=host, nodes__isnull=False).values_list("state", flat=True)) == {
                Host.State.QUARANTINED}
            assert -sum(LedgerEntry.objects.filter(cluster=cluster).values_list("amount", flat=True)) == owed

            lab_hosts(lab["lab-2"]["dir"], "start", "lab-2")
            host.refresh_from_db()
            assert list_offers(machine_type.gpu, 1) == [], "nothing of a host that has not been wiped is sold"
            # The beat asks again every minute: a host just powered on may take a few seconds to answer.
            outcome: list[dict] = []
            for _ in range(12):
                outcome = tasks.wipe_returned_hosts()
                if outcome:
                    break
                time.sleep(5)

            assert outcome == [{"host": "lab-2", "state": PhysicalHost.State.ON_SALE, "wiped": ["lab-2-0", "lab-2-1"],
                                "returned": 2, "quarantined": 0}], outcome
            from offers.fleet import runtime_for

            assert runtime_for(host).call("list") == {"machines": []}
            receipts = list(cluster.events.filter(event="wipe_receipt").values_list("message", flat=True))
            after = [line for line in receipts if "after its host answered again" in line]
            assert len(after) == 2 and all("wiped and checked clean at" in line for line in after), receipts
            assert set(Host.objects.filter(physical_host=host).values_list("state", flat=True)) == {Host.State.FREE}
            host.refresh_from_db()
            assert host.state == PhysicalHost.State.ON_SALE and host.down_since is None
            assert [offer.available_machines for offer in list_offers(machine_type.gpu, 1)] == [3]
            assert tasks.wipe_returned_hosts() == [], "a host that is up is not wiped again"
        finally:
            lab_hosts(lab["lab-2"]["dir"], "start", "lab-2")
