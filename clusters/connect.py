"""How a customer reaches and uses a cluster: SSH by node name, the hostfile, launch lines."""

from __future__ import annotations

from dataclasses import dataclass

from clusters.models import Cluster, Node, Status
from clusters.providers.local import images

NODE_DOMAIN = "nodes.runcrate.example"
PRIVATE_INTERFACE = "wg0"
MASTER_PORT = 29500
RAY_DASHBOARD_PORT = 8265
# Every node has it (setup_shared.sh): runs its command as one rank of an Open MPI job with the
# variables torch.distributed's env:// reads (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE)
# taken from Open MPI's own (OMPI_COMM_WORLD_RANK, ...): docs/nodeops.md, "Launch lines".
MPI_RANK_WRAPPER = "mpi-rank-env"
# The Connect card shows once every machine is up and joined.
CONNECTABLE = (Status.READY, Status.DEGRADED)


@dataclass(frozen=True)
class NodeEndpoint:
    name: str
    role: str
    private_ip: str
    host: str
    port: int
    user: str
    proxy_jump: str

    @property
    def ssh_command(self) -> str:
        jump = f" -J {self.proxy_jump}" if self.proxy_jump else ""
        port = f" -p {self.port}" if self.port != 22 else ""
        return f"ssh{jump}{port} {self.user}@{self.host}"


def endpoints(cluster: Cluster) -> list[NodeEndpoint]:
    # A machine being swapped in is not the node yet: the old one is, until the swap is done.
    live = [n for n in cluster.nodes.all() if n.released_at is None and n.replacing_id is None]
    return [_endpoint(node) for node in live]


def _endpoint(node: Node) -> NodeEndpoint:
    host, cluster = node.host, node.cluster
    return endpoint_of(node.index, host.address, host.name, host.port, host.ssh_user, provider=cluster.provider,
                       gateway_host=cluster.machine_type.location.gateway_host, reported=node.address)


def endpoint_of(index: int, address: str, host_name: str, port: int, ssh_user: str, *, provider: str,
                gateway_host: str, reported: str = "") -> NodeEndpoint:
    """A node's endpoint from its host's columns (the API's lists read them as values) and its
    cluster's provider and site gateway. A local machine's gateway is opened when it boots (a
    loopback address of this computer never handed out before): it is the "host:port" the
    machine reported then, and there is no site gateway to go through."""
    if provider == "local" and ":" in reported:
        address, _, reported_port = reported.rpartition(":")
        port = int(reported_port)
    return NodeEndpoint(
        name=f"node-{index}", role="head" if index == 0 else "worker", private_ip=f"10.77.0.{index + 1}",
        host=address or f"{host_name}.{NODE_DOMAIN}", port=port, user=ssh_user or "root",
        proxy_jump="" if provider == "local" else gateway_host,
    )


def host_alias(cluster: Cluster, node_name: str) -> str:
    """What the customer's ssh-config calls a node (`ssh train-node-3`)."""
    return f"{cluster.name}-{node_name}"


def ssh_config(cluster: Cluster, known_hosts_file: str = "") -> str:
    """A ~/.ssh/config block: `ssh <cluster>-node-0` from the customer's laptop."""
    return ssh_config_of(cluster.name, cluster.machine_count, endpoints(cluster), known_hosts_file)


def ssh_config_of(name: str, machine_count: int, live: list[NodeEndpoint], known_hosts_file: str = "") -> str:
    """Each node's host key is kept under its alias (HostKeyAlias), so it follows the node's
    name: the machine that answers on a gateway port may change (replace-node), the name stays.
    `known_hosts_file`: where the `runcrate` CLI wrote `known_hosts(cluster)`; those lines are
    then checked strictly."""
    blocks = [f"# Runcrate cluster {name} ({machine_count} machines)\n"]
    for ep in live:
        alias = f"{name}-{ep.name}"
        lines = [f"Host {alias}", f"    HostName {ep.host}", f"    User {ep.user}"]
        if ep.port != 22:
            lines.append(f"    Port {ep.port}")
        if ep.proxy_jump:
            lines.append(f"    ProxyJump {ep.proxy_jump}")
        lines.append(f"    HostKeyAlias {alias}")
        if known_hosts_file:
            lines += [f"    UserKnownHostsFile {known_hosts_file}", "    StrictHostKeyChecking yes"]
        lines += ["    ServerAliveInterval 30", ""]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def known_hosts(cluster: Cluster) -> str:
    """known_hosts lines for every live node whose host key the control plane has read: under
    its ssh-config alias, and under the address and port of its `ssh` line."""
    live = {n.name: n for n in cluster.nodes.all() if n.released_at is None and n.replacing_id is None}
    return known_hosts_of(cluster.name, [(ep, live[ep.name].host_key) for ep in endpoints(cluster)])


def known_hosts_of(cluster_name: str, keyed: list[tuple[NodeEndpoint, str]]) -> str:
    """known_hosts lines of live nodes' (endpoint, host key), those without a key skipped (the
    API's lists build them from values)."""
    lines = []
    for ep, key in keyed:
        if not key:
            continue
        address = ep.host if ep.port == 22 else f"[{ep.host}]:{ep.port}"
        lines.append(f"{cluster_name}-{ep.name},{address} {key}\n")
    return "".join(lines)


def ssh_line(node: Node) -> str | None:
    """A live node's `ssh` line exactly as the Connect card shows it (the API's
    `nodes[].ssh`); None until the card shows it (every machine up and joined)."""
    cluster = node.cluster
    if cluster.status not in CONNECTABLE or node.released_at is not None or node.replacing_id is not None:
        return None
    return _endpoint(node).ssh_command


def live_endpoint(node: Node) -> NodeEndpoint | None:
    """Where a live node's SSH answers now (the API's `nodes[].ssh_endpoint`): what the CLI's
    ProxyCommand connects to when `ssh <cluster>-node-N` opens, so an added or replaced node
    answers under its name at once. None while the node takes no SSH (as `ssh_line`)."""
    cluster = node.cluster
    if cluster.status not in CONNECTABLE or node.released_at is not None or node.replacing_id is not None:
        return None
    return _endpoint(node)


def head_ssh_line(cluster: Cluster) -> str | None:
    """node-0's `ssh` line as the Connect card shows it first; None until the card shows, or
    while the head is not in service."""
    live = endpoints(cluster) if cluster.status in CONNECTABLE else []
    return live[0].ssh_command if live and live[0].role == "head" else None


def hostfile(cluster: Cluster) -> str:
    slots = cluster.machine_type.gpus_per_machine
    return "".join(f"{ep.name} slots={slots}\n" for ep in endpoints(cluster))


# What setup_shared.sh exports for NCCL and Gloo (the private interface, socket settings):
# every shell on a node has them (/etc/runcrate/env.sh), the launch lines source the file as
# well for a shell that does not, and mpirun forwards them to every rank.
NCCL_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_IB_DISABLE",
                  "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD")


def nccl_env_path(cluster: Cluster) -> str:
    """/shared/nccl.env, or each node's own copy where containers share no folder."""
    return "/shared/nccl.env" if cluster.machine_type.shares_folder else "/etc/runcrate/nccl.env"


def hostfile_path(cluster: Cluster) -> str:
    return "/shared/hostfile" if cluster.machine_type.shares_folder else "/etc/runcrate/hostfile"


@dataclass(frozen=True)
class LaunchLine:
    key: str
    label: str
    command: str


def launch_lines(cluster: Cluster, nodes: int | None = None) -> dict[str, str]:
    """Every launch line the Connect card shows, by key (the API's `launch`)."""
    return {line.key: line.command for line in launch_commands(cluster, nodes)}


def image_tools(image: str) -> frozenset[str]:
    """The launchers an image ships beyond Open MPI, Python and the picked software (torchrun,
    deepspeed, all_reduce_perf): the Connect card shows a line only when what it runs is on the
    nodes, so it runs as pasted. `pytorch` ships torchrun; `base` none of them; an image this
    computer has no recipe for is taken to ship none."""
    recipe = images.IMAGES.get(image)
    return frozenset(recipe.launchers) if recipe else frozenset()


def node_tools(cluster: Cluster) -> frozenset[str]:
    """The launchers the cluster's nodes have: those of the image they boot from."""
    return image_tools(cluster.image)


def _to_every_worker(cluster: Cluster, file: str) -> str:
    """Containers share no folder: copy the customer's file from node-0's home to the same
    place on every other node first (node-0 is the hostfile's first line, left out so a copy
    never overwrites the file it reads)."""
    return (f"for h in $(tail -n +2 {hostfile_path(cluster)} | cut -d' ' -f1); do scp -q ~/{file} $h:; done && ")


def launch_commands(cluster: Cluster, nodes: int | None = None) -> list[LaunchLine]:
    """The one place the launch lines are made: the Connect card, the API and the CLI show
    these, and tests/providers/test_distributed_work.py runs each of them on real nodes as
    shown, pasted into node-0's shell in the home directory. `$NODE_RANK`, `$NNODES`,
    `$GPUS_PER_NODE` are in every shell on every node. The program a line starts is read where
    the label says: in /shared (every node sees it) where machines share a folder, otherwise
    from node-0's home, copied to every node by the line itself.
    `nodes`: how many live nodes (endpoints) the cluster has, when the caller counted them."""
    nodes = len(endpoints(cluster)) if nodes is None else nodes
    gpus = cluster.machine_type.gpus_per_machine
    shared = cluster.machine_type.shares_folder
    tools = node_tools(cluster)
    world = nodes * gpus
    head = "node-0"
    hostfile = hostfile_path(cluster)
    source = f"source {nccl_env_path(cluster)} && "
    forward = " ".join(f"-x {name}" for name in NCCL_VARIABLES)
    where = "/shared" if shared else "~ on node-0"
    torchrun = (
        f"torchrun --nnodes={nodes} --nproc-per-node={gpus} --node-rank=$NODE_RANK "
        f"--rdzv-backend=c10d --rdzv-endpoint={head}:{MASTER_PORT} train.py"
    )
    workdir = "/shared" if shared else "/root"
    lines = []
    if "torchrun" in tools:
        lines.append(LaunchLine("torchrun", f"torchrun (run on every node; train.py in {workdir})",
                                f"{source}cd {workdir} && {torchrun}"))
    lines.append(LaunchLine("mpirun", f"mpirun (from {head}; train.py in {where})", (
        f"{'' if shared else _to_every_worker(cluster, 'train.py')}"
        f"{source}mpirun -np {world} --hostfile {hostfile} --wdir {workdir} {forward} -x PATH "
        f"-x MASTER_ADDR={head} -x MASTER_PORT={MASTER_PORT} {MPI_RANK_WRAPPER} python train.py"
    )))
    if "deepspeed" in tools:
        lines.append(LaunchLine("deepspeed", f"DeepSpeed (from {head}; train.py in {workdir})", (
            f"{source}cd {workdir} && deepspeed --hostfile {hostfile} --num_nodes {nodes} --num_gpus {gpus} "
            f"--master_addr {head} --master_port {MASTER_PORT} train.py --deepspeed ds_config.json"
        )))
    if "all_reduce_perf" in tools:
        lines.append(LaunchLine("nccl", "Measure inter-node bandwidth (NCCL all_reduce_perf)", (
            f"{source}mpirun -np {world} --hostfile {hostfile} {forward} "
            f"-x NCCL_DEBUG=INFO all_reduce_perf -b 8 -e 8G -f 2 -g 1"
        )))
    if cluster.software == "slurm":
        logs = "/shared/logs" if shared else "/root"
        lines.append(LaunchLine("sbatch_array", f"Slurm array: one task per input, output per task (task.py in {where})", (
            f"{'' if shared else _to_every_worker(cluster, 'task.py')}"
            f"sbatch --array=0-{nodes * 4 - 1} --chdir={workdir} --output={logs}/%A_%a.out "
            "--wrap 'python task.py $SLURM_ARRAY_TASK_ID'"
        )))
        if "torchrun" in tools:
            lines.append(LaunchLine("srun_torchrun", f"Slurm: torchrun on {nodes} nodes (train.py in {workdir})", (
                f"srun -N{nodes} --ntasks-per-node=1 --chdir={workdir} "
                f"bash -c '{torchrun.replace('$NODE_RANK', '$SLURM_NODEID')}'"
            )))
        # slurmdbd on the head keeps every job (docs/nodeops.md "Slurm"); -X: one row per job
        # or array task (JOBID_N), not per step; -S: sacct alone starts at today's midnight.
        lines.append(LaunchLine("sacct", "Slurm: jobs of the last 7 days with their state and time (on any node)",
                                "sacct -X -S now-7days -o JobID%16,JobName%24,State,Elapsed,ExitCode"))
    if cluster.software == "ray":
        lines.append(LaunchLine("ray_job", f"Ray job (from {head})", (
            # Ray's own virtualenv has ray; RAY_ADDRESS (every shell) points ray.init() at the head.
            "/opt/ray/bin/python job.py"
        )))
        lines.append(LaunchLine("ray_submit", f"Ray job submission (job.py in {where})", (
            # The head's job server (the dashboard's port): the driver runs on the head, with
            # Ray's own Python, its output streamed back until it ends.
            f"ray job submit --address http://{head}:{RAY_DASHBOARD_PORT} -- python {workdir}/job.py"
        )))
    return lines


def page_context(cluster: Cluster) -> dict | None:
    """What the Connect card shows; None until every machine is up and joined."""
    if cluster.status not in CONNECTABLE:
        return None
    return {
        "endpoints": endpoints(cluster), "hostfile": hostfile(cluster),
        "launch": launch_commands(cluster), "shares_folder": cluster.machine_type.shares_folder,
        "kubernetes": cluster.software == "kubernetes",
    }
