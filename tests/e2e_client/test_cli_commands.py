"""Every `runcrate` command group against the real API on a live server (in-process CLI, real HTTP)."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest

from accounts.models import Environment, Membership, Role, SSHKey, Workspace
from clusters.models import Cluster
from offers import lab
from tests.factories import WorkspaceFactory, machine_type_with_hosts

pytestmark = pytest.mark.django_db(transaction=True)

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl laptop"


def test_offers_show_cluster_and_machine_prices_and_community_only_when_asked(cli, instant_offer):
    community = machine_type_with_hosts(2, community=True, price_per_machine_hour=Decimal("1.00"))
    table = cli("clusters", "offers", "--gpu", "H100", "--machines", "2")
    assert table.returncode == 0, table.stderr
    assert "$5.00/h" in table.stdout and "$2.50/h" in table.stdout and "community" not in table.stdout
    assert cli("clusters", "offers", "--machines", "2", "-q").stdout.split() == [str(instant_offer.pk)]
    with_community = cli("clusters", "offers", "--machines", "2", "--include-community", "--json")
    assert [o["id"] for o in json.loads(with_community.stdout)] == [community.pk, instant_offer.pk]
    assert "secrets" in cli("clusters", "offers", "--machines", "2", "--include-community").stdout
    too_big = cli("clusters", "offers", "--machines", "65")
    assert too_big.returncode == 2 and "machines" in too_big.stderr


def test_create_dry_run_prices_from_the_server_and_reserves_nothing(cli, instant_offer, workspace):
    plan = cli("clusters", "create", "--name", "dry", "--offer", str(instant_offer.pk), "--machines", "2", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "$5.00/h for the whole cluster" in plan.stdout and "needs $10.00" in plan.stdout
    assert "Nothing was reserved" in plan.stdout
    assert "none on every node" in plan.stdout and "Warning: No SSH key: nobody could log in" in plan.stdout
    assert not Cluster.objects.exists()
    key = SSHKey.objects.create(workspace=workspace, name="laptop", public_key="ssh-ed25519 AAAA laptop",
                                fingerprint="SHA256:laptop")
    keyed = cli("clusters", "create", "--name", "dry", "--offer", str(instant_offer.pk), "--machines", "2", "--dry-run")
    assert f"{key.pk} on every node" in keyed.stdout and "No SSH key" not in keyed.stdout
    as_json = json.loads(cli("clusters", "create", "--name", "dry", "--offer", str(instant_offer.pk),
                             "--machines", "2", "--dry-run", "--json").stdout)
    assert as_json["can_create"] is True and as_json["runway"]["hours"] == "200.00"

    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("4.00"))
    broke = cli("clusters", "create", "--name", "dry", "--offer", str(instant_offer.pk), "--machines", "2",
                "--software", "kubernetes", "--dry-run")
    assert broke.returncode == 4
    assert "Refused (insufficient_credits)" in broke.stdout
    bad = cli("clusters", "create", "--name", "Bad Name", "--offer", str(instant_offer.pk), "--machines", "1", "--dry-run")
    assert bad.returncode == 2 and "invalid_name" in bad.stdout and "invalid_machine_count" in bad.stdout
    assert not Cluster.objects.exists()


def test_create_list_info_events_add_worker_and_delete(cli, environment):
    offer = machine_type_with_hosts(3)
    created = cli("clusters", "create", "--name", "train", "--offer", str(offer.pk), "--machines", "2", "-q")
    assert created.returncode == 0, created.stderr
    cluster_id = created.stdout.strip()
    assert "train" in cli("clusters", "ls").stdout
    info = cli("clusters", "info", cluster_id)
    assert "node-0" in info.stdout and "head" in info.stdout and "ready" in info.stdout
    assert re.search(r"^Cost so far: +\$\d+\.\d\d$", info.stdout, re.M), info.stdout
    events = cli("clusters", "events", cluster_id)
    # Events in words, as the page names them; --json keeps the keys.
    assert "  Created  Reserved 2 machines" in events.stdout and "  Ready    train is ready: 2 machines.\n" in events.stdout
    assert " created " not in events.stdout
    assert {"created", "ready"} <= {e["event"] for e in json.loads(cli("clusters", "events", cluster_id, "--json").stdout)}
    grown = cli("clusters", "add-worker", cluster_id, "--count", "1")
    assert grown.returncode == 0, grown.stderr
    assert json.loads(cli("clusters", "info", cluster_id, "--json").stdout)["machines"] == 3
    too_many = cli("clusters", "add-worker", cluster_id, "--count", "62")
    assert too_many.returncode == 2 and "at most 64 machines" in too_many.stderr
    taken = cli("clusters", "create", "--name", "second", "--offer", str(offer.pk), "--machines", "2")
    assert taken.returncode == 6 and "offer_unavailable" in taken.stderr
    refused = cli("clusters", "delete", cluster_id, input="n\n")
    assert refused.returncode != 0 and Cluster.objects.get(pk=cluster_id).status == "ready"
    refused = cli("clusters", "terminate", cluster_id, input="n\n")
    assert refused.returncode != 0 and Cluster.objects.get(pk=cluster_id).status == "ready"
    ended = cli("clusters", "rm", cluster_id, "--yes", "--watch", "--interval", "0.2")
    assert ended.returncode == 0, ended.stderr
    assert "[Terminating] Termination requested: Terminated by a user. Billing stopped." in ended.stdout
    assert "user_requested" not in ended.stdout
    assert re.search(r"^Cluster train is terminated; total cost \$\d+\.\d\d\.$", ended.stdout, re.M), ended.stdout
    assert Cluster.objects.get(pk=cluster_id).status == "terminated"
    after = cli("clusters", "info", cluster_id).stdout
    assert re.search(r"^Why: +Terminated by a user$", after, re.M) and re.search(r"^Total cost: +\$", after, re.M), after


def test_add_workers_is_the_apis_word_and_watch_follows_the_add_until_every_node_is_in(cli, environment):
    from offers.models import Host

    offer = machine_type_with_hosts(3)
    cluster_id = cli("clusters", "create", "--name", "grow", "--offer", str(offer.pk), "--machines", "2", "-q").stdout.strip()
    # The machine to be added takes its time to boot: the cluster stays ready meanwhile.
    lab.inject(Host.objects.filter(state=Host.State.FREE), boot_seconds=600)
    grown = cli("clusters", "add-workers", cluster_id, "--count", "1")
    assert grown.returncode == 0, grown.stderr
    assert f"Follow it with: runcrate clusters watch {cluster_id}" in grown.stdout
    watched = cli("clusters", "watch", cluster_id, "--interval", "0.2", "--timeout", "1")
    assert watched.returncode == 1, watched.stdout
    assert "Cluster grow is ready" not in watched.stdout
    assert watched.stdout.splitlines()[-1] == "Gave up after 1s; the cluster is still ready, node-2 is still booting."
    # The older spelling is kept.
    assert cli("clusters", "add-worker", "--help").returncode == 0


def test_info_prints_the_launch_lines_under_the_ssh_lines(cli, environment):
    offer = machine_type_with_hosts(2)
    cluster_id = cli("clusters", "create", "--name", "lines", "--offer", str(offer.pk), "--machines", "2",
                     "--software", "slurm", "-q").stdout.strip()
    info = cli("clusters", "info", cluster_id).stdout
    launch = json.loads(cli("clusters", "info", cluster_id, "--json").stdout)["launch"]
    assert info.index("SSH") < info.index("Launch lines")
    for key, line in launch.items():
        assert f"  {key}: {line}" in info


def test_ssh_keys_are_added_listed_and_deleted(cli, workspace, tmp_path):
    public = tmp_path / "id_ed25519.pub"
    public.write_text(ED25519 + "\n")
    added = cli("ssh-keys", "add", "laptop", str(public))
    assert added.returncode == 0, added.stderr
    key = SSHKey.objects.get(workspace=workspace)
    assert key.fingerprint in added.stdout
    assert cli("ssh-keys", "list", "-q").stdout.split() == [str(key.pk)]
    assert "laptop" in cli("ssh-keys", "list").stdout
    public.write_text("ssh-rsa nonsense")
    bad = cli("ssh-keys", "add", "bad", str(public))
    assert bad.returncode == 2 and "public_key" in bad.stderr
    assert cli("ssh-keys", "delete", str(key.pk)).returncode == 0
    assert not SSHKey.objects.exists()
    assert cli("ssh-keys", "delete", str(key.pk)).returncode == 5


def test_environments_and_workspaces_are_listed_and_a_key_acts_in_its_own(cli, owner, workspace, instant_offer):
    Environment.objects.create(workspace=workspace, name="staging", monthly_budget=Decimal("50.00"))
    listed = cli("environments")
    assert listed.returncode == 0 and "staging" in listed.stdout and "$50.00" in listed.stdout
    staging = json.loads(cli("environments", "--json", environment="staging").stdout)
    assert [e["name"] for e in staging if e["current"]] == ["staging"]

    lab = WorkspaceFactory(name="Lab")
    Membership.objects.create(workspace=lab, user=owner, role=Role.DEVELOPER)
    spaces = cli("workspaces")
    assert "Lab" in spaces.stdout and "developer" in spaces.stdout
    refused = cli("-w", "Lab", "clusters", "create", "--name", "there", "--offer", str(instant_offer.pk),
                  "--machines", "2", "-q")
    assert refused.returncode == 3 and "make a key" in refused.stderr.lower(), refused.stderr
    assert not Cluster.objects.exists()
    created = cli("-w", workspace.name, "clusters", "create", "--name", "here", "--offer", str(instant_offer.pk),
                  "--machines", "2", "-q")
    assert created.returncode == 0, created.stderr
    assert cli("clusters", "ls", "-q").stdout.split() == [created.stdout.strip()]
    assert cli("clusters", "ls", workspace="Nowhere").returncode == 5


def test_instances_are_listed_with_their_cluster_and_never_terminated_alone(cli, instant_offer):
    cluster_id = cli("clusters", "create", "--name", "train", "--offer", str(instant_offer.pk), "--machines", "2",
                     "-q").stdout.strip()
    listed = cli("instances", "list", "--json")
    instances = json.loads(listed.stdout)
    assert [(i["cluster_id"], i["name"]) for i in instances] == [(int(cluster_id), "node-0"), (int(cluster_id), "node-1")]
    table = cli("instances", "list").stdout.splitlines()
    assert "HEALTH" in table[0].split() and all("train" in row and " unknown " in row for row in table[1:])
    refused = cli("instances", "terminate", str(instances[1]["id"]))
    assert refused.returncode == 6
    assert "node_terminate_refused" in refused.stderr and f"runcrate clusters delete {cluster_id}" in refused.stderr


def test_errors_exit_with_their_codes(cli, instant_offer, live_server):
    assert cli("clusters", "info", "999999").returncode == 5
    assert cli("clusters", "ls", api_key="rc_live_wrong").returncode == 3
    assert cli("clusters", "ls", api_key=None).returncode == 3
    down = cli("clusters", "ls", base_url="http://127.0.0.1:9")
    assert down.returncode == 1 and down.stderr.count("\n") == 1
    not_the_api = cli("clusters", "ls", base_url=live_server.url + "/nothing")
    assert not_the_api.returncode == 1 and "not the Runcrate API" in not_the_api.stderr
    refused = cli("clusters", "terminate-node", "999999", "node-1")
    assert refused.returncode == 5
