"""The node steps against real sshd processes on loopback addresses (sandbox mode)."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from clusters.nodeops import operations as ops
from clusters.nodeops.operations import generate_secrets, wireguard_config, write_fault
from clusters.nodeops.runner import STANDINS_OVERLAY, NodeRunner, RetryPolicy, load_script
from clusters.nodeops.targets import ClusterSpec, NodeTarget
from clusters.providers.local.sandbox import Blackhole

# Every script a node receives: the shared ones, and each feature's own (clusters/node_health/health.sh).
SCRIPTS = sorted(path for path in (Path(__file__).resolve().parents[2] / "clusters").rglob("*.sh") if "standins" not in path.parts)


def root(spec: ClusterSpec, index: int) -> Path:
    return Path(spec.nodes[index].root)


def bring_up(spec: ClusterSpec, runner: NodeRunner) -> dict[str, ops.StepResult]:
    """The provisioning steps in lifecycle order; stops at the first one that fails."""
    secrets = generate_secrets(spec)
    steps = {}
    for name, call in [
        ("set_names", lambda: ops.set_names(spec, runner=runner)),
        ("join_network", lambda: ops.join_network(spec, secrets=secrets, runner=runner)),
        ("setup_shared", lambda: ops.setup_shared(spec, runner=runner)),
        ("sync_volume_in", lambda: ops.sync_volume_in(spec, runner=runner)),
        ("install_software", lambda: ops.install_software(spec, secrets=secrets, runner=runner)),
        ("check_ready", lambda: ops.check_ready(spec, runner=runner)),
    ]:
        steps[name] = call()
        # A join the peers were late for is looked at again, as the lifecycle's next pass
        # does (a loaded machine can start one node's session after the others' short wait).
        for _ in range(2 if name == "join_network" else 0):
            if steps[name].ok:
                break
            steps[name] = call()
        if not steps[name].ok:
            break
    return steps


@pytest.mark.parametrize("software", ["none", "slurm", "kubernetes", "ray"])
def test_a_four_node_cluster_comes_up_ready_with_each_software(endpoints, runner, software):
    spec = endpoints.spec(cluster_id="c-42", software=software, machine_kind="vm", gpus_per_machine=8)

    steps = bring_up(spec, runner)

    assert [step.summary() for step in steps.values() if not step.ok] == []
    ready = steps["check_ready"]
    assert ready.ready
    assert sorted(ready.readiness) == ["node-0", "node-1", "node-2", "node-3"]
    if software != "none":
        # The stand-in tools print real-format output from what the install wrote.
        assert len(steps["install_software"].results) == 4
        assert "::begin-status::" in ready.results["node-0"].stdout
    if software == "slurm":
        conf = (root(spec, 2) / "etc/slurm/slurm.conf").read_text()
        assert "SlurmctldHost=node-0(10.77.0.1)" in conf
        assert "NodeName=node-3 NodeAddr=10.77.0.4 CPUs=2 RealMemory=3072 Gres=gpu:8 State=UNKNOWN" in conf
        assert (root(spec, 2) / "etc/slurm/gres.conf").read_text() == "Name=gpu File=/dev/nvidia[0-7]\n"
    if software == "ray":
        assert "RAY_ADDRESS=10.77.0.1:6379" in (root(spec, 3) / "etc/runcrate/ray.env").read_text()


def test_every_node_gets_its_name_and_every_other_name(endpoints, runner):
    spec = endpoints.spec()
    assert ops.set_names(spec, runner=runner).ok
    assert ops.set_names(spec, runner=runner).ok  # idempotent: the block is replaced, not added

    for node in spec.nodes:
        assert (root(spec, node.index) / "etc/hostname").read_text() == f"{node.name}\n"
        hosts = (root(spec, node.index) / "etc/hosts").read_text()
        assert hosts.count("# BEGIN runcrate cluster") == 1
        for other in spec.nodes:
            assert f"{other.private_ip}\t{other.name}\n" in hosts
        assert "10.77." not in (root(spec, node.index) / "etc/runcrate/sandbox-peers").read_text()


def test_the_wireguard_mesh_lists_every_peer_and_every_pair_reaches(endpoints, runner):
    spec = endpoints.spec()
    secrets = generate_secrets(spec)
    assert ops.set_names(spec, runner=runner).ok

    result = ops.join_network(spec, secrets=secrets, runner=runner)

    assert result.joined and result.failed_pairs == []
    checked = {}
    for node in spec.nodes:
        path = root(spec, node.index) / "etc/wireguard/wg0.conf"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        config = path.read_text()
        assert f"Address = {node.private_ip}/24" in config
        assert config.count("[Peer]") == 3
        assert f"PrivateKey = {secrets.wireguard[node.name].private_key}" in config
        reach_lines = [line for line in result.results[node.name].stdout.splitlines() if line.startswith("REACH")]
        assert reach_lines[1] == "REACH fail" and reach_lines[0].startswith("REACH ok")
        checked[node.name] = reach_lines[0].split()[2:]
    # Each pair is checked from one end, and the checks are shared out round the ring: of 4
    # nodes, each checks the next one and the first two the one opposite.
    assert checked == {"node-0": ["node-1", "node-2"], "node-1": ["node-2", "node-3"],
                       "node-2": ["node-3"], "node-3": ["node-0"]}


def test_wireguard_keys_are_real_x25519_pairs_in_wg_format():
    key = ops.WireGuardKey.generate()
    private = X25519PrivateKey.from_private_bytes(base64.b64decode(key.private_key))
    assert base64.b64encode(private.public_key().public_bytes_raw()).decode() == key.public_key
    assert len(key.private_key) == 44 and key.private_key.endswith("=")


def test_secrets_survive_a_round_trip_and_keep_existing_keys(endpoints):
    spec = endpoints.spec()
    first = generate_secrets(ops.ClusterSpec(**{**spec.__dict__, "nodes": spec.nodes[:2]}))
    again = generate_secrets(spec, ops.ClusterSecrets.from_dict(first.to_dict()))
    assert again.wireguard["node-0"] == first.wireguard["node-0"]
    assert set(again.wireguard) == {"node-0", "node-1", "node-2", "node-3"}
    assert again.kube_token == first.kube_token
    assert len(again.kube_token.split(".")[1]) == 16


def test_a_node_that_never_joins_fails_every_pair_it_is_in(endpoints, runner):
    spec = endpoints.spec()
    write_fault(root(spec, 2), "never_joins")
    assert ops.set_names(spec, runner=runner).ok

    result = ops.join_network(spec, runner=runner, wait_seconds=1)

    assert not result.joined
    assert result.failed_pairs == [("node-0", "node-2"), ("node-1", "node-2"), ("node-2", "node-3")]
    assert "node-1<->node-2" in result.summary()
    assert "REACH ok node-1\nREACH fail node-2\n" in result.results["node-0"].stdout  # its peers cannot reach it
    assert "REACH ok node-3\nREACH fail node-2\n" in result.results["node-1"].stdout
    assert "REACH ok\nREACH fail node-3\n" in result.results["node-2"].stdout  # and it reaches nobody


def test_peers_that_never_join_fail_their_pairs_alone(endpoints, runner):
    # That they cost the join wait once, not once each, is bench/nodeops_bench.py's to measure.
    spec = endpoints.spec()
    write_fault(root(spec, 2), "never_joins")
    write_fault(root(spec, 3), "never_joins")
    assert ops.set_names(spec, runner=runner).ok
    result = ops.join_network(spec, runner=runner, wait_seconds=3)
    assert ("node-0", "node-1") not in result.failed_pairs and ("node-0", "node-2") in result.failed_pairs


def test_vm_clusters_share_the_heads_folder_with_the_hostfile_and_env(endpoints, runner):
    spec = endpoints.spec(cluster_id="c-7", machine_kind="vm", gpus_per_machine=4)
    assert ops.set_names(spec, runner=runner).ok

    result = ops.setup_shared(spec, runner=runner)

    assert result.ok, result.summary()
    head_shared = root(spec, 0) / "shared"
    assert head_shared.is_dir() and not head_shared.is_symlink()
    assert (head_shared / "hostfile").read_text() == "".join(f"node-{i} slots=4\n" for i in range(4))
    assert (head_shared / "hostfile.deepspeed").read_text() == (head_shared / "hostfile").read_text()
    env = dict(line.removeprefix("export ").split("=", 1) for line in (head_shared / "runcrate.env").read_text().splitlines())
    assert env["NNODES"] == "4"
    assert env["MASTER_ADDR"] == "10.77.0.1"
    assert env["NODE_ADDRS"] == "10.77.0.1,10.77.0.2,10.77.0.3,10.77.0.4"
    assert env["GPUS_PER_NODE"] == "4" and env["WORLD_SIZE"] == "16"
    assert "export NCCL_SOCKET_IFNAME=wg0" in (head_shared / "nccl.env").read_text()
    assert "/shared 10.77.0.0/24(rw" in (root(spec, 0) / "etc/exports").read_text()
    for node in spec.workers:
        shared = root(spec, node.index) / "shared"
        assert shared.is_symlink() and shared.resolve() == head_shared.resolve()
        assert (shared / "hostfile").exists()
    for node in spec.nodes:
        node_env = (root(spec, node.index) / "etc/runcrate/node.env").read_text()
        assert f"NODE_RANK={node.index}\n" in node_env
    assert ops.setup_shared(spec, runner=runner).ok  # idempotent


def test_container_nodes_share_no_folder_and_keep_their_own_files(endpoints, runner):
    spec = endpoints.spec(machine_kind="container", gpus_per_machine=2, volume_source="/mnt/data")
    (root(spec, 0) / "mnt/data").mkdir(parents=True)
    (root(spec, 0) / "mnt/data/weights.bin").write_text("w")

    assert ops.set_names(spec, runner=runner).ok
    assert ops.setup_shared(spec, runner=runner).ok
    assert ops.sync_volume_in(spec, runner=runner).ok

    for node in spec.nodes:
        assert not (root(spec, node.index) / "shared").exists()
        assert (root(spec, node.index) / "etc/runcrate/hostfile").read_text().startswith("node-0 slots=2\n")
        assert "RUNCRATE_HOSTFILE=/etc/runcrate/hostfile" in (root(spec, node.index) / "etc/runcrate/runcrate.env").read_text()
    # The volume shows on the head only.
    assert (root(spec, 0) / "volume/weights.bin").read_text() == "w"
    assert not any((root(spec, node.index) / "volume").exists() for node in spec.workers)


def test_kubernetes_is_refused_on_container_machines(endpoints):
    with pytest.raises(ValueError, match="Kubernetes runs only on vm and bare_metal"):
        endpoints.spec(software="kubernetes", machine_kind="container")


def test_a_volume_syncs_into_shared_on_the_head_and_back(endpoints, runner):
    spec = endpoints.spec(machine_kind="bare_metal", volume_source="/mnt/volume")
    source = root(spec, 0) / "mnt/volume"
    (source / "data").mkdir(parents=True)
    (source / "data/train.jsonl").write_text("{}\n")
    assert ops.set_names(spec, runner=runner).ok
    assert ops.setup_shared(spec, runner=runner).ok

    assert ops.sync_volume_in(spec, runner=runner).ok
    assert (root(spec, 1) / "shared/volume/data/train.jsonl").read_text() == "{}\n"  # via /shared

    (root(spec, 0) / "shared/volume/checkpoint.pt").write_text("ckpt")
    result = ops.sync_volume_out(spec, runner=runner)
    assert result.ok and list(result.results) == ["node-0"]
    assert (source / "checkpoint.pt").read_text() == "ckpt"


def test_without_a_volume_the_sync_steps_do_nothing(endpoints, runner):
    result = ops.sync_volume_in(endpoints.spec(), runner=runner)
    assert result.ok and result.results == {} and result.detail == "no volume attached"


def test_an_endpoint_that_never_answers_is_unreachable_after_retries(endpoints):
    spec = endpoints.spec(count=2)
    with Blackhole(spec.nodes[1].host) as blackhole:
        silent = NodeTarget(**{**spec.nodes[1].__dict__, "port": blackhole.port})
        spec = ClusterSpec(**{**spec.__dict__, "nodes": (spec.nodes[0], silent)})
        delays: list[float] = []

        def sleep(seconds: float) -> None:
            delays.append(seconds)
            time.sleep(seconds)

        policy = RetryPolicy(connect_timeout=1, attempts=3, backoff=0.1, backoff_factor=2)
        with NodeRunner(policy, sleep=sleep) as runner:
            started = time.monotonic()
            result = ops.set_names(spec, runner=runner)
            elapsed = time.monotonic() - started

    assert not result.ok
    assert result.unreachable == ["node-1"]
    assert result.results["node-0"].ok
    node = result.results["node-1"]
    assert node.exit_code is None and node.attempts == 3
    assert "unreachable after 3 attempts" in node.error
    assert delays == [0.1, 0.2]  # exponential backoff between the attempts
    assert elapsed < 10


def test_a_refused_port_is_retried_then_reported_unreachable(endpoints):
    spec = endpoints.spec(count=1)
    closed = NodeTarget(**{**spec.nodes[0].__dict__, "port": 1})
    spec = ClusterSpec(**{**spec.__dict__, "nodes": (closed,)})
    with NodeRunner(RetryPolicy(connect_timeout=1, attempts=2, backoff=0.01)) as runner:
        result = ops.set_names(spec, runner=runner)
    assert result.unreachable == ["node-0"]
    assert "unreachable after 2 attempts" in result.summary() or result.results["node-0"].attempts == 2


def test_an_install_fault_fails_that_node_with_a_clear_message(endpoints, runner):
    spec = endpoints.spec(software="slurm")
    write_fault(root(spec, 3), "install_fails")
    assert ops.set_names(spec, runner=runner).ok
    assert ops.setup_shared(spec, runner=runner).ok

    result = ops.install_software(spec, runner=runner)

    assert not result.ok and result.failed == ["node-3"]
    failed = result.results["node-3"]
    assert failed.exit_code == 3 and not failed.unreachable
    assert "install of slurm failed (fault injected: install_fails" in failed.stderr
    # The software itself sees the missing node.
    ready = ops.check_ready(spec, runner=runner)
    assert not ready.ready
    assert ready.readiness["node-3"].state == "down*"
    assert all(ready.readiness[f"node-{i}"].ready for i in range(3))


def test_a_failed_head_install_skips_the_workers(endpoints, runner):
    spec = endpoints.spec(software="ray")
    write_fault(root(spec, 0), "install_fails")
    assert ops.set_names(spec, runner=runner).ok

    result = ops.install_software(spec, runner=runner)

    assert result.failed == ["node-0", "node-1", "node-2", "node-3"]
    assert result.results["node-1"].error == "not run: install_software failed on node-0"
    write_fault(root(spec, 0), None)
    assert ops.install_software(spec, runner=runner).ok  # retry install after the fault is gone


def test_kubernetes_readiness_comes_from_the_node_list(endpoints, runner):
    spec = endpoints.spec(software="kubernetes", gpus_per_machine=8)
    write_fault(root(spec, 1), "install_fails")
    assert ops.set_names(spec, runner=runner).ok
    assert not ops.install_software(spec, runner=runner).ok

    ready = ops.check_ready(spec, runner=runner)

    assert ready.readiness["node-1"].state == "not registered"
    assert ready.readiness["node-0"].state == "Ready, 8 GPUs allocatable"


def test_stop_unregisters_every_node_and_check_ready_sees_it(endpoints, runner):
    spec = endpoints.spec(software="slurm")
    assert all(step.ok for step in bring_up(spec, runner).values())

    result = ops.stop(spec, runner=runner)

    assert result.ok and len(result.results) == 4
    for node in spec.nodes:
        assert (root(spec, node.index) / "etc/runcrate/state").read_text() == "stopped\n"
    assert not any(node.ready for node in ops.check_ready(spec, runner=runner).readiness.values())
    assert ops.stop(spec, runner=runner).ok  # twice is fine


def test_stop_ends_the_software_everywhere_the_workers_first_before_any_node_leaves_the_network(endpoints, runner):
    spec = endpoints.spec(software="slurm")
    assert all(step.ok for step in bring_up(spec, runner).values())
    seen = []

    assert ops.stop(spec, runner=runner, on_output=lambda node, step, text: seen.append((node, step))).ok

    starts = [(node, step.split(":")[-1]) for node, step in seen if step in ("stop:software", "stop:network")]
    order = list(dict.fromkeys(starts))
    software = [node for node, step in order if step == "software"]
    assert sorted(software) == ["node-0", "node-1", "node-2", "node-3"] and software[-1] == "node-0"
    assert [step for _, step in order] == ["software"] * 4 + ["network"] * 4


def test_output_arrives_per_node_line_by_line_with_the_current_step(endpoints, runner):
    spec = endpoints.spec()
    seen = []
    ops.set_names(spec, runner=runner, on_output=lambda node, step, text: seen.append((node, step, text)))
    assert {node for node, _, _ in seen} == {"node-0", "node-1", "node-2", "node-3"}
    assert (
        "node-2", "set_names:known-hosts",
        "[node-2] hostname node-2, 4 names in " + str(root(spec, 2)) + "/etc/hosts, 4 host keys, 0 customer SSH key(s)",
    ) in seen
    assert ("node-0", "set_names:hostname", "::step:: hostname") in seen


def test_connections_can_be_kept_open_between_steps(endpoints):
    spec = endpoints.spec()
    with NodeRunner(RetryPolicy(connect_timeout=2, attempts=1), keep_connections=True) as runner:
        assert ops.set_names(spec, runner=runner).ok
        assert ops.join_network(spec, runner=runner).ok
        assert len(runner._connections) == 4


def test_sandbox_specs_refuse_anything_but_loopback(endpoints, runner):
    spec = endpoints.spec(count=1)
    remote = NodeTarget(**{**spec.nodes[0].__dict__, "host": "10.77.0.1"})
    with pytest.raises(ValueError, match="non-loopback"):
        ops.set_names(ClusterSpec(**{**spec.__dict__, "nodes": (remote,)}), runner=runner)


def test_the_same_steps_work_against_the_asyncssh_server(asyncssh_endpoints, runner):
    asyncssh_endpoints.reset_roots()
    spec = asyncssh_endpoints.spec(software="ray", machine_kind="vm")

    steps = bring_up(spec, runner)

    assert [step.summary() for step in steps.values() if not step.ok] == []
    assert steps["check_ready"].ready
    assert (Path(spec.nodes[3].root) / "shared/hostfile").exists()


def test_pool_stop_ends_every_server_process(tmp_path):
    from clusters.providers.local.sandbox import find_sshd, start_endpoints

    if find_sshd() is None:
        pytest.skip("OpenSSH sshd is not installed")
    pool = start_endpoints(2, tmp_path, kind="openssh")
    processes = list(pool._processes)
    pool.stop()
    assert all(process.poll() is not None for process in processes)
    from clusters.nodeops.runner import port_is_open

    assert not any(port_is_open(e.host, e.port) for e in pool.endpoints)


def test_every_script_is_clean_under_shellcheck(shellcheck):
    result = subprocess.run([shellcheck, "-x", *map(str, SCRIPTS), str(STANDINS_OVERLAY)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    # What bash actually receives (helpers [+ stand-ins] + script) is clean too.
    for script in SCRIPTS:
        if script.name == "lib.sh":
            continue
        for standins in (False, True):
            payload = "#!/usr/bin/env bash\n" + load_script(script, standins=standins)
            result = subprocess.run([shellcheck, "-s", "bash", "-"], input=payload, capture_output=True, text=True)
            assert result.returncode == 0, f"{script.name} (stand-ins: {standins}):\n{result.stdout}"


def test_the_scripts_production_machines_receive_carry_no_stand_in():
    # The fakes (status tools, the registry, the /shared link, the file-based reach) live in
    # the overlay, streamed only to machines that cannot run the real software.
    # Any helper of the overlay's registry (sim_registry, sim_tool, …) in any case; the
    # scripts call the overlay's standin_* functions only inside their sandbox branches.
    stand_in_words = ("sim_", "<<'fake'", "ln -sfn", "sandbox_probe", "runcrate sandbox")
    for script in SCRIPTS:
        text = script.read_text().lower()
        assert [w for w in stand_in_words if w in text] == [], script.name
    production = load_script("install_slurm.sh") + load_script("join_network.sh") + load_script("setup_shared.sh")
    assert "standin_body" not in production and "sim_tool" not in production
    assert "standin_body" in load_script("install_slurm.sh", standins=True)
    assert not ops.needs_standins({"RUNCRATE_SANDBOX": "0"})
    assert ops.needs_standins({"RUNCRATE_SANDBOX": "1"}) and ops.needs_standins({"RUNCRATE_KUBELET_STANDIN": "1"})


def test_the_generated_stand_in_tools_are_clean_under_shellcheck(endpoints, runner, shellcheck):
    for software in ("slurm", "kubernetes", "ray"):
        spec = endpoints.spec(software=software)
        assert ops.set_names(spec, runner=runner).ok
        assert ops.install_software(spec, runner=runner).ok
    tools = [root(spec, 0) / "usr/local/bin" / name for name in ("sinfo", "kubectl", "ray")]
    assert all(os.access(tool, os.X_OK) for tool in tools)
    result = subprocess.run([shellcheck, *map(str, tools)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_wireguard_config_never_names_a_peer_twice(endpoints):
    spec = endpoints.spec()
    config = wireguard_config(spec, spec.nodes[1], generate_secrets(spec))
    assert "AllowedIPs = 10.77.0.2/32" not in config
    assert [line for line in config.splitlines() if line.startswith("AllowedIPs")] == [
        "AllowedIPs = 10.77.0.1/32",
        "AllowedIPs = 10.77.0.3/32",
        "AllowedIPs = 10.77.0.4/32",
    ]


def test_nodes_can_be_reached_through_a_gateway(endpoints, runner):
    spec = endpoints.spec()
    head = spec.nodes[0]
    through_head = ClusterSpec(**{**spec.__dict__, "gateway": f"{head.user}@{head.host}:{head.port}"})

    result = ops.set_names(through_head, runner=runner)

    assert result.ok, result.summary()
    assert (root(spec, 3) / "etc/hostname").read_text() == "node-3\n"


def test_an_unreachable_gateway_makes_every_node_unreachable(endpoints):
    spec = endpoints.spec(count=2)
    spec = ClusterSpec(**{**spec.__dict__, "gateway": "root@127.0.0.1:1"})
    with NodeRunner(RetryPolicy(connect_timeout=1, attempts=2, backoff=0.01)) as runner:
        result = ops.set_names(spec, runner=runner)
    assert result.unreachable == ["node-0", "node-1"]
    assert result.results["node-0"].error.startswith("gateway root@127.0.0.1:1 unreachable")


def test_sandbox_gateways_must_be_loopback_too(endpoints, runner):
    spec = ClusterSpec(**{**endpoints.spec().__dict__, "gateway": "root@10.77.0.1:22"})
    with pytest.raises(ValueError, match="gateway"):
        ops.set_names(spec, runner=runner)


def test_a_saved_pool_can_be_reattached_by_another_process_and_stopped(tmp_path):
    from clusters.providers.local.sandbox import EndpointPool, ensure_endpoints, find_sshd, start_endpoints

    if find_sshd() is None:
        pytest.skip("OpenSSH sshd is not installed")
    first = start_endpoints(2, tmp_path, kind="openssh")
    try:
        again = ensure_endpoints(2, tmp_path)  # a restarted worker re-attaches, no new servers
        assert again.endpoints == first.endpoints and again._processes == []
        with NodeRunner(RetryPolicy(connect_timeout=2, attempts=1)) as runner:
            assert ops.set_names(again.spec(), runner=runner).ok
        again.stop()
        for process in first._processes:
            process.wait(timeout=5)
        assert EndpointPool.load(tmp_path, timeout=0.2) is None
    finally:
        first.stop()
