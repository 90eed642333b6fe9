"""Clusters, their nodes and their events."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse

from accounts.models import Environment, SSHKey, Workspace
from config.sealing import unseal
from offers.models import MAX_MACHINES, MIN_MACHINES, Host, MachineType


class Status(models.TextChoices):
    PROVISIONING = "provisioning", "Provisioning"
    INSTALLING = "installing", "Installing"
    READY = "ready", "Ready"
    DEGRADED = "degraded", "Degraded"
    FAILED = "failed", "Failed"
    TERMINATING = "terminating", "Terminating"
    TERMINATED = "terminated", "Terminated"


LIVE_STATUSES = (Status.PROVISIONING, Status.INSTALLING, Status.READY, Status.DEGRADED, Status.TERMINATING)
FINAL_STATUSES = (Status.FAILED, Status.TERMINATED)
# What terminate_cluster (and enforcement) can still stop: live, and not already stopping.
TERMINABLE_STATUSES = (Status.PROVISIONING, Status.INSTALLING, Status.READY, Status.DEGRADED)


class Software(models.TextChoices):
    NONE = "none", "None"
    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"
    RAY = "ray", "Ray"


class Reason(models.TextChoices):
    """Why a cluster failed or was terminated."""

    BOOT_FAILED = "boot_failed", "A machine failed to start"
    JOIN_TIMEOUT = "join_timeout", "Machines could not all reach each other in time"
    PROVIDER_ERROR = "provider_error", "The provider reported an error"
    INSTALL_FAILED = "install_failed", "Software failed to install"
    USER_REQUESTED = "user_requested", "Terminated by a user"
    BALANCE_EXHAUSTED = "balance_exhausted", "Credit balance ran out"
    BUDGET_REACHED = "budget_reached", "Environment reached its monthly budget"
    OPERATOR = "operator", "Terminated by an operator"
    # Node health (events only; a cluster is never failed or stopped for them).
    NODE_UNREACHABLE = "node_unreachable", "A machine stopped answering over SSH"
    NODE_NETWORK_DOWN = "node_network_down", "A machine lost the private network"
    NODE_SOFTWARE_DOWN = "node_software_down", "The software's daemon on a machine is down"


class Volume(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="volumes")
    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="volumes")
    name = models.CharField(max_length=100)
    size_gb = models.PositiveIntegerField(default=100)
    source_path = models.CharField(max_length=500, blank=True, help_text="Where the volume's data lives.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["environment", "name"], name="volume_name_unique")]

    def __str__(self) -> str:
        return f"{self.name} ({self.size_gb} GB)"


class ClusterQuerySet(models.QuerySet["Cluster"]):
    def live(self) -> ClusterQuerySet:
        return self.filter(status__in=LIVE_STATUSES)

    def terminable(self) -> ClusterQuerySet:
        return self.filter(status__in=TERMINABLE_STATUSES)


class Cluster(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="clusters")
    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="clusters")
    name = models.CharField(max_length=63)
    machine_type = models.ForeignKey(MachineType, on_delete=models.PROTECT, related_name="clusters")
    machine_count = models.PositiveSmallIntegerField()
    software = models.CharField(max_length=20, choices=Software.choices, default=Software.NONE)
    # The machine image every node boots from (docs/nodeops.md, "Images"); fixed at create.
    image = models.CharField(max_length=32, default="base")
    volume = models.ForeignKey(Volume, null=True, blank=True, on_delete=models.PROTECT, related_name="clusters")
    ssh_keys = models.ManyToManyField(SSHKey, blank=True, related_name="clusters")
    # The price is fixed when the cluster is created: a catalogue change never reprices it.
    price_per_machine_hour = models.DecimalField(max_digits=10, decimal_places=4)
    provider = models.CharField(max_length=20)

    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PROVISIONING, db_index=True)
    status_changed_at = models.DateTimeField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    deadline_at = models.DateTimeField(help_text="Every machine must have joined by then.")
    billing_started_at = models.DateTimeField(null=True, blank=True)
    billing_ended_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    terminated_at = models.DateTimeField(null=True, blank=True)
    failure_reason = models.CharField(max_length=30, choices=Reason.choices, blank=True)
    termination_reason = models.CharField(max_length=30, choices=Reason.choices, blank=True)
    install_attempts = models.PositiveSmallIntegerField(default=0)
    # One worker at a time moves a cluster: a short lease claimed compare-and-set and renewed
    # by the holder's heartbeat, which lapses within seconds if that worker dies, so the sweep
    # can re-drive the cluster.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # A pass was asked for while the lease was held: the holder takes another before releasing.
    wake_requested = models.BooleanField(default=False)
    # When a pass was queued (cleared when one claims the lease): the sweep queues no other.
    advance_queued_at = models.DateTimeField(null=True, blank=True)
    # WireGuard keys and software join tokens made by the control plane; kept so a re-run,
    # a retried install or an added worker reuses them. Never shown or logged.
    node_secrets = models.JSONField(default=dict, blank=True, editable=False)

    objects = ClusterQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["environment", "status"]), models.Index(fields=["workspace", "status"]),
            # The clusters list walks this newest first and stops at a page.
            models.Index(fields=["environment", "created_at", "id"]),
            # The workspace's instances, in the order they are listed (newest cluster first, its
            # nodes by index): a page walks this and each cluster's nodes, never sorting them all.
            models.Index(fields=["workspace", "-created_at", "id"], name="cluster_workspace_newest"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(machine_count__gte=MIN_MACHINES, machine_count__lte=MAX_MACHINES), name="cluster_2_to_64"),
            # Billing may only have started once every machine joined; a failed cluster
            # never joined, so it can never carry a billing start.
            models.CheckConstraint(
                condition=~Q(status=Status.FAILED) | Q(billing_started_at__isnull=True),
                name="failed_cluster_never_billed",
            ),
            # A name is the customer's handle on a cluster (CLI, API, SSH config): one live
            # cluster per name in an environment, even when creates race (the check in
            # clusters.rules reads before any lock; this is what holds).
            models.UniqueConstraint(
                fields=["environment", "name"], condition=Q(status__in=LIVE_STATUSES),
                name="cluster_name_unique_among_live",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("clusters:detail", args=[self.pk])

    @property
    def plain_node_secrets(self) -> dict:
        """node_secrets decrypted (they are stored sealed: config.sealing)."""
        return unseal(self.node_secrets)

    @property
    def price_per_hour(self) -> Decimal:
        """Whole-cluster price per hour of the machines it holds now."""
        return self.price_per_machine_hour * self.machine_count

    @property
    def is_live(self) -> bool:
        return self.status in LIVE_STATUSES

    @property
    def is_billable(self) -> bool:
        return self.billing_started_at is not None and self.billing_ended_at is None

    @property
    def never_started(self) -> bool:
        """Failed or stopped before every machine was up: nothing was billed, nothing measured.
        Only a provisioning cluster has no billing start and may still get one."""
        return self.billing_started_at is None and self.status != Status.PROVISIONING

    @property
    def max_new_workers(self) -> int:
        return max(MAX_MACHINES - self.machine_count, 0)

    @property
    def can_terminate(self) -> bool:
        return self.status in TERMINABLE_STATUSES

    @property
    def can_retry_install(self) -> bool:
        return self.status == Status.DEGRADED

    @property
    def can_sync_volume(self) -> bool:
        """A running cluster with a volume can save its volume folder now (a checkpoint)."""
        return self.volume_id is not None and self.status in (Status.READY, Status.DEGRADED)

    @property
    def can_add_worker(self) -> bool:
        """Workers are added to a ready cluster, not while a node is being swapped (the
        service refuses it; the page does not offer it). Reads the loaded nodes."""
        return self.status == Status.READY and self.node_being_replaced is None

    @property
    def node_being_replaced(self) -> Node | None:
        """The machine being swapped in for one of the nodes, if any (from the loaded nodes)."""
        return next((n for n in self.nodes.all() if n.is_replacement), None)

    @property
    def install_failed_nodes(self) -> list[Node]:
        """Live nodes whose install failed, by index: why a degraded cluster is degraded."""
        return sorted((n for n in self.nodes.all() if n.released_at is None and n.replacing_id is None
                       and n.state == Node.State.INSTALL_FAILED), key=lambda n: n.index)

    @property
    def can_replace_nodes(self) -> bool:
        """Replace is offered on a ready cluster whose machines are all ready, and on a degraded
        one whose machines all finished their install (well or not), one at a time (the rule is
        clusters.services.replace.replace_node's)."""
        live = [n for n in self.nodes.all() if n.released_at is None]
        settled = {Status.READY: (Node.State.READY,),
                   Status.DEGRADED: (Node.State.READY, Node.State.INSTALLED, Node.State.INSTALL_FAILED)}.get(
            Status(self.status), ())
        return bool(settled) and all(n.state in settled and not n.is_replacement for n in live)

    @property
    def head(self) -> Node | None:
        return next((n for n in self.nodes.all() if n.index == 0), None)

    @property
    def unhealthy_nodes(self) -> list[Node]:
        """Live nodes the last health check found bad (clusters.node_health), by index. Only a ready
        cluster is checked: on any other, what was last found no longer says anything."""
        if self.status != Status.READY:
            return []
        return [n for n in self.nodes.all() if n.released_at is None and n.health in BAD_HEALTH]

    @property
    def machine_progress(self) -> dict:
        """How many of the cluster's machines are up, and how many reach every other one."""
        live = [n for n in self.nodes.all() if n.released_at is None]
        up_states = {Node.State.UP, Node.State.JOINED, Node.State.INSTALLING, Node.State.INSTALLED, Node.State.READY,
                     Node.State.INSTALL_FAILED}
        return {
            "total": len(live),
            "up": sum(n.state in up_states for n in live),
            "joined": sum(n.joined_at is not None or n.peers_reached_at is not None for n in live),
        }

    @property
    def progress_steps(self) -> list[tuple[str, str]]:
        """(label, state) for the provisioning → installing → ready progress bar."""
        order = ["provisioning", "installing", "ready"]
        if self.software == Software.NONE:
            order.remove("installing")
        if self.status in order:
            current = order.index(self.status)
        elif self.status == Status.DEGRADED:
            current = order.index("installing")
        else:
            current = len(order) if self.status in (Status.TERMINATING, Status.TERMINATED) and self.ready_at else -1
        steps = []
        for i, name in enumerate(order):
            if self.status == Status.FAILED and i == 0 or self.status == Status.DEGRADED and name == "installing":
                state = "failed"
            elif i < current or (i == current and name == "ready"):
                state = "done"
            elif i == current:
                state = "active"
            else:
                state = "todo"
            steps.append((name.capitalize(), state))
        return steps


class NodeHealth(models.TextChoices):
    """What the periodic health check (clusters.node_health) last saw of a ready node."""

    UNKNOWN = "unknown", "Not checked yet"
    HEALTHY = "healthy", "Healthy"
    UNREACHABLE = "unreachable", "Unreachable"
    NETWORK_DOWN = "network_down", "Private network down"
    SOFTWARE_DOWN = "software_down", "Software down"


BAD_HEALTH = (NodeHealth.UNREACHABLE, NodeHealth.NETWORK_DOWN, NodeHealth.SOFTWARE_DOWN)


class NodeStep:
    """The words a node's row shows for what it is doing (`Node.step`), for people only: the
    page, the API, the CLI. Code never reads a step back: behaviour hangs on `Node.state` and
    the progress timestamps (`up_at`, `peers_reached_at`, `joined_at`, `installed_at`,
    `ready_at`, `replaced_at`), so renaming a label changes what is shown and nothing else
    (tests/core/test_typed_progress.py renames every one and drives the lifecycle).
    Output a node prints sets the step too, to the words of its operation (`of_operation`)."""

    BOOTING = "Starting the machine"
    JOINING = "Joining the private network"
    WAITING_FOR_PEERS = "Waiting to reach every other machine"
    REACHES_EVERY_PEER = "Reaches every other machine"
    JOINED = "Joined the private network"
    INSTALLING = "Installing"  # followed by the software's name
    CHECKING_READINESS = "Checking the software is ready"
    INSTALLED = "Installed"
    INSTALL_QUEUED = "Install queued"
    READY = "Ready"
    STOPPING_OLD_MACHINE = "Stopping the old machine"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    RELEASED = "Released"
    REPLACED = "Replaced"

    @classmethod
    def installing(cls, software: str) -> str:
        return f"{cls.INSTALLING} {Software(software).label}"

    @classmethod
    def of_operation(cls, operation: str) -> str:
        """What a node operation's output says it is doing (`install_software:daemons`: the
        operation, then its script's own marker, which stays in the log), in words."""
        name = operation.partition(":")[0]
        words = {
            "boot": cls.BOOTING, "join_network": cls.JOINING, "network": cls.JOINING,
            "set_names": "Setting up node names", "setup_shared": "Setting up the /shared folder",
            "sync_volume": "Copying the volume", "install_software": "Installing the software",
            "install": "Installing the software", "check_ready": cls.CHECKING_READINESS, "stop": cls.STOPPING,
        }.get(name)
        return words or name.replace("_", " ").capitalize()


class NodeQuerySet(models.QuerySet["Node"]):
    def bulk_create(self, objs: Iterable[Node], *args: Any, **kwargs: Any) -> list[Node]:  # type: ignore[override]
        nodes = list(objs)
        for node in nodes:
            node.fill_workspace()
        return super().bulk_create(nodes, *args, **kwargs)  # type: ignore[arg-type,return-value]


class Node(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        BOOTING = "booting", "Booting"
        UP = "up", "Up"
        JOINED = "joined", "Joined"
        INSTALLING = "installing", "Installing"
        # Its install finished while another node's failed (a degraded cluster).
        INSTALLED = "installed", "Installed"
        READY = "ready", "Ready"
        INSTALL_FAILED = "install_failed", "Install failed"
        FAILED = "failed", "Failed"
        STOPPING = "stopping", "Stopping"
        STOPPED = "stopped", "Stopped"
        RELEASED = "released", "Released"

    # States a node stays in until something else happens to it: its step of work is over.
    SETTLED_STATES = (State.READY, State.INSTALL_FAILED, State.FAILED, State.STOPPED, State.RELEASED)

    LOG_KEEP = 4000  # characters of output a node keeps (its log tail)

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    # The cluster's workspace, which never changes: the workspace's instances are counted
    # from one index of nodes, not by joining every live machine to its cluster. Set from
    # the cluster when a node is saved or bulk-created.
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="+", db_index=False, editable=False)
    index = models.PositiveSmallIntegerField()
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="nodes")
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    address = models.CharField(max_length=255, blank=True, help_text="Where the control plane reaches it.")
    boot_requested_at = models.DateTimeField(null=True, blank=True)
    up_at = models.DateTimeField(null=True, blank=True)
    joined_at = models.DateTimeField(null=True, blank=True)
    billing_started_at = models.DateTimeField(null=True, blank=True)
    billing_ended_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    # Typed progress: what the lifecycle decides on (`step` below is only its label).
    peers_reached_at = models.DateTimeField(
        null=True, blank=True,
        help_text="Before the cluster joined: when a join attempt last found every peer reaching it (cleared when one did not).",
    )
    installed_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When its software install finished: from then on a pass only checks its readiness, never installs again.",
    )
    ready_at = models.DateTimeField(null=True, blank=True, help_text="When it became ready (software running).")
    replaced_at = models.DateTimeField(null=True, blank=True, help_text="When a new machine took over its name.")
    step = models.CharField(max_length=40, blank=True, help_text="What the node is doing now, in words (a label only).")
    log_tail = models.TextField(blank=True)
    # Characters ever appended to the log, of which log_tail keeps the last LOG_KEEP: a live
    # push sends a page the lines it lacks, not the whole tail again.
    log_written = models.PositiveBigIntegerField(default=0)
    detail = models.CharField(max_length=255, blank=True, help_text="Outcome, e.g. why it failed.")
    host_key = models.CharField(
        max_length=1000, blank=True, help_text="The machine's SSH host key (type base64), as its sshd presents it."
    )

    health = models.CharField(max_length=20, choices=NodeHealth.choices, default=NodeHealth.UNKNOWN)
    health_detail = models.CharField(max_length=255, blank=True, help_text="What the last health check found.")
    health_checked_at = models.DateTimeField(null=True, blank=True)
    health_changed_at = models.DateTimeField(null=True, blank=True)
    # A machine being swapped in for a bad one: it takes that node's name and private
    # address, and is set to null once the old machine has stopped (the swap is done).
    replacing = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replacement"
    )

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "index"]
        indexes = [
            # Machines running now, by workspace: the instances count reads this index alone.
            models.Index(fields=["workspace"], condition=Q(released_at__isnull=True), name="node_live_by_workspace"),
        ]
        constraints = [
            # A worker that never came up gives its name back to the next one added. A
            # machine being swapped in shares the name of the one it replaces until then.
            models.UniqueConstraint(
                fields=["cluster", "index"], condition=Q(released_at__isnull=True, replacing__isnull=True),
                name="live_node_index_unique",
            ),
            # A host can be held by one live cluster at a time, whatever the code above does.
            models.UniqueConstraint(
                fields=["host"], condition=Q(released_at__isnull=True), name="host_held_by_one_live_node"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.fill_workspace()
        super().save(*args, **kwargs)

    def fill_workspace(self) -> None:
        if self.workspace_id is None:
            self.workspace_id = self.cluster.workspace_id

    @property
    def name(self) -> str:
        return f"node-{self.index}"

    @property
    def role(self) -> str:
        return "head" if self.index == 0 else "worker"

    @property
    def private_ip(self) -> str:
        return f"10.77.0.{self.index + 1}"

    @property
    def is_replacement(self) -> bool:
        """A machine being swapped in for the live node of the same name (until the swap is done)."""
        return self.replacing_id is not None and self.released_at is None

    @property
    def was_replaced(self) -> bool:
        return self.released_at is not None and self.replaced_at is not None

    @property
    def row_id(self) -> str:
        """The page's element id: `node-<i>` for the machine that is the node now; a machine
        being swapped in, or one given back, has one of its own (they share the name)."""
        if self.is_replacement:
            return f"node-{self.index}-replacement"
        if self.released_at is not None:
            return f"node-{self.index}-released-{self.pk}"
        return f"node-{self.index}"

    @property
    def is_unhealthy(self) -> bool:
        return self.health not in (NodeHealth.HEALTHY, NodeHealth.UNKNOWN)


class ClusterEvent(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=150, help_text="A username, 'api key <prefix>', or 'system'.")
    event = models.CharField(max_length=50)
    message = models.TextField()
    reason = models.CharField(max_length=30, choices=Reason.choices, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.cluster_id} {self.event}"

    @property
    def label(self) -> str:
        return self.label_of(self.event)

    @staticmethod
    def label_of(event: str) -> str:
        """An event's name as the page and the CLI show it ("wipe_receipt" → "Wipe receipt"); the
        API gives both, and webhooks keep the key."""
        return event.replace("_", " ").capitalize()


class NetworkTest(models.Model):
    """One measurement of what the cluster's private network carries between its machines:
    iperf3 + ping over wg0 where there are no GPUs, nccl-tests' all_reduce_perf where there are.
    Kept per run; the newest is what the cluster page shows."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        PASSED = "passed", "Passed"
        SLOW = "slow", "Slow pairs found"
        # Some pairs have figures and some could not be measured (or the test was stopped).
        PARTIAL = "partial", "Partly measured"
        FAILED = "failed", "Could not run"

    class Trigger(models.TextChoices):
        AFTER_READY = "after_ready", "After the cluster became ready"
        AFTER_REPLACE = "after_replace", "After a node was replaced"
        ON_DEMAND = "on_demand", "On request"

    class Method(models.TextChoices):
        IPERF3 = "iperf3", "iperf3 and ping over the private network"
        NCCL = "nccl", "nccl-tests all_reduce_perf"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="network_tests")
    trigger = models.CharField(max_length=20, choices=Trigger.choices)
    method = models.CharField(max_length=20, choices=Method.choices, default=Method.IPERF3)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    requested_by = models.CharField(max_length=150, default="system")
    # What a pair must reach not to be marked slow (from the offer's promise).
    expected_gbps = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)
    # When its task was last handed to the broker; None when that failed (Redis down), so the
    # sweep queues it again as soon as it can.
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # The runner's heartbeat: renewed every few seconds while the test runs
    # (clusters.network_test.run.Heartbeat); a running test whose heartbeat stopped lost its worker.
    alive_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    detail = models.TextField(blank=True)
    # The nodes measured, as names by index, fixed when the test starts.
    node_names = models.JSONField(default=list, blank=True)
    # nccl: all_reduce_perf's table, one {size_bytes, time_us, algbw_gbs, busbw_gbs} per message size.
    nccl_rows = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.cluster_id} network test {self.pk} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.PASSED, self.Status.SLOW, self.Status.PARTIAL, self.Status.FAILED)


class NetworkTestPair(models.Model):
    """One measured direction between two nodes: source sends to target."""

    class Phase(models.TextChoices):
        RING = "ring", "Ring (every node to the next, at once)"
        PAIRS = "pairs", "All pairs"
        NCCL = "nccl", "all_reduce_perf"

    test = models.ForeignKey(NetworkTest, on_delete=models.CASCADE, related_name="pairs")
    phase = models.CharField(max_length=10, choices=Phase.choices)
    source_index = models.PositiveSmallIntegerField()
    target_index = models.PositiveSmallIntegerField()
    gbps = models.FloatField(null=True, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    slow = models.BooleanField(default=False)
    error = models.CharField(max_length=255, blank=True)
    measured_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["test", "phase", "source_index", "target_index"]
        constraints = [
            models.UniqueConstraint(fields=["test", "phase", "source_index", "target_index"], name="one_result_per_pair")
        ]

    def __str__(self) -> str:
        return f"node-{self.source_index} → node-{self.target_index}: {self.gbps} Gbit/s"
