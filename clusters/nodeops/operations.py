"""One function per node step of the cluster lifecycle.

Each takes a `ClusterSpec` (plus an optional `NodeRunner` and `on_output` callback) and
returns a `StepResult` with one `NodeResult` per node it ran on. The functions are
idempotent, like the scripts behind them: the reconciler may run a step twice.

Order for a new cluster: set_names -> join_network -> setup_shared -> sync_volume_in
-> install_software -> check_ready (poll until ready or the deadline). Terminate:
sync_volume_out -> stop.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import ipaddress
import os
import re
import secrets as _secrets
import string
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.x509.oid import NameOID

from .parsers import (
    NodeReadiness,
    kubernetes_readiness,
    ray_readiness,
    slurm_readiness,
)
from .runner import NodeEnv, NodeResult, NodeRunner, OutputCallback, RetryPolicy, load_script
from .targets import PRIVATE_NETWORK, WIREGUARD_PORT, ClusterSpec, NodeTarget

FAULTS = ("install_fails", "never_joins")
SANDBOX_JOIN_WAIT = 3
REAL_JOIN_WAIT = 120


# -- results ------------------------------------------------------------------------


@dataclass
class StepResult:
    step: str
    results: dict[str, NodeResult] = field(default_factory=dict)
    # join_network: the (a, b) node pairs, a before b, that cannot reach each other.
    failed_pairs: list[tuple[str, str]] = field(default_factory=list)
    # check_ready: every node's readiness as the software reports it, and the nodes an
    # acceptance job ran on every other node but failed on (a fault, not "not yet").
    readiness: dict[str, NodeReadiness] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    # set_names: every node's SSH host key ("type base64"), as its sshd presented it.
    host_keys: dict[str, str] = field(default_factory=dict)
    # join_network: how long each round took ("up", "reach"), in seconds (the bench's rows).
    rounds: dict[str, float] = field(default_factory=dict)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return (
            all(result.ok for result in self.results.values())
            and not self.failed_pairs
            and all(node.ready for node in self.readiness.values())
        )

    @property
    def joined(self) -> bool:
        """join_network: every node reaches every other node."""
        return self.ok

    @property
    def ready(self) -> bool:
        """check_ready: every node ready."""
        return self.ok

    @property
    def failed(self) -> list[str]:
        return [name for name, result in self.results.items() if not result.ok]

    @property
    def unreachable(self) -> list[str]:
        return [name for name, result in self.results.items() if result.unreachable]

    def summary(self) -> str:
        if self.ok:
            return f"{self.step}: ok on {len(self.results)} node(s)" + (f" ({self.detail})" if self.detail else "")
        parts = []
        if self.unreachable:
            parts.append("unreachable: " + ", ".join(self.unreachable))
        failed = [name for name in self.failed if name not in self.unreachable]
        if failed:
            parts.append("failed: " + ", ".join(failed))
        if self.failed_pairs:
            parts.append("cannot reach each other: " + ", ".join(f"{a}<->{b}" for a, b in self.failed_pairs))
        not_ready = [node.name for node in self.readiness.values() if not node.ready]
        if not_ready:
            parts.append("not ready: " + ", ".join(not_ready))
        return f"{self.step}: " + "; ".join(parts)


# -- secrets generated in the control plane ------------------------------------------


@dataclass(frozen=True)
class WireGuardKey:
    private_key: str  # base64, like `wg genkey`
    public_key: str  # base64, like `wg pubkey`

    @classmethod
    def generate(cls) -> WireGuardKey:
        key = X25519PrivateKey.generate()
        return cls(
            private_key=base64.b64encode(key.private_bytes_raw()).decode(),
            public_key=base64.b64encode(key.public_key().public_bytes_raw()).decode(),
        )


@dataclass(frozen=True)
class ClusterSecrets:
    """Per-cluster secrets. Persist `to_dict()` with the cluster so a re-run (or a retried
    install) uses the same keys; never log them."""

    wireguard: dict[str, WireGuardKey]
    munge_key: str  # base64 of 1024 random bytes (Slurm)
    kube_token: str  # kubeadm bootstrap token "abcdef.0123456789abcdef"
    # The cluster's own SSH key: nodes reach each other as root (mpirun, the /shared mount).
    ssh_private_key: str = ""
    ssh_public_key: str = ""
    # Kubernetes: the cluster CA, made here so workers can pin its hash when they join.
    kube_ca_cert: str = ""
    kube_ca_key: str = ""

    @property
    def kube_ca_hash(self) -> str:
        """What `kubeadm join --discovery-token-ca-cert-hash` takes: sha256 of the CA's
        public key (DER SubjectPublicKeyInfo)."""
        if not self.kube_ca_cert:
            return ""
        public = x509.load_pem_x509_certificate(self.kube_ca_cert.encode()).public_key()
        der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return "sha256:" + hashlib.sha256(der).hexdigest()

    def to_dict(self) -> dict:
        return {
            "wireguard": {name: [key.private_key, key.public_key] for name, key in self.wireguard.items()},
            "munge_key": self.munge_key,
            "kube_token": self.kube_token,
            "ssh_key": [self.ssh_private_key, self.ssh_public_key],
            "kube_ca": [self.kube_ca_cert, self.kube_ca_key],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> ClusterSecrets:
        private, public = data.get("ssh_key") or ("", "")
        ca_cert, ca_key = data.get("kube_ca") or ("", "")
        return cls(
            wireguard={name: WireGuardKey(*pair) for name, pair in data["wireguard"].items()},
            munge_key=data["munge_key"],
            kube_token=data["kube_token"],
            ssh_private_key=private,
            ssh_public_key=public,
            kube_ca_cert=ca_cert,
            kube_ca_key=ca_key,
        )


def _token(length: int) -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(_secrets.choice(alphabet) for _ in range(length))


def generate_secrets(spec: ClusterSpec, existing: ClusterSecrets | None = None) -> ClusterSecrets:
    """Secrets for every node of `spec`, keeping whatever `existing` already has (a worker
    added to a running cluster gets a new key; the others keep theirs)."""
    wireguard = dict(existing.wireguard) if existing else {}
    for node in spec.nodes:
        wireguard.setdefault(node.name, WireGuardKey.generate())
    private, public = (existing.ssh_private_key, existing.ssh_public_key) if existing else ("", "")
    if not private:
        private, public = _ssh_keypair(f"runcrate-cluster-{spec.cluster_id}")
    ca_cert, ca_key = (existing.kube_ca_cert, existing.kube_ca_key) if existing else ("", "")
    if not ca_cert:
        ca_cert, ca_key = _kubernetes_ca()
    return ClusterSecrets(
        wireguard=wireguard,
        munge_key=existing.munge_key if existing else base64.b64encode(os.urandom(1024)).decode(),
        kube_token=existing.kube_token if existing else f"{_token(6)}.{_token(16)}",
        ssh_private_key=private,
        ssh_public_key=public,
        kube_ca_cert=ca_cert,
        kube_ca_key=ca_key,
    )


def replacement_key_name(node_id: int) -> str:
    """Where the WireGuard key of a machine being swapped in for a node is kept until it has
    taken over (it then becomes that node's key)."""
    return f"replacement-{node_id}"


def with_replacement_keys(secrets: ClusterSecrets, replacements: Mapping[str, int]) -> ClusterSecrets:
    """`secrets` with a key of its own for each machine being swapped in ({node name: its id}),
    made once (what the control plane stores; `keys_as_used` gives what their join uses).

    A new key, not the old node's: two machines holding one key would both be that peer to
    the others, and every packet from the old one would pull the peers' endpoint back to it.
    With its own key the old machine drops off the mesh the moment the peers take the new
    config, whether or not it can still be reached to be told."""
    keys = dict(secrets.wireguard)
    for node_id in replacements.values():
        keys.setdefault(replacement_key_name(node_id), WireGuardKey.generate())
    return dataclasses.replace(secrets, wireguard=keys)


def keys_as_used(secrets: ClusterSecrets, replacements: Mapping[str, int]) -> ClusterSecrets:
    """The secrets a join with those machines uses: each one's own key under the name it takes."""
    keys = dict(secrets.wireguard)
    for name, node_id in replacements.items():
        keys[name] = keys[replacement_key_name(node_id)]
    return dataclasses.replace(secrets, wireguard=keys)


def _kubernetes_ca() -> tuple[str, str]:
    """A self-signed cluster CA like the one `kubeadm init` would make (CN kubernetes)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=True, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False,
        ), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem.decode()


def _ssh_keypair(comment: str) -> tuple[str, str]:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private.strip(), f"{public} {comment}"


def wireguard_config(spec: ClusterSpec, node: NodeTarget, secrets: ClusterSecrets) -> str:
    """wg0.conf for `node`: its address on the private network, every other node a peer."""
    lines = [
        f"# Managed by Runcrate: cluster {spec.cluster_id}, {node.name}. Rewritten on every join.",
        "[Interface]",
        f"Address = {node.private_ip}/24",
        f"ListenPort = {WIREGUARD_PORT}",
        f"PrivateKey = {secrets.wireguard[node.name].private_key}",
    ]
    for peer in spec.nodes:
        if peer.name == node.name:
            continue
        lines += [
            "",
            "[Peer]",
            f"# {peer.name}",
            f"PublicKey = {secrets.wireguard[peer.name].public_key}",
            f"AllowedIPs = {peer.private_ip}/32",
            f"Endpoint = {_peer_endpoint(node, peer)}",
            "PersistentKeepalive = 25",
        ]
    return "\n".join(lines) + "\n"


def _endpoint_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _peer_endpoint(node: NodeTarget, peer: NodeTarget) -> str:
    """Where `node` sends `peer`'s WireGuard traffic: straight to it on one host's underlay,
    through the port its host forwards to it from another host."""
    if node.crosses_sites(peer) and peer.site_endpoint:
        return peer.site_endpoint
    return f"{_endpoint_host(peer.wireguard_endpoint)}:{WIREGUARD_PORT}"


# -- fault injection -------------------------------------------------------------------


def write_fault(root: str | os.PathLike[str], fault: str | None) -> None:
    """Make the node whose sandbox root is `root` misbehave on purpose (tests, demos).

    "install_fails": the install script exits non-zero with a clear message.
    "never_joins": the node's tunnel never comes up; no peer reaches it.
    None clears the fault.
    """
    path = Path(root) / "etc" / "runcrate" / "fault"
    if fault is None:
        path.unlink(missing_ok=True)
        return
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; expected one of {FAULTS}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(fault + "\n")


# -- running ---------------------------------------------------------------------------


def _check_sandbox(spec: ClusterSpec) -> None:
    # Sandbox clusters live on this computer: refuse to dial anything but loopback.
    if not spec.sandbox:
        return
    for node in spec.nodes:
        if not ipaddress.ip_address(node.host).is_loopback:
            raise ValueError(f"sandbox node {node.name} has non-loopback host {node.host}")
        if not node.root:
            raise ValueError(f"sandbox node {node.name} needs a sandbox root directory")
    if spec.gateway:
        gateway_host = spec.gateway.rpartition("@")[2].rsplit(":", 1)[0]
        if not ipaddress.ip_address(gateway_host).is_loopback:
            raise ValueError(f"sandbox gateway {spec.gateway} is not a loopback address")


def cluster_env(spec: ClusterSpec) -> dict[str, str]:
    """Environment every script gets (the runner adds the per-node part)."""
    env = dict(spec.extra_env)
    env.update(
        RUNCRATE_SANDBOX="1" if spec.sandbox else "0",
        RUNCRATE_CLUSTER_ID=spec.cluster_id,
        RUNCRATE_SOFTWARE=spec.software,
        RUNCRATE_MACHINE_KIND=spec.machine_kind,
        RUNCRATE_GPUS_PER_NODE=str(spec.gpus_per_machine),
        RUNCRATE_NODE_COUNT=str(len(spec.nodes)),
        RUNCRATE_HEAD_IP=spec.head.private_ip,
        RUNCRATE_NETWORK=PRIVATE_NETWORK,
        RUNCRATE_NODES=";".join(f"{node.name} {node.private_ip}" for node in spec.nodes),
    )
    if spec.sandbox:
        env["RUNCRATE_SANDBOX_HEAD_ROOT"] = spec.head.root
        env["RUNCRATE_SANDBOX_PEERS"] = ";".join(
            f"{node.name} {node.host} {node.port} {node.root}" for node in spec.nodes
        )
    return env


def needs_standins(env: Mapping[str, str]) -> bool:
    """Whether the machines cannot run the real software: sandbox nodes, and real nodes on one
    computer that cannot run a kubelet (the local provider says so in the cluster's env)."""
    return env.get("RUNCRATE_SANDBOX") == "1" or env.get("RUNCRATE_KUBELET_STANDIN") == "1"


class _Session:
    """A runner for the duration of one operation: the caller's, or a fresh one."""

    def __init__(self, runner: NodeRunner | None, *, owned: bool | None = None) -> None:
        self.runner = runner or NodeRunner()
        self._owned = runner is None if owned is None else owned

    def __enter__(self) -> NodeRunner:
        return self.runner

    def __exit__(self, *exc_info: object) -> None:
        if self._owned:
            self.runner.close()


def _run(
    spec: ClusterSpec,
    nodes: Iterable[NodeTarget],
    script: str | Path,
    step: str,
    runner: NodeRunner,
    on_output: OutputCallback | None,
    extra_env: Mapping[str, str] | None = None,
    node_env: NodeEnv | None = None,
    *,
    policy: RetryPolicy | None = None,
    timeout: float | None = None,
) -> dict[str, NodeResult]:
    """`policy`: the deadline and output cap of this step (the runner's own apply too, the
    tighter wins: health and metrics rounds share connections); `timeout` tightens it further."""
    _check_sandbox(spec)
    env = cluster_env(spec)
    env.update(extra_env or {})
    deadline = timeout
    if policy is not None and policy.command_timeout is not None:
        deadline = policy.command_timeout if timeout is None else min(policy.command_timeout, timeout)
    return runner.run(
        nodes,
        load_script(script, standins=needs_standins(env)),
        step=step,
        env=env,
        node_env=node_env,
        on_output=on_output,
        gateway=spec.gateway,
        timeout=deadline,
        max_output=policy.max_output if policy is not None else None,
    )


def _head_then_workers(
    spec: ClusterSpec,
    script_name: str,
    step: str,
    runner: NodeRunner,
    on_output: OutputCallback | None,
    extra_env: Mapping[str, str] | None = None,
    node_env: NodeEnv | None = None,
) -> dict[str, NodeResult]:
    """Workers need what the head sets up (an NFS export, a controller to join)."""
    results = _run(spec, [spec.head], script_name, step, runner, on_output, extra_env, node_env)
    if not results[spec.head.name].ok:
        for node in spec.workers:
            results[node.name] = NodeResult(
                node=node,
                ok=False,
                exit_code=None,
                stdout="",
                stderr=f"not run: {step} failed on {spec.head.name}",
                error=f"not run: {step} failed on {spec.head.name}",
            )
        return results
    results.update(_run(spec, spec.workers, script_name, step, runner, on_output, extra_env, node_env))
    return results


# -- the steps -------------------------------------------------------------------------


def set_names(
    spec: ClusterSpec,
    *,
    secrets: ClusterSecrets | None = None,
    runner: NodeRunner | None = None,
    on_output: OutputCallback | None = None,
) -> StepResult:
    """Hostname node-i on every node, /etc/hosts names for node-0..node-N-1, the customer's
    SSH keys, and the cluster's own key (root on one node reaches root on the others)."""
    secrets = generate_secrets(spec, secrets)
    extra = {
        "RUNCRATE_CLUSTER_SSH_KEY": secrets.ssh_private_key,
        "RUNCRATE_CLUSTER_SSH_PUBLIC_KEY": secrets.ssh_public_key,
    }
    with _Session(runner) as session:
        _check_sandbox(spec)
        host_keys = session.host_keys(spec.nodes, gateway=spec.gateway)
        extra["RUNCRATE_KNOWN_HOSTS"] = known_hosts_env(spec, host_keys)
        # A node that did not answer for its key was retried already: it is unreachable.
        # None at all (a gateway that does not answer): the run says why for every node.
        reached = [node for node in spec.nodes if node.name in host_keys or not host_keys]
        results = _run(spec, reached, "set_names.sh", "set_names", session, on_output, extra)
        for node in spec.nodes:
            if node.name not in results:
                error = f"{node.name} ({node.host}:{node.port}) unreachable after {session.policy.attempts} attempts"
                results[node.name] = NodeResult(node=node, ok=False, exit_code=None, stdout="", stderr=error,
                                                unreachable=True, attempts=session.policy.attempts, error=error)
        result = StepResult("set_names", {node.name: results[node.name] for node in spec.nodes})
        result.host_keys = host_keys
        return result


def known_hosts_env(spec: ClusterSpec, host_keys: Mapping[str, str]) -> str:
    """RUNCRATE_KNOWN_HOSTS for set_names.sh: "names type key" per node, ';'-separated. A
    node is known by its name, its private address and (real machines) the underlay address
    its WireGuard peers send to, where its sshd answers on port 22 as well."""
    lines = []
    for node in spec.nodes:
        key = host_keys.get(node.name)
        if not key:
            continue
        names = [node.name, node.private_ip]
        if not spec.sandbox and node.wireguard_endpoint not in names:
            names.append(node.wireguard_endpoint)
        lines.append(f"{','.join(names)} {key}")
    return ";".join(lines)


def join_network(
    spec: ClusterSpec,
    *,
    secrets: ClusterSecrets | None = None,
    runner: NodeRunner | None = None,
    on_output: OutputCallback | None = None,
    wait_seconds: int | None = None,
) -> StepResult:
    """WireGuard mesh on 10.77.0.0/24, then every pair of nodes is checked by name, each
    from one end (join_network.sh "reach-peers": a WireGuard handshake crosses the link both
    ways, read from `wg show`).

    `failed_pairs` lists the pairs whose checking end did not reach the other; the cluster
    has joined (`result.joined`) only when there are none. Run `set_names` first.
    """
    secrets = generate_secrets(spec, secrets)
    wait = wait_seconds if wait_seconds is not None else (SANDBOX_JOIN_WAIT if spec.sandbox else REAL_JOIN_WAIT)
    extra_env = {
        "RUNCRATE_JOIN_WAIT": str(wait),
        # Sandbox peers come up within milliseconds of each other.
        "RUNCRATE_PROBE_INTERVAL": "0.1" if spec.sandbox else "1",
    }
    node_env: NodeEnv = lambda node: {"RUNCRATE_WG_CONF": wireguard_config(spec, node, secrets)}  # noqa: E731
    rounds: dict[str, float] = {}
    with _Session(runner) as session:
        # Every tunnel up first, then the probes (see join_network.sh on RUNCRATE_JOIN_PHASE):
        # no node waits on a peer whose session the machine has not started yet.
        started = time.monotonic()
        results = _run(spec, spec.nodes, "join_network.sh", "join_network", session, on_output,
                       extra_env={**extra_env, "RUNCRATE_JOIN_PHASE": "up"}, node_env=node_env)
        rounds["up"] = time.monotonic() - started
        up = [node for node in spec.nodes if results[node.name].ok]
        # The probes read the peers from the wg0.conf the first round wrote: the config (every
        # other node a peer, ~200 bytes each: 830 KB over 64 sessions at 64 nodes) is not sent twice.
        started = time.monotonic()
        results.update(_run(spec, up, "join_network.sh", "join_network", session, on_output,
                            extra_env={**extra_env, "RUNCRATE_JOIN_PHASE": "reach"}))
        rounds["reach"] = time.monotonic() - started
    reaches: dict[tuple[str, str], bool] = {}
    for name, result in results.items():
        if not result.ok:
            continue
        # "REACH ok <peers…>" and "REACH fail <peers…>" for the peers this node checked
        # (join_network.sh); a pair no end reported on was not checked and has not joined.
        for line in result.stdout.splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "REACH" and words[1] in ("ok", "fail"):
                for peer in words[2:]:
                    reaches[(name, peer)] = words[1] == "ok"
    failed_pairs = [
        (a.name, b.name)
        for i, a in enumerate(spec.nodes)
        for b in spec.nodes[i + 1 :]
        if not (reaches.get((a.name, b.name)) or reaches.get((b.name, a.name)))
    ]
    return StepResult("join_network", results, failed_pairs=failed_pairs, rounds=rounds)


def setup_shared(
    spec: ClusterSpec, *, runner: NodeRunner | None = None, on_output: OutputCallback | None = None
) -> StepResult:
    """vm/bare_metal: /shared exported from the head and mounted on every worker, with
    the hostfiles and runcrate.env in it. container: no shared folder; each node gets its
    own copy of those files in /etc/runcrate. Every node: /etc/runcrate/node.env."""
    # Where a worker without a kernel NFS client mounts the head's /shared with sshfs: the
    # address the head's WireGuard peers send to, not wg0 (docs/nodeops.md "/shared").
    extra_env = {} if spec.sandbox else {"RUNCRATE_HEAD_ENDPOINT": spec.head.wireguard_endpoint}
    # A worker on another host than the head's cannot reach the head's underlay: it mounts
    # /shared over the private network (wg0), which is encrypted between hosts.
    node_env: NodeEnv = lambda node: (  # noqa: E731
        {"RUNCRATE_HEAD_ENDPOINT": spec.head.private_ip} if not spec.sandbox and node.crosses_sites(spec.head) else {})
    with _Session(runner) as session:
        if spec.has_shared_folder:
            results = _head_then_workers(spec, "setup_shared.sh", "setup_shared", session, on_output, extra_env,
                                         node_env)
        else:
            results = _run(spec, spec.nodes, "setup_shared.sh", "setup_shared", session, on_output)
    return StepResult("setup_shared", results, detail="shared" if spec.has_shared_folder else "no shared folder")


def _sync_volume(
    spec: ClusterSpec, direction: str, runner: NodeRunner | None, on_output: OutputCallback | None
) -> StepResult:
    step = f"sync_volume_{direction}"
    if not spec.volume_source:
        return StepResult(step, detail="no volume attached")
    with _Session(runner) as session:
        results = _run(
            spec,
            [spec.head],
            "sync_volume.sh",
            step,
            session,
            on_output,
            extra_env={"RUNCRATE_VOLUME_SOURCE": spec.volume_source, "RUNCRATE_SYNC_DIRECTION": direction,
                       "RUNCRATE_VOLUME_BYTES": str(spec.volume_bytes or 0)},
        )
    return StepResult(step, results)


def sync_volume_in(
    spec: ClusterSpec, *, runner: NodeRunner | None = None, on_output: OutputCallback | None = None
) -> StepResult:
    """Copy the attached volume (mounted on the head at spec.volume_source) into
    /shared/volume on the head (/volume on containers). No-op without a volume."""
    return _sync_volume(spec, "in", runner, on_output)


def sync_volume_out(
    spec: ClusterSpec, *, runner: NodeRunner | None = None, on_output: OutputCallback | None = None
) -> StepResult:
    """Copy /shared/volume back to the volume: at terminate, before the machines are released,
    and whenever the customer saves a checkpoint (`runcrate volumes sync`)."""
    return _sync_volume(spec, "out", runner, on_output)


SYNCED_BYTES = re.compile(r"synced (\d+) bytes")


def synced_bytes(result: StepResult, head: str) -> int | None:
    """How many bytes the head's volume folder held when sync_volume.sh copied it."""
    found = result.results.get(head)
    matches = SYNCED_BYTES.findall(found.stdout) if found is not None else []
    return int(matches[-1]) if matches else None


def install_software(
    spec: ClusterSpec,
    *,
    secrets: ClusterSecrets | None = None,
    runner: NodeRunner | None = None,
    on_output: OutputCallback | None = None,
    only: Iterable[str] | None = None,
) -> StepResult:
    """Install spec.software: the head first (controller / API server / GCS), then every
    worker in parallel. A failed head skips the workers (reported as not run). `only`
    names the nodes to install on (workers added to a running cluster); the others are
    reconfigured in place and keep running what they run."""
    if spec.software == "none":
        return StepResult("install_software", detail="no software")
    secrets = generate_secrets(spec, secrets)
    extra = {
        "RUNCRATE_MUNGE_KEY": secrets.munge_key, "RUNCRATE_KUBE_TOKEN": secrets.kube_token,
        "RUNCRATE_KUBE_CA_HASH": secrets.kube_ca_hash,
    }

    def node_env(node: NodeTarget) -> dict[str, str]:
        # Only the head holds the CA (its control plane signs with it); workers pin its hash.
        if spec.software != "kubernetes" or not node.is_head:
            return {}
        return {"RUNCRATE_KUBE_CA_CERT": secrets.kube_ca_cert, "RUNCRATE_KUBE_CA_KEY": secrets.kube_ca_key}

    script = f"install_{spec.software}.sh"
    arriving = set(only) if only is not None else {node.name for node in spec.nodes}
    live = [node for node in spec.nodes if node.name not in arriving]
    with _Session(runner) as session:
        if not live:
            results = _head_then_workers(spec, script, "install_software", session, on_output, extra, node_env)
            return StepResult("install_software", results, detail=spec.software)
        # Workers added to a running cluster: the live nodes only take the new node list
        # (workers first, then the head, which tells its daemons), nothing restarts; then
        # the new workers install and join.
        reconfigure = {**extra, "RUNCRATE_RECONFIGURE": "1"}
        workers = [n for n in live if not n.is_head]
        results = _run(spec, workers, script, "reconfigure", session, on_output, reconfigure, node_env)
        if spec.head in live:
            results.update(_run(spec, [spec.head], script, "reconfigure", session, on_output, reconfigure, node_env))
        if all(result.ok for result in results.values()):
            new = [node for node in spec.nodes if node.name in arriving]
            results.update(_run(spec, new, script, "install_software", session, on_output, extra, node_env))
    return StepResult("install_software", results, detail=spec.software)


def drain(
    spec: ClusterSpec,
    node_name: str,
    *,
    runner: NodeRunner | None = None,
    on_output: OutputCallback | None = None,
    resume: bool = False,
) -> tuple[StepResult, list[str]]:
    """The software gives `node_name` no new work (Slurm DRAIN, a Ray preemption drain); it
    keeps what it runs. Runs on the head; returns the step and the jobs still running on the
    node ("id name"). `resume`: the swap was given up, the node takes work again (on the head,
    and on the node itself, whose drained raylet may have left)."""
    env = {"RUNCRATE_DRAIN_NODE": node_name, "RUNCRATE_DRAIN_ACTION": "resume" if resume else "drain"}
    on = [spec.head]
    if resume:
        on += [node for node in spec.nodes if node.name == node_name and node is not spec.head]
    with _Session(runner) as session:
        results = _run(spec, on, "drain.sh", "drain", session, on_output, env)
    head = results[spec.head.name]
    jobs = [line.removeprefix("::job:: ").strip() for line in head.stdout.splitlines() if line.startswith("::job:: ")]
    return StepResult("drain", results), jobs


def check_ready(
    spec: ClusterSpec,
    *,
    runner: NodeRunner | None = None,
    on_output: OutputCallback | None = None,
    accept: Iterable[str] | None = None,
) -> StepResult:
    """Ask the software on the head about every node: Slurm `sinfo` (idle), Kubernetes
    `kubectl get nodes -o json` (Ready with GPUs allocatable), Ray `ray status` (alive).
    `result.ready` when every node is; `result.readiness` has each node's state. Slurm on
    real machines also runs an acceptance job on the nodes in `accept` (all by default):
    those it did not reach are in `result.rejected`."""
    names = [node.name for node in spec.nodes]
    if spec.software == "none":
        return StepResult(
            "check_ready",
            readiness={name: NodeReadiness(name, True, "no software") for name in names},
        )
    accepting = [node.name for node in spec.nodes if accept is None or node.name in set(accept)]
    extra = {"RUNCRATE_ACCEPT_NODES": ",".join(accepting)}
    with _Session(runner) as session:
        results = _run(spec, [spec.head], "check_ready.sh", "check_ready", session, on_output, extra)
    head = results[spec.head.name]
    if not head.ok:
        state = "unreachable" if head.unreachable else f"status command failed: {head.error}"
        return StepResult(
            "check_ready",
            results,
            readiness={name: NodeReadiness(name, False, state) for name in names},
        )
    status = _between(head.stdout, "::begin-status::", "::end-status::")
    try:
        if spec.software == "slurm":
            readiness = slurm_readiness(status, names)
        elif spec.software == "kubernetes":
            readiness = kubernetes_readiness(status, names, spec.gpus_per_machine)
        else:
            readiness = ray_readiness(status, names)
    except ValueError as error:  # e.g. kubectl printed something that is not JSON
        readiness = {name: NodeReadiness(name, False, f"unreadable status: {error}") for name in names}
    result = StepResult("check_ready", results, readiness=readiness, detail=spec.software)
    if "::begin-accept::" in head.stdout:
        printed = {line.strip() for line in _between(head.stdout, "::begin-accept::", "::end-accept::").splitlines()}
        result.rejected = {
            name: f"the acceptance job `srun -N{len(accepting)} hostname` did not run on {name}"
            for name in accepting if name not in printed
        }
        for name in result.rejected:
            readiness[name] = NodeReadiness(name, False, "acceptance job failed")
    return result


def _between(text: str, begin: str, end: str) -> str:
    start = text.find(begin)
    stop = text.find(end, start + len(begin)) if start >= 0 else -1
    if start < 0 or stop < 0:
        return ""
    return text[start + len(begin) : stop].strip("\n")


# How long the machines' own stop may take, all its phases together. Past it, what a node
# has not done is not waited for: the provider releases the machine from outside (a local
# node's cgroup is killed), so a node whose sessions hang (its rc files are its root's) holds
# a terminate this long at most.
STOP_SECONDS = 30.0


def stop(
    spec: ClusterSpec, *, runner: NodeRunner | None = None, on_output: OutputCallback | None = None,
    only: Iterable[str] | None = None, seconds: float = STOP_SECONDS,
) -> StepResult:
    """Stop the software and leave the private network on every node (best effort, within
    `seconds` in all), before the provider releases the machines. Run sync_volume_out first.
    `only` names the nodes to stop when the spec holds more (a worker released on its own)."""
    nodes = spec.nodes if only is None else tuple(n for n in spec.nodes if n.name in set(only))
    deadline = time.monotonic() + seconds

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    with _Session(runner) as session:
        # The software on every node before any node leaves the network (stop.sh,
        # RUNCRATE_STOP_PHASE), and the workers' before the head's: slurmctld answers the
        # workers' last messages instead of leaving a slurmd to wait out Slurm's 10-second
        # MessageTimeout, and no daemon waits on a peer that has already left.
        software: dict[str, NodeResult] = {}
        workers_then_head = ([n for n in nodes if n != spec.head], [n for n in nodes if n == spec.head])
        for group in filter(None, workers_then_head):  # a worker stopped alone: no head round
            software.update(_run(spec, group, "stop.sh", "stop", session, on_output,
                                 extra_env={"RUNCRATE_STOP_PHASE": "software"}, timeout=left()))
        # A node that could not be reached, or whose session was cut off, is not asked again:
        # it is released from outside all the same.
        answering = [n for n in nodes if software[n.name].exit_code is not None]
        network = _run(spec, answering, "stop.sh", "stop", session, on_output,
                       extra_env={"RUNCRATE_STOP_PHASE": "network"}, timeout=left())
    # Each node's first phase that failed is what its result reports.
    return StepResult("stop", {n.name: network[n.name] if software[n.name].ok and n.name in network
                               else software[n.name] for n in nodes})
