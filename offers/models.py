"""The catalogue (GPU models, locations, machine types) and the host inventory behind it.

An *offer* is a machine type: a GPU model in a location with an interconnect, a machine
kind and a per-machine price. It can start a cluster of N machines now when N of its hosts
are free.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models

# An offer is sold as clusters of MIN_MACHINES to MAX_MACHINES machines; more is a quote. Written
# once here, at the bottom of the apps (clusters depends on offers, never the other way), and
# read by the models' constraint, the forms, the rules' messages, the templates (the
# cluster_rules context processor), the create page's script (data attributes) and the API.
MIN_MACHINES = 2
MAX_MACHINES = 64
# What a person reads about the bounds, wherever a count is refused (forms, the API, the CLI).
MACHINE_COUNT_MESSAGES = {
    "min_value": f"A cluster has at least {MIN_MACHINES} machines.",
    "max_value": f"A cluster has at most {MAX_MACHINES} machines; request a quote for more.",
    "invalid": f"Enter a whole number of machines, {MIN_MACHINES} to {MAX_MACHINES}.",
    "required": f"Enter how many machines, {MIN_MACHINES} to {MAX_MACHINES}.",
    "range": f"A cluster has {MIN_MACHINES} to {MAX_MACHINES} machines. For more, request a quote.",
}

class GPUModel(models.Model):
    slug = models.SlugField(max_length=30, unique=True, help_text="Short name customers type, e.g. H100.")
    name = models.CharField(max_length=80, help_text="e.g. NVIDIA H100 80GB SXM")
    memory_gb = models.PositiveIntegerField()

    class Meta:
        ordering = ["-memory_gb", "slug"]
        verbose_name = "GPU model"

    def __str__(self) -> str:
        return self.slug


class Location(models.Model):
    code = models.SlugField(max_length=30, unique=True)
    name = models.CharField(max_length=80)
    country = models.CharField(max_length=2, help_text="ISO country code")
    gateway_host = models.CharField(
        max_length=255, blank=True,
        help_text="SSH gateway (user@host[:port]) for sites whose machines have no public address.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class MachineKind(models.TextChoices):
    VM = "vm", "VM"
    BARE_METAL = "bare_metal", "Bare metal"
    CONTAINER = "container", "Container"


class Interconnect(models.TextChoices):
    """The machine's own network link. Self-serve clusters are always Ethernet: what the
    cluster gets between its machines is the encrypted private network on top of it (about
    1–2 Gbit/s), whatever the link. InfiniBand and RoCE are sold only through a quote."""

    ETHERNET_10G = "eth_10g", "10 Gb Ethernet"
    ETHERNET_25G = "eth_25g", "25 Gb Ethernet"
    ETHERNET_100G = "eth_100g", "100 Gb Ethernet"


# What a self-serve cluster gets between its machines, and what it suits (the product's words).
PRIVATE_NETWORK_SPEED = "about 1–2 Gbit/s"
# The low end of that promise: a network test marks a pair measured below it as slow.
PRIVATE_NETWORK_MIN_GBPS = 1.0
# What every surface says of a community offer: the create page, the plan (API, CLI, MCP) and
# the API's offer.
COMMUNITY_WARNING = "Community host (independent operator): keep secrets off it; volumes cannot be attached."
NETWORK_CAVEAT = (
    "Self-serve clusters run on Ethernet with an encrypted private network between the machines, "
    f"{PRIVATE_NETWORK_SPEED}. That suits independent jobs, Slurm arrays, Ray, Kubernetes and LoRA "
    "fine-tuning, not training a full model across machines. InfiniBand and RoCE networks are sold through a quote."
)


class ProviderName(models.TextChoices):
    SIMULATED = "simulated", "Simulated (in-process)"
    LOCAL = "local", "Local SSH sandboxes"
    SSH = "ssh", "SSH host pool"


class MachineType(models.Model):
    GPU_COUNTS = [(1, "1"), (2, "2"), (4, "4"), (8, "8")]

    gpu = models.ForeignKey(GPUModel, on_delete=models.PROTECT, related_name="machine_types")
    location = models.ForeignKey(Location, on_delete=models.PROTECT, related_name="machine_types")
    kind = models.CharField(max_length=20, choices=MachineKind.choices)
    gpus_per_machine = models.PositiveSmallIntegerField(choices=GPU_COUNTS)
    interconnect = models.CharField(max_length=20, choices=Interconnect.choices)
    vcpus = models.PositiveIntegerField(default=32)
    memory_gb = models.PositiveIntegerField(default=256)
    disk_gb = models.PositiveIntegerField(default=1000)
    price_per_machine_hour = models.DecimalField(max_digits=10, decimal_places=4)
    boot_deadline_minutes = models.PositiveIntegerField(
        default=25, help_text="Every machine must be up and joined within this. Longer for slow-booting kinds."
    )
    community = models.BooleanField(default=False, help_text="Independent operator: customers are warned.")
    provider = models.CharField(max_length=20, choices=ProviderName.choices, default=ProviderName.SIMULATED)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["gpu", "price_per_machine_hour", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(gpus_per_machine__in=[1, 2, 4, 8]), name="gpus_per_machine_1_2_4_8"
            ),
            models.CheckConstraint(condition=models.Q(price_per_machine_hour__gt=0), name="price_positive"),
            # InfiniBand and RoCE are quote-only: a self-serve offer can never claim them.
            models.CheckConstraint(
                condition=models.Q(interconnect__in=["eth_10g", "eth_25g", "eth_100g"]), name="self_serve_is_ethernet"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpus_per_machine}× {self.gpu.slug} {self.get_kind_display()} · {self.location.code}"

    def price_for(self, machines: int) -> Decimal:
        return self.price_per_machine_hour * machines

    @property
    def supports_kubernetes(self) -> bool:
        return self.kind in (MachineKind.VM, MachineKind.BARE_METAL)

    @property
    def shares_folder(self) -> bool:
        return self.kind in (MachineKind.VM, MachineKind.BARE_METAL)

    @property
    def takes_volume(self) -> bool:
        return not self.community

    @property
    def gives_gpus(self) -> bool:
        """Its machines get GPUs of the host they land on. The simulated and local providers'
        machines have none, whatever the catalogue says (docs/nodeops.md)."""
        return self.provider not in (ProviderName.SIMULATED, ProviderName.LOCAL)

    @property
    def network_label(self) -> str:
        return f"Encrypted private network, {PRIVATE_NETWORK_SPEED} between machines"

    @property
    def link_label(self) -> str:
        return f"{self.get_interconnect_display()} link per machine"

    @property
    def kind_notes(self) -> list[str]:
        """What follows from the machine kind (and community hosting), in the customer's words."""
        notes = []
        if self.supports_kubernetes:
            notes.append("Kubernetes available")
        else:
            notes.append("No Kubernetes on containers")
        if self.shares_folder:
            notes.append("/shared folder on every machine")
        else:
            notes.append("No shared folder: each machine keeps its own disk")
        if not self.takes_volume:
            notes.append("No volume on community hosts")
        return notes


class PhysicalHost(models.Model):
    """A server an operator brought over SSH (`manage.py hosts add`), graded before any of
    its machines went on sale. It holds slots: the `Host` rows below, each one sellable
    machine. Only a host `on_sale` sells its free slots (offers.inventory)."""

    class State(models.TextChoices):
        ONBOARDING = "onboarding", "Onboarding"
        ON_SALE = "on_sale", "On sale"
        # No new machine lands here; those running keep running.
        DRAINING = "draining", "Draining"
        DOWN = "down", "Down"

    name = models.CharField(max_length=100, unique=True, help_text="The host's own hostname unless given.")
    address = models.CharField(max_length=255)
    port = models.PositiveIntegerField(default=22)
    ssh_user = models.CharField(max_length=64, default="root")
    ssh_key_path = models.CharField(max_length=1024, help_text="Path of the operator's private key on the control plane.")
    host_key = models.TextField(blank=True, help_text="The SSH host key seen at onboarding; later connections must match it.")
    state = models.CharField(max_length=20, choices=State.choices, default=State.ONBOARDING, db_index=True)
    # [{"check": "kernel", "verdict": "pass" | "fail", "detail": "6.1.0"}, …] (offers.fleet.grade).
    grade = models.JSONField(default=list, blank=True)
    graded_at = models.DateTimeField(null=True, blank=True)
    # Why the last grade ran: onboarding, the daily grade, a new runtime, a changed GPU driver.
    graded_because = models.CharField(max_length=120, blank=True)
    # The host runtime's version installed there when it was last graded (offers.hostruntime).
    runtime_version = models.CharField(max_length=40, blank=True)
    gpus = models.JSONField(default=list, blank=True, help_text="GPUs nvidia-smi listed: index, name, memory, driver.")
    # When the host was marked down (it stopped answering): its machines are billed up to this
    # instant and no further. Cleared when it returns and its leftover machines are wiped.
    down_since = models.DateTimeField(null=True, blank=True)
    # The state it goes back to when it returns (on sale, or draining if an operator drained it).
    state_before_down = models.CharField(max_length=20, choices=State.choices, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "physical host"

    def __str__(self) -> str:
        return self.name

    @property
    def grade_passes(self) -> bool:
        return bool(self.grade) and all(check.get("verdict") == "pass" for check in self.grade)


class HostFault(models.TextChoices):
    NONE = "", "None"
    BOOT_FAILS = "boot_fails", "Fails to boot"
    NEVER_JOINS = "never_joins", "Never joins the network"
    INSTALL_FAILS = "install_fails", "Software install fails"


class Host(models.Model):
    """One machine an operator brought. `state` is the reservation the inventory locks on."""

    class State(models.TextChoices):
        FREE = "free", "Free"
        RESERVED = "reserved", "Reserved"
        DISABLED = "disabled", "Disabled"
        # Failed a boot, a join or an install: off sale until an operator returns it.
        QUARANTINED = "quarantined", "Quarantined"

    machine_type = models.ForeignKey(MachineType, on_delete=models.PROTECT, related_name="hosts")
    # The server this machine is a slot of; empty for machines that are a host of their own
    # (the simulated and local inventories, whole-host bare metal).
    physical_host = models.ForeignKey(
        PhysicalHost, on_delete=models.SET_NULL, null=True, blank=True, related_name="slots",
    )
    name = models.CharField(max_length=100, unique=True)
    state = models.CharField(max_length=20, choices=State.choices, default=State.FREE, db_index=True)
    address = models.CharField(max_length=255, blank=True, help_text="SSH address (ssh and local providers).")
    port = models.PositiveIntegerField(default=22)
    ssh_user = models.CharField(max_length=64, default="root")
    ssh_key_ref = models.CharField(max_length=255, blank=True, help_text="Path of the operator's private key.")
    # Set when a machine on this host failed to boot, join or install (offers.inventory
    # .quarantine_hosts). A host held by a running cluster keeps `reserved` until it is let go,
    # then goes to `quarantined` instead of `free`; only an operator clears it.
    quarantined_at = models.DateTimeField(null=True, blank=True)
    quarantine_reason = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["machine_type", "name"]
        indexes = [models.Index(fields=["machine_type", "state"])]

    def __str__(self) -> str:
        return self.name


class InjectedFault(models.Model):
    """Lab only: delays and a fault injected into one machine of the simulated or local
    inventories, so every failure path can be driven on purpose in tests and demos
    (offers.lab). A host is not its faults: a production host has no row here, and the
    providers never read one for a fleet host's slot."""

    host = models.OneToOneField(Host, on_delete=models.CASCADE, primary_key=True, related_name="injected_fault")
    boot_seconds = models.FloatField(default=0)
    join_seconds = models.FloatField(default=0)
    install_seconds = models.FloatField(default=0)
    fault = models.CharField(max_length=20, choices=HostFault.choices, default=HostFault.NONE, blank=True)

    class Meta:
        verbose_name = "injected fault (lab only)"

    def __str__(self) -> str:
        return f"{self.host_id}: {self.fault or 'no fault'}"
