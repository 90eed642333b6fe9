"""The `local` provider on real Linux nodes: namespaces, WireGuard, Slurm, Ray, the customer's SSH.

Every machine is a real node on this computer (clusters.providers.local.realnodes). The assertions
run real commands inside the nodes (`nsenter`) or over the customer's own SSH line; nothing
here reads back a file the code under test wrote. Skipped where this computer cannot run
namespaces (the sandbox tests in test_local_provider.py cover those machines).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.utils import timezone

from billing.models import LedgerEntry, MachineUsage
from clusters import connect, lifecycle
from clusters.models import Cluster, Node, Reason, Status
from clusters.providers.local import realnodes
from clusters.providers.local.sandbox import free_port
from clusters.services.create import create_cluster
from clusters.services.progress import retry_install
from clusters.services.replace import replace_node
from clusters.services.terminate import terminate_cluster
from clusters.services.workers import add_workers
from offers import lab
from offers.models import Host, HostFault
from tests.factories import MachineTypeFactory
from tests.providers.conftest import SETTLED, drive, terminal_stdin

CAN, WHY = realnodes.capability()
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}"),
]


@pytest.fixture
def real_machines(settings, tmp_path):
    """The `local` provider on real nodes under a directory of this test's own; whatever the
    test did, every node is released and the run's switch and routes are gone after it."""
    from clusters.providers.local import provider as local

    settings.LOCAL_MACHINES_DIR = str(tmp_path / "machines")
    settings.LOCAL_NODES = "namespaces"
    local._MODE.clear()
    # The machines are kept by this computer's runtime, under root's folder for this instance.
    yield local.run_dir()
    provider = local.HostRuntimeProvider()
    for host in Host.objects.all():
        provider.release(type("N", (), {"host": host})())
    realnodes.Underlay(local.run_dir()).teardown()
    assert realnodes.leftovers(local.run_dir()) == []
    shutil.rmtree(local.run_dir(), ignore_errors=True)
    local._MODE.clear()


def real_machine_type(count: int, **kwargs):
    """Hosts on a loopback block of their own: their gateway ports must not meet another run's."""
    machine_type = MachineTypeFactory(provider="local", gpus_per_machine=1, **kwargs)
    block = random.randint(100, 250)
    for i in range(count):
        address = f"127.{block}.{random.randint(0, 250)}.{i + 1}"
        Host.objects.create(machine_type=machine_type, name=f"real-{block}-{i}", address=address, port=free_port(address))
    return machine_type


def handle(real_machines, node: Node) -> realnodes.NodeHandle:
    found = realnodes.running(real_machines / node.host.name)
    assert found is not None, f"{node.name} is not running"
    return found


def on_node(real_machines, node: Node, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    with terminal_stdin() as stdin:
        return realnodes.run_in(handle(real_machines, node), ["bash", "-lc", command], timeout=timeout, stdin=stdin)


def customer_key(tmp_path, name: str) -> tuple[str, str]:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / name
    path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ))
    path.chmod(0o600)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return str(path), f"{public} {name}@laptop"


def customer_ssh(line: str, key: str, command: str) -> subprocess.CompletedProcess:
    """Run the Connect card's line as a person would, with only their own key."""
    words = line.split()
    assert words[0] == "ssh"
    options = ["-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-F", "/dev/null"]
    with terminal_stdin() as stdin:
        return subprocess.run(
            ["ssh", *options, *words[1:], command], capture_output=True, text=True, timeout=60, stdin=stdin
        )


def wait_for(predicate, timeout: float = 60, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def story(cluster: Cluster) -> str:
    """What happened, for a failing assertion: the events and each node's last lines."""
    events = "\n".join(cluster.events.order_by("id").values_list("message", flat=True))
    tails = "\n".join(f"--- {n.name}\n{n.log_tail[-1500:]}" for n in cluster.nodes.order_by("index"))
    return f"{events}\n{tails}"


def slurm_logs(real_machines, nodes: list[Node]) -> str:
    """Every node's Slurm log tail, for a failing job: which daemon ended the step, and why."""
    return "\n".join(
        f"--- {node.name}\n"
        + on_node(real_machines, node, "tail -n 30 /var/log/slurm/slurmd.log /var/log/slurm/slurmctld.log 2>&1").stdout
        for node in nodes
    )


def grow(cluster: Cluster, timeout: float = 120) -> Cluster:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cluster = drive(cluster, SETTLED, timeout=2)
        live = cluster.nodes.filter(released_at__isnull=True)
        if not live.exclude(state=Node.State.READY).exists() or cluster.status != Status.READY:
            break
    return cluster


def test_a_slurm_cluster_of_real_nodes_is_ready_reachable_by_its_customer_and_grows_without_disturbing_a_job(
    environment, owner, real_machines, tmp_path, client
):
    from accounts.services import add_ssh_key

    alice_key, alice_public = customer_key(tmp_path, "alice")
    mallory_key, _ = customer_key(tmp_path, "mallory")
    key = add_ssh_key(workspace=environment.workspace, name="laptop", created_by=owner, public_key=alice_public)
    machine_type = real_machine_type(4)
    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=3, software="slurm",
        ssh_keys=[key],
    )
    cluster = drive(cluster, SETTLED, timeout=120)
    assert cluster.status == Status.READY, story(cluster)
    nodes = list(cluster.nodes.select_related("host").order_by("index"))

    # Slurm for real: every node idle in sinfo, and a job across every node.
    assert on_node(real_machines, nodes[0], "sinfo -N -h -o '%N %T'").stdout.split("\n")[:3] == [
        "node-0 idle", "node-1 idle", "node-2 idle"
    ]
    srun = on_node(real_machines, nodes[0], "srun -N3 hostname")
    assert sorted(srun.stdout.split()) == ["node-0", "node-1", "node-2"], (
        f"{srun.stderr}\n{slurm_logs(real_machines, nodes)}"
    )

    # The Connect card's line, with the key the customer attached, lands on node-1.
    lines = {ep.name: ep.ssh_command for ep in connect.endpoints(cluster)}
    session = customer_ssh(
        lines["node-1"], alice_key,
        "hostname; test -f /shared/hostfile && echo shared; sinfo -h -o '%D %T'; "
        "ping -c1 -W2 node-2 >/dev/null && echo pinged; ip route get $(getent hosts node-2 | cut -d' ' -f1)",
    )
    assert session.returncode == 0, session.stderr
    out = session.stdout.splitlines()
    assert out[0] == "node-1" and out[1] == "shared" and out[2] == "3 idle" and out[3] == "pinged"
    assert "dev wg0" in out[4], "node-1 reaches node-2 over the private network"
    refused = customer_ssh(lines["node-1"], mallory_key, "hostname")
    assert refused.returncode == 255 and "Permission denied" in refused.stderr

    # The API gives the same line for every node, and the ~/.ssh/config block.
    from api.keys import create_api_key

    _, api_key = create_api_key(workspace=environment.workspace, created_by=owner, name="ci")
    response = client.get(f"/api/v1/clusters/{cluster.pk}", headers={"Authorization": f"Bearer {api_key}"})
    detail = response.json()["data"]
    assert [n["ssh"] for n in detail["nodes"]] == [lines[f"node-{i}"] for i in range(3)]
    assert f"Host {cluster.name}-node-1" in detail["ssh_config"]

    # A running job survives an added worker: live nodes are only reconfigured.
    on_node(real_machines, nodes[0], "setsid nohup srun -N1 -w node-1 sleep 300 >/dev/null 2>&1 &")
    job = wait_for(lambda: on_node(real_machines, nodes[0], "squeue -h -t R -o %i").stdout.strip(), timeout=30)
    assert job, "the job runs"
    add_workers(cluster, 1, actor="alice")
    cluster = grow(cluster)
    worker = cluster.nodes.select_related("host").get(index=3)
    assert cluster.status == Status.READY and worker.state == Node.State.READY, story(cluster)
    assert on_node(real_machines, nodes[0], "squeue -h -t R -o %i").stdout.strip() == job, "the job kept running"
    assert on_node(real_machines, nodes[0], "srun -N1 -w node-3 hostname").stdout.strip() == "node-3"
    assert on_node(real_machines, worker, "cat /shared/hostfile").stdout.count("slots=") == 4

    # Terminate leaves no process, namespace or mount of any node behind.
    everything = cluster.nodes.select_related("host").filter(released_at__isnull=True)
    spaces = {node.name: realnodes.namespaces(handle(real_machines, node)) for node in everything}
    netns = {handle(real_machines, node).netns for node in everything}
    terminate_cluster(cluster, actor="alice")
    cluster = drive(cluster, SETTLED)
    assert cluster.status == Status.TERMINATED
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in listed for name in netns)
    assert all(realnodes.processes_in(ids) == [] for ids in spaces.values())
    assert not any((real_machines / host.name).exists() for host in Host.objects.all())


def test_slurmd_killed_after_install_degrades_the_cluster_and_retry_makes_it_ready(
    environment, real_machines, monkeypatch
):
    from clusters.providers.local.provider import HostRuntimeProvider

    machine_type = real_machine_type(2)
    install = HostRuntimeProvider.install_software
    killed: list[int] = []

    def install_then_kill_slurmd(self, cluster, nodes):
        outcome = install(self, cluster, nodes)
        if not killed:
            worker = cluster.nodes.select_related("host").get(index=1)
            killed.append(on_node(real_machines, worker, "kill -9 $(cat /run/slurmd.pid)").returncode)
        return outcome

    monkeypatch.setattr(HostRuntimeProvider, "install_software", install_then_kill_slurmd)
    cluster = create_cluster(
        environment=environment, name="flaky", machine_type=machine_type, machine_count=2, software="slurm"
    )
    cluster = drive(cluster, SETTLED, timeout=150)
    assert killed == [0], story(cluster)
    assert cluster.status == Status.DEGRADED, story(cluster)
    assert "node-1" in cluster.nodes.get(index=1).detail and cluster.is_billable

    retry_install(cluster, actor="alice")
    cluster = drive(cluster, SETTLED, timeout=150)
    assert cluster.status == Status.READY
    head = cluster.nodes.select_related("host").get(index=0)
    assert sorted(on_node(real_machines, head, "srun -N2 hostname").stdout.split()) == ["node-0", "node-1"]


def test_a_node_whose_wireguard_traffic_is_dropped_fails_the_cluster_at_the_deadline_and_costs_nothing(
    environment, real_machines
):
    machine_type = real_machine_type(2)
    lab.inject(Host.objects.filter(name__endswith="-1"), fault=HostFault.NEVER_JOINS)
    cluster = create_cluster(
        environment=environment, name="lonely", machine_type=machine_type, machine_count=2
    )
    cluster = drive(cluster, SETTLED, timeout=30)
    assert cluster.status == Status.PROVISIONING, "it keeps trying until the deadline"
    head, lonely = cluster.nodes.select_related("host").order_by("index")
    # Really up, really unreachable: no WireGuard handshake ever completes with node-1.
    assert on_node(real_machines, head, "hostname").stdout.strip() == "node-0"
    assert on_node(real_machines, head, "wg show wg0 latest-handshakes").stdout.split()[1] == "0"
    assert on_node(real_machines, head, "ping -c1 -W1 node-1").returncode != 0
    netns = {handle(real_machines, head).netns, handle(real_machines, lonely).netns}

    Cluster.objects.filter(pk=cluster.pk).update(deadline_at=timezone.now() - dt.timedelta(seconds=1))
    cluster = drive(cluster, SETTLED)
    assert cluster.status == Status.FAILED and cluster.failure_reason == Reason.JOIN_TIMEOUT
    assert not Host.objects.filter(state=Host.State.RESERVED).exists()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in listed for name in netns)
    assert not MachineUsage.objects.filter(cluster=cluster).exists()
    assert not LedgerEntry.objects.filter(workspace=environment.workspace, kind=LedgerEntry.Kind.USAGE).exists()


def test_a_machine_that_fails_to_boot_fails_the_cluster_and_no_node_is_left(environment, real_machines):
    machine_type = real_machine_type(2)
    lab.inject(Host.objects.filter(name__endswith="-1"), fault=HostFault.BOOT_FAILS)
    cluster = create_cluster(environment=environment, name="dud", machine_type=machine_type, machine_count=2)
    cluster = drive(cluster, SETTLED, timeout=30)
    assert cluster.status == Status.FAILED and cluster.failure_reason == Reason.BOOT_FAILED
    assert realnodes.leftovers(real_machines) == []


def test_a_ray_cluster_of_real_nodes_keeps_its_work_through_an_added_worker_and_a_replaced_node(environment, real_machines):
    machine_type = real_machine_type(4)
    cluster = create_cluster(
        environment=environment, name="tune", machine_type=machine_type, machine_count=2, software="ray"
    )
    cluster = drive(cluster, SETTLED, timeout=180)
    assert cluster.status == Status.READY, story(cluster)
    head = cluster.nodes.select_related("host").get(index=0)
    driver = (
        "import ray, time\n"
        "ray.init(address='auto')\n"
        "@ray.remote\n"
        "def work():\n"
        "    time.sleep(40)\n"
        "    return 'survived'\n"
        "ref = work.remote()\n"
        "print('started', flush=True)\n"
        "print(ray.get(ref), flush=True)\n"
    )
    on_node(real_machines, head, f"cat >/root/driver.py <<'EOF'\n{driver}EOF\n"
                                 "setsid nohup /opt/ray/bin/python /root/driver.py >/root/driver.out 2>&1 &")
    assert wait_for(lambda: "started" in on_node(real_machines, head, "cat /root/driver.out").stdout, timeout=60)

    add_workers(cluster, 1, actor="alice")
    cluster = grow(cluster, timeout=150)
    assert cluster.status == Status.READY and cluster.nodes.get(index=2).state == Node.State.READY
    assert on_node(real_machines, head, "/opt/ray/bin/ray status").stdout.count(" node_") == 3
    finished = wait_for(lambda: "survived" in on_node(real_machines, head, "cat /root/driver.out").stdout, timeout=90)
    assert finished, on_node(real_machines, head, "cat /root/driver.out").stdout

    # node-1 is replaced while a task pinned to it runs: from the swap's first pass Ray gives
    # the old machine no new task, and the pinned one finishes there.
    pinned = (
        "import socket, sys, time, ray\n"
        "from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy\n"
        "ray.init(address='auto')\n"
        "[old] = [n['NodeID'] for n in ray.nodes() if n['Alive'] and n['NodeManagerAddress'] == '10.77.0.2']\n"
        "@ray.remote(num_cpus=0.5)\n"
        "def hold():\n"
        "    time.sleep(15)\n"
        "    return socket.gethostname()\n"
        "ref = hold.options(scheduling_strategy=NodeAffinitySchedulingStrategy(old, soft=False)).remote()\n"
        "print('pinned', flush=True)\n"
        "print('finished on', ray.get(ref), flush=True)\n"
    )
    on_node(real_machines, head, f"cat >/root/pinned.py <<'EOF'\n{pinned}EOF\n"
                                 "setsid nohup /opt/ray/bin/python /root/pinned.py >/root/pinned.out 2>&1 &")
    assert wait_for(lambda: "pinned" in on_node(real_machines, head, "cat /root/pinned.out").stdout, timeout=60)
    time.sleep(2)  # the task is leased on node-1
    # The new machine takes a while to boot: the old one is drained, and still runs, meanwhile.
    lab.inject(Host.objects.filter(state=Host.State.FREE), boot_seconds=40)
    replace_node(cluster, "node-1", actor="alice")
    lifecycle.advance(cluster.pk)  # the swap's first pass drains node-1
    assert cluster.events.filter(event="node_draining").exists(), story(cluster)
    spread = (
        "import socket, ray\n"
        "ray.init(address='auto')\n"
        "@ray.remote(num_cpus=0.5)\n"
        "def where():\n"
        "    return socket.gethostname()\n"
        "print(sorted(set(ray.get([where.remote() for _ in range(24)]))))\n"
    )
    landed = on_node(real_machines, head, f"/opt/ray/bin/python -c \"{spread}\"", timeout=120)
    assert landed.returncode == 0 and "node-1" not in landed.stdout, landed.stdout + landed.stderr
    done = wait_for(lambda: "finished on" in on_node(real_machines, head, "cat /root/pinned.out").stdout, timeout=30)
    out = on_node(real_machines, head, "cat /root/pinned.out").stdout
    assert done and "finished on node-1" in out, out

    deadline = time.monotonic() + 240
    while cluster.nodes.filter(released_at__isnull=True, replacing__isnull=False).exists():
        assert time.monotonic() < deadline, story(cluster)
        lifecycle.advance(cluster.pk)
        time.sleep(0.5)
    cluster.refresh_from_db()
    assert cluster.status == Status.READY, story(cluster)
    alive = ("/opt/ray/bin/python -c \"import ray; ray.init(address='auto', logging_level='ERROR'); "
             "print(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']))\"")
    whole = "['10.77.0.1', '10.77.0.2', '10.77.0.3']"
    assert wait_for(lambda: whole in on_node(real_machines, head, alive).stdout, timeout=60), on_node(real_machines, head, alive)

    # A swap that fails gives the old machine back to Ray: its drained raylet left once idle
    # and starts again.
    node_2 = cluster.nodes.select_related("host").get(index=2, released_at__isnull=True)
    raylet_before = on_node(real_machines, node_2, "pgrep -x raylet").stdout.split()
    lab.inject(Host.objects.filter(state=Host.State.FREE), fault=HostFault.BOOT_FAILS, boot_seconds=0)
    replace_node(cluster, "node-2", actor="alice")
    deadline = time.monotonic() + 120
    while cluster.nodes.filter(released_at__isnull=True, replacing__isnull=False).exists():
        assert time.monotonic() < deadline, story(cluster)
        lifecycle.advance(cluster.pk)
        time.sleep(0.5)
    assert cluster.events.filter(event="replacement_failed").exists(), story(cluster)
    assert wait_for(lambda: whole in on_node(real_machines, head, alive).stdout, timeout=60), on_node(real_machines, head, alive)
    raylet_after = on_node(real_machines, node_2, "pgrep -x raylet").stdout.split()
    assert raylet_before and raylet_after and raylet_after != raylet_before


def test_kubernetes_workers_pin_the_control_planes_ca_and_a_late_worker_joins_on_a_renewed_token(
    environment, real_machines
):
    from clusters.nodeops.operations import ClusterSecrets

    machine_type = real_machine_type(3)
    cluster = create_cluster(
        environment=environment, name="kube", machine_type=machine_type, machine_count=2, software="kubernetes"
    )
    cluster = drive(cluster, SETTLED, timeout=120)
    assert cluster.status == Status.READY, story(cluster)
    pinned = ClusterSecrets.from_dict(cluster.plain_node_secrets).kube_ca_hash
    worker = cluster.nodes.select_related("host").get(index=1)
    spki_hash = ("openssl x509 -pubkey -noout -in /etc/kubernetes/pki/ca.crt "
                 "| openssl pkey -pubin -outform der | sha256sum | cut -d' ' -f1")
    assert "sha256:" + on_node(real_machines, worker, spki_hash).stdout.strip() == pinned

    # Two hours later the first bootstrap token has expired; an added worker still joins.
    head = cluster.nodes.select_related("host").get(index=0)
    on_node(real_machines, head, "read -r token _ </shared/.runcrate-kubernetes/token; "
                                 "echo \"$token $(($(date +%s) - 1))\" >/shared/.runcrate-kubernetes/token")
    add_workers(cluster, 1, actor="alice")
    cluster = grow(cluster)
    assert cluster.status == Status.READY and cluster.nodes.get(index=2).state == Node.State.READY, story(cluster)


def test_each_real_node_has_its_own_shared_folder_and_disk_not_the_hosts(tmp_path):
    """Two heads of two clusters on this computer: what one writes in /shared, /etc, /usr,
    /opt, /root or /tmp is neither on the other nor on the host."""
    from clusters.providers.local.sandbox import write_ed25519_keypair

    public = write_ed25519_keypair(tmp_path / "client", "isolation")
    states = [tmp_path / "a", tmp_path / "b"]
    marker = f"runcrate-isolation-{random.getrandbits(32):08x}"
    try:
        first, second = (realnodes.boot(tmp_path, state, key=state.name, hostname=f"iso-{state.name}",
                                        authorized_keys=public + "\n") for state in states)
        paths = [f"/shared/{marker}", f"/etc/{marker}", f"/usr/local/bin/{marker}", f"/opt/{marker}",
                 f"/root/{marker}", f"/tmp/{marker}"]
        wrote = realnodes.run_in(first, ["sh", "-c", " && ".join(f"echo a >{path}" for path in paths)])
        assert wrote.returncode == 0, wrote.stderr
        for path in paths:
            assert realnodes.run_in(first, ["cat", path]).stdout == "a\n"
            assert realnodes.run_in(second, ["test", "-e", path]).returncode == 1, path
            assert not Path(path).exists(), path
    finally:
        for state in states:
            realnodes.release(tmp_path, state)
        realnodes.Underlay(tmp_path).teardown()
    assert realnodes.leftovers(tmp_path) == []


def real_spec(tmp_path, handles, cluster_id: str):
    """A cluster of these booted nodes, no software, as the local provider describes it."""
    from clusters.nodeops.targets import ClusterSpec, NodeTarget, private_ip

    return ClusterSpec(
        cluster_id=cluster_id, software="none", machine_kind="vm", gpus_per_machine=1, sandbox=False,
        nodes=tuple(NodeTarget(name=f"node-{i}", index=i, host=handle.address, port=22, user="root",
                               key_filename=str(tmp_path / "client"), root="", private_ip=private_ip(i),
                               proxy_command=handle.proxy_command) for i, handle in enumerate(handles)),
    )


@contextlib.contextmanager
def joined_nodes(tmp_path, count: int, *, wait_seconds: int, before_join=lambda handles: None):
    """`count` real nodes booted at once and joined as the local provider joins them (names,
    then the WireGuard join); yields the join's StepResult, then releases every node.
    `before_join(handles)` runs once they are up and their neighbours pinned."""
    from concurrent.futures import ThreadPoolExecutor

    from clusters.nodeops import operations
    from clusters.nodeops.runner import NodeRunner, RetryPolicy
    from clusters.providers.local.sandbox import write_ed25519_keypair

    public = write_ed25519_keypair(tmp_path / "client", "join")
    states = [tmp_path / f"m{i}" for i in range(count)]
    try:
        with ThreadPoolExecutor(max_workers=min(16, count)) as pool:
            handles = list(pool.map(lambda state: realnodes.boot(
                tmp_path, state, key=state.name, hostname=state.name, authorized_keys=public + "\n"), states))
        realnodes.pin_neighbours(handles)
        before_join(handles)
        spec = real_spec(tmp_path, handles, f"join-{count}")
        secrets = operations.generate_secrets(spec)
        with NodeRunner(RetryPolicy(connect_timeout=10, attempts=5, backoff=0.2), keep_connections=True) as runner:
            assert operations.set_names(spec, secrets=secrets, runner=runner).ok
            yield operations.join_network(spec, secrets=secrets, runner=runner, wait_seconds=wait_seconds)
    finally:
        for state in states:
            realnodes.release(tmp_path, state)
        realnodes.Underlay(tmp_path).teardown()
    assert realnodes.leftovers(tmp_path) == []


def test_a_join_names_exactly_the_pairs_that_cannot_reach_each_other(tmp_path):
    """Each pair is checked from one end (the ring share of join_network.sh): a link cut on
    the checking end and one cut on the answering end both fail their pair, and no other."""

    def cut_links_to_node_3(handles):
        # Of 4 nodes node-1 checks node-2 and node-3, and node-3 checks node-0. node-1's frames
        # to node-3 go to a MAC address nobody has (the checking end cut); so do node-0's (the
        # answering end: node-3's greeting arrives, the answer never does). A route would not
        # do for node-0: wireguard-go answers through the interface the greeting came in on.
        for source in (0, 1):
            subprocess.run(["nsenter", "-t", str(handles[source].pid), "-n", "ip", "neigh", "replace",
                            handles[3].address, "lladdr", "02:00:00:00:00:01", "dev", "eth0", "nud", "permanent"],
                           check=True)

    with joined_nodes(tmp_path, 4, wait_seconds=4, before_join=cut_links_to_node_3) as joined:
        assert joined.failed_pairs == [("node-0", "node-3"), ("node-1", "node-3")]
        assert not joined.joined


def test_a_pair_is_proven_by_its_wireguard_handshake_not_an_echo_and_an_unreachable_peer_is_still_caught(tmp_path):
    """The join reads WireGuard's own evidence (a completed handshake) instead of pinging:
    nodes that answer no echo at all still join, and the pairs through a cut link still fail,
    from the checking end and from the answering end."""

    def no_echoes_and_cut_links_to_node_3(handles):
        for handle in handles:
            subprocess.run(["nsenter", "-t", str(handle.pid), "-n", "sysctl", "-qw", "net.ipv4.icmp_echo_ignore_all=1"],
                           check=True)
        for source in (0, 1):
            subprocess.run(["nsenter", "-t", str(handles[source].pid), "-n", "ip", "neigh", "replace",
                            handles[3].address, "lladdr", "02:00:00:00:00:01", "dev", "eth0", "nud", "permanent"],
                           check=True)

    with joined_nodes(tmp_path, 4, wait_seconds=4, before_join=no_echoes_and_cut_links_to_node_3) as joined:
        assert joined.failed_pairs == [("node-0", "node-3"), ("node-1", "node-3")]
        assert set(joined.rounds) == {"up", "reach"}


def test_forty_real_nodes_join_every_pair_at_once(tmp_path):
    """Above 32 nodes on one bridge, ARP for 40 × 39 pairs used to drop WireGuard handshakes
    (wireguard-go's socket out of send buffer behind unresolved neighbours): the join must
    still reach every pair, as the local provider runs it."""
    with joined_nodes(tmp_path, 40, wait_seconds=30) as joined:
        assert joined.failed_pairs == []
        assert joined.joined


# Run in every node of two clusters at once: /dev/shm written to its size (tmpfs pages that
# belong to no process); one allocation past the machine's memory (its node kills it); a fork
# loop whose children hold their pids; then, once the processes are full, a process that
# holds the rest of the memory. Bounded: `timeout` ends them, release ends what is left.
FILL_THE_NODE = r"""
dd if=/dev/zero of=/dev/shm/fill bs=1M count=1000000 2>/dev/null
python3 -c '
chunks = []
while True:
    chunks.append(b"x" * (16 << 20))
' || true
nohup timeout 300 python3 -c '
import time
def read(name):
    return int(open("/sys/fs/cgroup/" + name).read())
while read("pids/pids.current") < 0.95 * read("pids/pids.max"):
    time.sleep(0.2)
chunks = []
while read("memory/memory.usage_in_bytes") < read("memory/memory.limit_in_bytes") - (48 << 20):
    chunks.append(b"x" * (8 << 20))
time.sleep(300)
' >/dev/null 2>&1 &
nohup timeout 300 python3 -c '
import os, time
while True:
    try:
        if os.fork() == 0:
            time.sleep(300)
            os._exit(0)
    except OSError:
        time.sleep(0.5)
' >/dev/null 2>&1 &
"""


def cgroup_value(controller: str, cgroup: str, name: str) -> int:
    return int(Path("/sys/fs/cgroup", controller, "runcrate", cgroup, name).read_text().split()[0])


def test_every_node_of_two_clusters_filling_memory_shm_and_processes_leaves_the_control_plane_and_new_clusters_room(
    environment, owner, real_machines, client, settings
):
    from django.urls import reverse

    settings.LOCAL_NODE_PIDS = 2048
    machine_type = real_machine_type(6, memory_gb=1, disk_gb=1)
    clusters = [create_cluster(environment=environment, name=f"tenant-{i}", machine_type=machine_type,
                               machine_count=2) for i in range(2)]
    clusters = [drive(cluster, SETTLED, timeout=120) for cluster in clusters]
    assert all(cluster.status == Status.READY for cluster in clusters), [story(c) for c in clusters]
    nodes = [node for cluster in clusters for node in cluster.nodes.select_related("host")]
    handles = [handle(real_machines, node) for node in nodes]

    # Each node's memory is its machine's (1 GiB), /dev/shm half of it, as the node sees them.
    for node in nodes:
        assert on_node(real_machines, node, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes").stdout.strip() == str(1 << 30)
        assert on_node(real_machines, node, "df -m --output=size /dev/shm | tail -1").stdout.strip() == "512"
    # Every node of this computer sits in one parent that leaves it its reserve.
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    memory_total = int(meminfo["MemTotal"].split()[0]) * 1024
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    parent_memory = int(Path("/sys/fs/cgroup/memory/runcrate/memory.limit_in_bytes").read_text())
    parent_pids = int(Path("/sys/fs/cgroup/pids/runcrate/pids.max").read_text())
    assert parent_memory <= memory_total - (settings.LOCAL_NODES_MEMORY_RESERVE_MB << 20)
    assert parent_pids <= pid_max - settings.LOCAL_NODES_PIDS_RESERVE

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(nodes)) as pool:
        filled = list(pool.map(lambda node: on_node(real_machines, node, FILL_THE_NODE, timeout=120), nodes))
    assert all(result.returncode == 0 for result in filled), filled

    def fill(found: realnodes.NodeHandle) -> tuple[int, int]:
        return (cgroup_value("pids", found.cgroup, "pids.current"),
                cgroup_value("memory", found.cgroup, "memory.usage_in_bytes") >> 20)

    def full(found: realnodes.NodeHandle) -> bool:
        processes, memory = fill(found)
        return processes >= 2048 * 0.95 and memory >= 1024 - 96

    assert wait_for(lambda: all(full(found) for found in handles), timeout=90), [fill(h) for h in handles]
    for found in handles:
        oom = Path(f"/sys/fs/cgroup/memory/runcrate/{found.cgroup}/memory.oom_control").read_text().split()
        assert int(oom[oom.index("oom_kill") + 1]) >= 1, "the allocation past its memory was killed in its node"
    for found in handles:
        # Seen from here (the node has no process left to run `df` with).
        shm = os.statvfs(f"/proc/{found.pid}/root/dev/shm")
        assert shm.f_bavail == 0 and shm.f_blocks * shm.f_frsize == 512 << 20

    # While every node is full: this computer starts processes, the control plane answers its
    # pages, and another tenant's cluster starts.
    assert subprocess.run(["true"]).returncode == 0
    client.force_login(owner)
    for cluster in clusters:
        assert client.get(reverse("clusters:detail", args=[cluster.pk])).status_code == 200
    newcomer = create_cluster(environment=environment, name="newcomer", machine_type=machine_type, machine_count=2)
    newcomer = drive(newcomer, SETTLED, timeout=180)
    assert newcomer.status == Status.READY, story(newcomer)
    assert all(full(found) for found in handles), ("the fill held while the new cluster started", [fill(h) for h in handles])


def test_a_file_written_in_shared_on_a_worker_reads_back_on_the_head_and_another_worker_without_crossing_wg0(tmp_path):
    """Workers mount the head's /shared with sshfs over SSH to the head's underlay address
    (docs/nodeops.md "/shared"): userspace WireGuard would hold it to a fraction of the head's
    disk speed. What one worker writes, the head and the other worker read, byte for byte."""
    from clusters.nodeops import operations
    from clusters.nodeops.runner import NodeRunner, RetryPolicy
    from clusters.providers.local.sandbox import write_ed25519_keypair

    public = write_ed25519_keypair(tmp_path / "client", "shared")
    states = [tmp_path / f"m{i}" for i in range(3)]
    try:
        handles = [realnodes.boot(tmp_path, state, key=state.name, hostname=state.name, authorized_keys=public + "\n")
                   for state in states]
        realnodes.pin_neighbours(handles)
        spec = real_spec(tmp_path, handles, "shared-3")
        secrets = operations.generate_secrets(spec)
        with NodeRunner(RetryPolicy(connect_timeout=10, attempts=5, backoff=0.2), keep_connections=True) as runner:
            assert operations.set_names(spec, secrets=secrets, runner=runner).ok
            assert operations.join_network(spec, secrets=secrets, runner=runner, wait_seconds=20).joined
            shared = operations.setup_shared(spec, runner=runner)
            assert shared.ok, shared.summary()

        def run(handle, command: str) -> str:
            result = realnodes.run_in(handle, ["bash", "-c", command], timeout=120)
            assert result.returncode == 0, result.stderr
            return result.stdout.strip()

        received = "wg show wg0 transfer | awk '{s += $2} END {print s}'"
        before = int(run(handles[0], received))
        written = run(handles[1], "head -c 33554432 /dev/urandom >/shared/from-node-1 && sha256sum </shared/from-node-1")
        assert run(handles[0], "sha256sum </shared/from-node-1") == written
        assert run(handles[2], "sha256sum </shared/from-node-1") == written
        assert int(run(handles[0], received)) - before < 4 << 20, "the 32 MiB did not travel over wg0"
    finally:
        for state in states:
            realnodes.release(tmp_path, state)
        realnodes.Underlay(tmp_path).teardown()
    assert realnodes.leftovers(tmp_path) == []
