"""The API's request and response types. They validate what comes in, shape what goes out, and
are the OpenAPI document (GET /api/v1/openapi.json is generated from them, never written by hand).

Response schemas read model objects directly (`from_attributes`); a `resolve_<field>` method
says where a field comes from when it is not an attribute of the same name.
"""

import datetime as dt
from decimal import Decimal
from typing import Annotated, Any

from django.utils import timezone
from ninja import Schema
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    create_model,
    model_validator,
)

from billing.services import machines_cost
from clusters import connect
from clusters.images import default_image, offer_images
from clusters.models import NetworkTest as NetworkTestModel
from clusters.models import NodeHealth, Reason, Software, Status
from clusters.network_test import card
from clusters.rules import MAX_MACHINES, MIN_MACHINES, NAME_MAX_LENGTH
from config.money import CENT
from offers.inventory import Offer as PricedOffer
from offers.models import COMMUNITY_WARNING, Interconnect, MachineKind
from webhooks.models import SUBSCRIBABLE as _WEBHOOK_EVENTS

# Ids are bigints in the database: anything larger names nothing (and must not reach SQL).
MAX_ID = 2**63 - 1
DEFAULT_LIMIT = 50
MAX_LIMIT = 200



# -- scalar types -------------------------------------------------------------------------------


def money(value: Decimal | None) -> str | None:
    """Money as a decimal string with at least cents: 2.5000 -> "2.50", 2.4550 -> "2.455"."""
    if value is None:
        return None
    value = Decimal(value)
    normalized = value.normalize()
    if normalized.as_tuple().exponent > -2:  # type: ignore[operator]
        return str(value.quantize(CENT))
    return str(normalized)


def timestamp(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat().replace("+00:00", "Z")


MONEY_SCHEMA = {"type": "string", "pattern": r"^-?\d+\.\d{2,4}$", "description": "US dollars as a decimal string."}

Money = Annotated[Decimal, PlainSerializer(money, return_type=str), WithJsonSchema(MONEY_SCHEMA)]
OptionalMoney = Annotated[
    Decimal | None, PlainSerializer(money, return_type=str | None),
    WithJsonSchema({**MONEY_SCHEMA, "type": ["string", "null"]}),
]
Timestamp = Annotated[dt.datetime, PlainSerializer(timestamp, return_type=str),
                      WithJsonSchema({"type": "string", "format": "date-time"})]
OptionalTimestamp = Annotated[dt.datetime | None, PlainSerializer(timestamp, return_type=str | None),
                              WithJsonSchema({"type": ["string", "null"], "format": "date-time"})]


def enum(values: list[Any], *, nullable: bool = False) -> WithJsonSchema:
    """Documents a string as one of `values` (the response check holds the server to it):
    `Annotated[str, enum([...])]`."""
    if nullable:
        return WithJsonSchema({"type": ["string", "null"], "enum": [*values, None]})
    return WithJsonSchema({"type": "string", "enum": list(values)})


def _whole_number(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("Must be a whole number.")
    return value


def _identifier(value: Any) -> int:
    """An object id: a positive integer, or its decimal string (clients may send ids as strings)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_ID:
        raise ValueError("Must be an id (a positive whole number).")
    return value


def _no_nul(value: Any) -> Any:
    # PostgreSQL text cannot hold NUL; refusing it here keeps it a 400, never a database error.
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("Must not contain NUL characters.")
    return value


WholeNumber = Annotated[int, BeforeValidator(_whole_number), WithJsonSchema({"type": "integer"})]
Id = Annotated[int, BeforeValidator(_identifier),
               WithJsonSchema({"type": ["integer", "string"], "description": "An id (a string of digits is accepted)."})]
Text = Annotated[str, BeforeValidator(_no_nul)]


class Body(Schema):
    """A JSON request body. Like a form, a field sent as null or "" counts as not sent, so the
    default applies or "This field is required." is reported; every problem is reported at once."""

    model_config = ConfigDict(str_strip_whitespace=True)

    @model_validator(mode="before")
    @classmethod
    def _blank_is_missing(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None and v != ""}
        return data


# -- envelopes ----------------------------------------------------------------------------------


class ErrorBody(Schema):
    code: str = Field(description="Stable machine-readable code, e.g. insufficient_credits.")
    message: str = Field(description="What went wrong and what to do, for people.")
    details: dict[str, Any] = Field(description="Per-field messages (400), required/available (402), …")


class Error(Schema):
    error: ErrorBody


class ListMeta(Schema):
    total: int = Field(ge=0)
    limit: int
    offset: int


class PageQuery(Schema):
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description=f"Items per page (1–{MAX_LIMIT}, default {DEFAULT_LIMIT}).")
    offset: int = Field(0, ge=0, le=MAX_ID, description="Items to skip (default 0).")


_envelopes: dict[str, type[Schema]] = {}


def envelope(item: Any, name: str | None = None) -> type[Schema]:
    """`{data: <item>, meta: {}}` as a named schema."""
    name = name or f"{item.__name__}Envelope"
    if name not in _envelopes:
        _envelopes[name] = create_model(name, __base__=Schema, data=(item, ...), meta=(dict[str, Any], {}))
    return _envelopes[name]


def list_envelope(item: Any, meta: type[Schema] = ListMeta) -> type[Schema]:
    """`{data: [<item>, …], meta: {total, limit, offset}}` as a named schema."""
    name = f"{item.__name__}List"
    if name not in _envelopes:
        _envelopes[name] = create_model(name, __base__=Schema, data=(list[item], ...), meta=(meta, ...))
    return _envelopes[name]


# -- catalogue ----------------------------------------------------------------------------------


class GpuType(Schema):
    id: str
    name: str = Field(description="Pass as `gpu` to cluster-offers.")
    description: str
    memory_gb: int

    @staticmethod
    def resolve_id(gpu: Any) -> str:
        return gpu.slug

    @staticmethod
    def resolve_name(gpu: Any) -> str:
        return gpu.slug

    @staticmethod
    def resolve_description(gpu: Any) -> str:
        return gpu.name


def _machine_type(obj: Any) -> Any:
    """What an offer's fields are read from: a MachineType, or an offers.inventory.Offer's one."""
    return obj.machine_type if isinstance(obj, PricedOffer) else obj


class OfferSummary(Schema):
    id: int = Field(description="The offer id to create a cluster from.")
    gpu: str
    gpus_per_machine: int = Field(json_schema_extra={"enum": [1, 2, 4, 8]})
    machine_kind: Annotated[str, enum(MachineKind.values)]
    location: str
    location_name: str
    interconnect: Annotated[str, enum(Interconnect.values)]
    community: bool = Field(description="Independent operator's host: keep secrets off it.")

    @staticmethod
    def resolve_gpu(obj: Any) -> str:
        return _machine_type(obj).gpu.slug

    @staticmethod
    def resolve_gpus_per_machine(obj: Any) -> int:
        return _machine_type(obj).gpus_per_machine

    @staticmethod
    def resolve_machine_kind(obj: Any) -> str:
        return _machine_type(obj).kind

    @staticmethod
    def resolve_location(obj: Any) -> str:
        return _machine_type(obj).location.code

    @staticmethod
    def resolve_location_name(obj: Any) -> str:
        return _machine_type(obj).location.name

    @staticmethod
    def resolve_interconnect(obj: Any) -> str:
        return _machine_type(obj).interconnect

    @staticmethod
    def resolve_community(obj: Any) -> bool:
        return _machine_type(obj).community


class Image(Schema):
    """A machine image an offer's machines can start (docs/nodeops.md, "Images on every surface")."""

    name: str = Field(description="Pass as `image` to create or plan a cluster.")
    os: str = Field(description='The operating system, e.g. "Debian 12 (bookworm)".')
    python: str | None = Field(description="The system Python's version.")
    pytorch: str | None = Field(description="The PyTorch release in the system Python; null: no PyTorch.")
    cuda: str | None = Field(description="The CUDA PyTorch was built for, on machines with GPUs; null: a CPU build "
                                         "or no PyTorch.")
    description: str
    summary: str = Field(description="The facts in one line, as the dashboard shows them.")


class Offer(OfferSummary):
    """An offers.inventory.Offer: a machine type priced for a cluster size."""

    vcpus: int
    memory_gb: int
    disk_gb: int
    machines: int = Field(description="The cluster size the prices are for.")
    available_machines: int = Field(description="Machines of this offer free right now.")
    price_per_machine_hour: Money
    price_per_cluster_hour: Money = Field(description="price_per_machine_hour × machines.")
    software: list[Annotated[str, enum(Software.values)]]
    images: list[Image] | None = Field(
        description="The machine images this offer can start now; a cluster names one as `image`. null: its machines "
                    "run their operator's own system and start no image.")
    default_image: str | None = Field(description="The image a create that names none gets: pytorch where offered, "
                                                  "else the first; null when the offer starts no image.")
    warning: str | None

    @staticmethod
    def resolve_images(offer: Any) -> list[dict[str, Any]] | None:
        found = offer_images(offer.machine_type)
        return None if found is None else [image.as_dict() for image in found]

    @staticmethod
    def resolve_default_image(offer: Any) -> str | None:
        return default_image(offer_images(offer.machine_type)) or None

    @staticmethod
    def resolve_vcpus(offer: Any) -> int:
        return offer.machine_type.vcpus

    @staticmethod
    def resolve_memory_gb(offer: Any) -> int:
        return offer.machine_type.memory_gb

    @staticmethod
    def resolve_disk_gb(offer: Any) -> int:
        return offer.machine_type.disk_gb

    @staticmethod
    def resolve_software(offer: Any) -> list[str]:
        return offer.software_choices

    @staticmethod
    def resolve_warning(offer: Any) -> str | None:
        return COMMUNITY_WARNING if offer.machine_type.community else None


class OfferListMeta(ListMeta):
    network_caveat: str = Field(description="What a cluster gets between its machines, whatever each machine's link: "
                                            "the dashboard's caveat, in its words.")


class OfferQuery(Schema):
    gpu: Annotated[Text, Field(max_length=30, description="GPU model, e.g. H100.")] = ""
    machines: int = Field(MIN_MACHINES, ge=MIN_MACHINES, le=MAX_MACHINES, description=f"Cluster size (default {MIN_MACHINES}).")
    include_community: bool = False


# -- clusters -----------------------------------------------------------------------------------


class SshEndpoint(Schema):
    host: str = Field(description="The address the node's SSH answers on now (it changes when the node is replaced).")
    port: int
    user: str
    proxy_jump: str | None = Field(description="The site gateway to go through (`ssh -J`), where there is one.")


class Node(Schema):
    name: str = Field(description="node-0 (the head) … node-N-1.")
    role: Annotated[str, enum(["head", "worker"])]
    status: str
    private_ip: str | None = Field(description="10.77.0.x once the node joined the network.")
    step: str | None
    detail: str | None
    ssh: str | None = Field(description="The Connect card's ssh line for this node, once the cluster is ready or degraded.")
    ssh_endpoint: SshEndpoint | None = Field(
        None, description="Where the node's SSH answers now, for a ProxyCommand that resolves it when a connection opens "
                    "(what `runcrate clusters ssh-config` writes), once the cluster is ready or degraded.")
    host_key: str | None = Field(
        None, description="The node's SSH host key (`ssh-ed25519 AAAA…`) once read, for a KnownHostsCommand.")
    replacing: bool = Field(
        description="A new machine being swapped in for the node of the same name: it takes that node's name and "
                    "private address, and the old machine stops once it is ready (then this is false).")
    instance_id: int = Field(description="The machine's id on the Instances list.")
    health: Annotated[str, enum(NodeHealth.values)] = Field(
        description="What the periodic health check last found (unknown until a ready cluster's first check).")
    health_detail: str | None = Field(description="Why: what the check saw on the node.")
    health_checked_at: OptionalTimestamp = Field(description="When the node was last checked.")
    health_changed_at: OptionalTimestamp = Field(description="Since when it has had this health.")

    @staticmethod
    def resolve_health(node: Any) -> str:
        # A machine that stopped carries no health (api/rows.py lists it the same way).
        return NodeHealth.UNKNOWN.value if node.released_at is not None else node.health

    @staticmethod
    def resolve_health_detail(node: Any) -> str | None:
        return None if node.released_at is not None else (node.health_detail or None)

    @staticmethod
    def resolve_status(node: Any) -> str:
        return node.state

    @staticmethod
    def resolve_replacing(node: Any) -> bool:
        return bool(node.is_replacement)

    @staticmethod
    def resolve_instance_id(node: Any) -> int:
        return node.pk

    @staticmethod
    def resolve_ssh(node: Any) -> str | None:
        return connect.ssh_line(node)

    @staticmethod
    def resolve_ssh_endpoint(node: Any) -> dict[str, Any] | None:
        found = connect.live_endpoint(node)
        if found is None:
            return None
        return {"host": found.host, "port": found.port, "user": found.user, "proxy_jump": found.proxy_jump or None}

    @staticmethod
    def resolve_host_key(node: Any) -> str | None:
        return (node.host_key or None) if node.released_at is None else None

    @staticmethod
    def resolve_private_ip(node: Any) -> str | None:
        # The private address is assigned by index, but only means something once the node joined.
        return node.private_ip if node.joined_at else None

    @staticmethod
    def resolve_step(node: Any) -> str | None:
        return node.step or None

    @staticmethod
    def resolve_detail(node: Any) -> str | None:
        return node.detail or None


class ClusterSummary(Schema):
    """A cluster as the list shows it: its own facts, how many of its nodes are unhealthy and the
    head's ssh line, the same whatever its size. Its nodes, ssh_config, known_hosts and launch
    lines are on `GET /clusters/{id}`; every machine of every cluster is on `GET /instances`."""

    id: int
    name: str
    status: Annotated[str, enum(Status.values)]
    termination_reason: Annotated[str | None, enum(Reason.values, nullable=True)] = Field(
        description="Why it was terminated or failed.")
    termination_reason_label: str | None = Field(description="`termination_reason` in words, as the dashboard shows it.")
    failure_reason: Annotated[str | None, enum(Reason.values, nullable=True)]
    environment: str
    environment_id: int
    workspace_id: int
    machines: int
    software: Annotated[str, enum(Software.values)]
    image: str | None = Field(description="The machine image every node boots from (an offer's `images`); null on "
                                          "machines that run their operator's own system.")
    offer: OfferSummary
    volume_id: int | None
    price_per_machine_hour: Money
    price_per_hour: Money = Field(description="The whole cluster per hour.")
    created_at: Timestamp
    billing_started_at: OptionalTimestamp = Field(description="When every machine had joined.")
    billing_ended_at: OptionalTimestamp
    ready_at: OptionalTimestamp
    terminated_at: OptionalTimestamp
    deadline_at: Timestamp = Field(description="Every machine must be up and joined by then, or the cluster fails: every machine released, nothing billed. It no longer applies once `billing_started_at` is set.")
    unhealthy_nodes: int = Field(description="Live nodes the last health check found unreachable, network down or software down.")
    ssh: str | None = Field(description="The Connect card's ssh line for node-0 (the head), once the cluster is ready or degraded.")

    @staticmethod
    def resolve_termination_reason(cluster: Any) -> str | None:
        return cluster.termination_reason or cluster.failure_reason or None

    @staticmethod
    def resolve_termination_reason_label(cluster: Any) -> str | None:
        reason = cluster.termination_reason or cluster.failure_reason
        return Reason(reason).label if reason else None

    @staticmethod
    def resolve_failure_reason(cluster: Any) -> str | None:
        return cluster.failure_reason or None

    @staticmethod
    def resolve_image(cluster: Any) -> str | None:
        return cluster.image or None

    @staticmethod
    def resolve_environment(cluster: Any) -> str:
        return cluster.environment.name

    @staticmethod
    def resolve_machines(cluster: Any) -> int:
        return cluster.machine_count

    @staticmethod
    def resolve_offer(cluster: Any) -> Any:
        return cluster.machine_type

    @staticmethod
    def resolve_unhealthy_nodes(cluster: Any) -> int:
        return len(cluster.unhealthy_nodes)

    @staticmethod
    def resolve_ssh(cluster: Any) -> str | None:
        return connect.head_ssh_line(cluster)


class Cluster(ClusterSummary):
    """A cluster with its nodes and what connecting to them takes."""

    nodes: list[Node]
    cost: Money = Field(description="What the machines cost so far (the total once billing ended), to the cent as "
                                    "the Billing page and the ledger count it.")
    ssh_config: str | None = Field(description="A ~/.ssh/config block with a Host entry per node, once connectable.")
    known_hosts: str | None = Field(
        description="known_hosts lines for every node's SSH host key, under its ssh_config alias and the address of "
                    "its ssh line, once connectable (`runcrate clusters ssh-config` writes them).")
    launch: dict[str, str] | None = Field(
        description="The Connect card's launch lines by name (torchrun, mpirun, deepspeed, nccl; sbatch_array, "
                    "srun_torchrun and sacct on Slurm; ray_job and ray_submit on Ray), once connectable. Run them on node-0 "
                    "(torchrun and sacct: on any node).")

    @staticmethod
    def resolve_cost(cluster: Any) -> Decimal:
        return machines_cost(cluster.usages.all(), timezone.now())

    @staticmethod
    def resolve_ssh_config(cluster: Any) -> str | None:
        return connect.ssh_config(cluster) if cluster.status in connect.CONNECTABLE else None

    @staticmethod
    def resolve_known_hosts(cluster: Any) -> str | None:
        return connect.known_hosts(cluster) if cluster.status in connect.CONNECTABLE else None

    @staticmethod
    def resolve_launch(cluster: Any) -> dict[str, str] | None:
        return connect.launch_lines(cluster) if cluster.status in connect.CONNECTABLE else None

    @staticmethod
    def resolve_nodes(cluster: Any) -> list[Any]:
        # By name, and of one name the older machine first (one being swapped in, or a worker
        # added after one that never came up, follows it).
        return sorted(cluster.nodes.all(), key=lambda n: (n.index, n.pk))


class ClusterEvent(Schema):
    id: int
    created_at: Timestamp
    actor: str = Field(description="A username, 'api key <prefix>' or 'system'.")
    event: str
    label: str = Field(description="`event` in words, as the dashboard shows it.")
    message: str
    reason: str | None
    audit_event_id: int | None = Field(None, description="The audit log entry of the action this event records "
                                                         "(GET /api/v1/audit-events), if it records one.")

    @staticmethod
    def resolve_reason(event: Any) -> str | None:
        return event.reason or None


class ClusterQuery(Schema):
    status: Annotated[str, enum(["live", *Status.values])] = Field("", description="`live`, or one status.")


class CreateCluster(Body):
    name: Annotated[Text, Field(max_length=NAME_MAX_LENGTH, description="1–63 lowercase letters, digits and hyphens.")]
    offer_id: Id = Field(description="An offer id from cluster-offers.")
    machines: WholeNumber = Field(json_schema_extra={"minimum": MIN_MACHINES, "maximum": MAX_MACHINES})
    software: Annotated[Text, Field(max_length=20, description="Kubernetes only on vm and bare_metal offers.",
                   json_schema_extra={"enum": list(Software.values)})] = Software.NONE.value
    image: Annotated[Text, Field(max_length=32, description="A machine image of the offer's `images`. Omitted: the "
                                                            "offer's `default_image` (pytorch where offered).")] | None = None
    volume_id: Id | None = Field(None, description="Not on community offers.")
    ssh_key_ids: list[Id] | None = Field(
        None, description="The SSH keys every node accepts for root. Omitted: every key of the workspace, as the "
                          "dashboard picks them; [] installs none, and nobody could log in.",
    )

    @model_validator(mode="after")
    def _distinct_keys(self) -> "CreateCluster":
        self.software = self.software.lower()
        if self.image is not None:
            self.image = self.image.lower()
        if self.ssh_key_ids is not None:
            self.ssh_key_ids = list(dict.fromkeys(self.ssh_key_ids))
        return self


class AddWorkers(Body):
    count: WholeNumber = Field(1, ge=1, le=MAX_MACHINES - MIN_MACHINES)


# -- billing ------------------------------------------------------------------------------------


class Balance(Schema):
    credits_balance: Money
    active_usage_cost_per_hour: Money
    hours_remaining: str | None = Field(description="null when nothing is billed.")
    environment: str
    monthly_budget: Money
    budget_spent: OptionalMoney
    budget_remaining: OptionalMoney


# Usage lines arrive as plain dicts (billing.queries.UsageLines), hundreds of rows a page:
# plain pydantic models validate them in pydantic-core, without ninja's per-object getter.
class UsageRow(BaseModel):
    node: str
    gpu: str
    start: Timestamp
    end: OptionalTimestamp = Field(description="null while the machine runs.")
    hours: Annotated[str, BeforeValidator(str)]
    rate: Money
    amount: Money


class UsageItem(BaseModel):
    cluster_id: int
    name: str
    environment_id: int
    description: str = Field(description='"Cluster usage <name>".')
    amount: Money = Field(description="What the ledger holds for the cluster that month: always the sum of its rows.")
    machines: int = Field(ge=0, description="Machines billed in the month (the line's rows).")
    accruing: bool = Field(description="A machine still runs this month: the line grows until the cluster ends.")
    rows: list[UsageRow] | None = Field(
        None, description="One per machine: on GET /billing/usage/{cluster_id}, or on the list with ?rows=true; "
                          "null otherwise.",
    )


class UsageMeta(ListMeta):
    month: str
    environment: str
    total_amount: Money


class UsageLineQuery(Schema):
    month: Annotated[Text, Field(description="YYYY-MM; default this month.", json_schema_extra={"pattern": r"^\d{4}-\d{2}$"})] = ""


class UsageQuery(UsageLineQuery):
    rows: bool = Field(False, description="Also send every line's machine rows (default: lines only; "
                                          "open one line with GET /billing/usage/{cluster_id}).")


# -- volumes and quotes -------------------------------------------------------------------------


class Volume(Schema):
    id: int
    name: str
    size_gb: int
    environment: str
    created_at: Timestamp

    @staticmethod
    def resolve_environment(volume: Any) -> str:
        return volume.environment.name


class CreateVolume(Body):
    name: Annotated[Text, Field(max_length=100, description="Lowercase letters, digits, . _ -")]
    size_gb: WholeNumber = Field(ge=1, le=100_000)


class CreateQuote(Body):
    contact_name: Annotated[Text, Field(max_length=5000)]
    email: Annotated[Text, Field(max_length=5000, json_schema_extra={"format": "email"})]
    company: Annotated[Text, Field(max_length=5000)] = ""
    gpu: Annotated[Text, Field(max_length=5000)]
    machines: WholeNumber = Field(json_schema_extra={"minimum": 1})
    network: Annotated[Text, Field(max_length=5000, json_schema_extra={"enum": ["ethernet", "infiniband", "roce"]})] = ""
    term: Annotated[Text, Field(max_length=5000, json_schema_extra={"enum": ["on_demand", "reserved"]})] = ""
    term_months: WholeNumber | None = Field(None, description="Required for a reserved term.")
    start_date: Annotated[Text, Field(max_length=5000, json_schema_extra={"format": "date"})] = ""
    notes: Annotated[Text, Field(max_length=5000)] = ""


class Quote(Schema):
    id: int
    status: str
    contact_name: str
    email: str
    company: str
    gpu: str
    machines: int
    network: str
    term: str
    term_months: int | None
    start_date: str | None
    notes: str
    created_at: Timestamp

    @staticmethod
    def resolve_start_date(quote: Any) -> str | None:
        return quote.start_date.isoformat() if quote.start_date else None


PathId = Annotated[int, Field(ge=1, le=MAX_ID)]


class Problem(Schema):
    code: str
    message: str
    field: str | None = Field(description="The request field it is about; null when it is about the whole request.")


class PlanBalance(Schema):
    credits_balance: Money
    required: Money = Field(description="One hour of the whole cluster, never less than the minimum.")
    covers_one_hour: bool


class PlanBudget(Schema):
    monthly_budget: Money
    spent: Money
    remaining: Money
    per_hour_after_create: Money = Field(description="What the environment's clusters (booting ones too) and this "
                                                     "cluster cost per hour: the budget's spend.")
    hours: str | None = Field(description="Hours the budget left lasts at that rate; null when nothing would be billed.")
    under_one_hour: bool = Field(description="The environment's clusters would be stopped within the hour for its budget.")


class PlanRunway(Schema):
    per_hour_after_create: Money = Field(description="Everything the workspace runs or is starting, plus this cluster.")
    hours: str | None = Field(description="Hours the balance lasts at that rate; null when nothing would be billed.")
    under_one_hour: bool


class PlanQuota(Schema):
    id: int
    applies_to: str = Field(description="Whom and where the quota binds, in words.")
    max_gpus: int | None
    gpus_in_use: int
    gpus_after_create: int
    monthly_spend: Money | None
    spent: Money = Field(description="Spent this calendar month (UTC) by what the quota counts.")


class ClusterPlan(Schema):
    """POST /api/v1/clusters/plan: what a create with the same body would do. Nothing is reserved."""

    can_create: bool
    workspace_id: int = Field(description="The workspace a create with this body would act in.")
    environment_id: int = Field(description="The environment a create with this body would act in.")
    offer: OfferSummary | None
    machines: int | None
    software: str
    image: str | None = Field(description="The image a create would boot: the one asked for, or the offer's default.")
    images: list[Image] | None = Field(description="Every image the offer can start now (null: none, or no such offer).")
    available_machines: int
    price_per_machine_hour: Money
    price_per_hour: Money = Field(description="The whole cluster per hour.")
    balance: PlanBalance
    budget: PlanBudget
    runway: PlanRunway
    quotas: list[PlanQuota] = Field(description="Every quota that binds this create, with what is in use.")
    warnings: list[str]
    problems: list[Problem] = Field(description="Every refusal a create would answer, each with its code.")
    ssh_key_ids: list[int] = Field(description="The SSH keys a create with this body would install.")


# -- workspace, environments, SSH keys, instances -----------------------------------------------


class SSHKey(Schema):
    id: int
    name: str
    fingerprint: str
    public_key: str
    created_at: Timestamp


class CreateSSHKey(Body):
    name: Annotated[Text, Field(max_length=100)]
    public_key: Annotated[Text, Field(max_length=16_000, description="One OpenSSH public key line: type, key and an optional comment.")]


class Environment(Schema):
    id: int
    name: str
    is_default: bool
    monthly_budget: Money
    month_to_date_spend: Money = Field(description="Usage posted this calendar month (UTC).")
    budget_remaining: Money
    idle_notice_hours: float = Field(description="The owner of a ready cluster here is told after this many idle hours "
                                             "(0.5: half an hour); 0: never.")
    current: bool = Field(description="The environment this request acts in (X-Environment or the default).")


class Workspace(Schema):
    id: int
    name: str
    role: str = Field(description="The key's creator's role there: owner, manager or developer.")
    current: bool = Field(description="The workspace this request acts in: the key's own.")


class Instance(Schema):
    """A machine the workspace runs. Every instance is a node of a cluster and ends with it."""

    id: int
    name: str = Field(description="The node's name in its cluster, node-0 (the head) … node-N-1.")
    role: Annotated[str, enum(["head", "worker"])]
    status: str
    cluster_id: int
    cluster_name: str
    cluster_status: Annotated[str, enum(Status.values)]
    environment: str
    gpu: str
    gpus_per_machine: int
    machine_kind: Annotated[str, enum(MachineKind.values)]
    location: str
    private_ip: str | None
    price_per_hour: Money = Field(description="This machine's hourly price.")
    billing_started_at: OptionalTimestamp
    replaces_instance_id: int | None = Field(
        description="Set while this machine is being swapped in for that instance (same name and private address).")
    health: Annotated[str, enum(NodeHealth.values)] = Field(
        description="What the periodic health check last found (unknown until a ready cluster's first check).")
    ssh: str | None = Field(description="The Connect card's ssh line for this machine, once its cluster is ready or "
                                        "degraded (none for a machine being swapped in).")

    @staticmethod
    def resolve_status(node: Any) -> str:
        return node.state

    # What GET /clusters/{id} says of the node.
    resolve_ssh = staticmethod(Node.resolve_ssh)
    resolve_health = staticmethod(Node.resolve_health)

    @staticmethod
    def resolve_replaces_instance_id(node: Any) -> int | None:
        return node.replacing_id if node.is_replacement else None

    @staticmethod
    def resolve_cluster_name(node: Any) -> str:
        return node.cluster.name

    @staticmethod
    def resolve_cluster_status(node: Any) -> str:
        return node.cluster.status

    @staticmethod
    def resolve_environment(node: Any) -> str:
        return node.cluster.environment.name

    @staticmethod
    def resolve_gpu(node: Any) -> str:
        return node.cluster.machine_type.gpu.slug

    @staticmethod
    def resolve_gpus_per_machine(node: Any) -> int:
        return node.cluster.machine_type.gpus_per_machine

    @staticmethod
    def resolve_machine_kind(node: Any) -> str:
        return node.cluster.machine_type.kind

    @staticmethod
    def resolve_location(node: Any) -> str:
        return node.cluster.machine_type.location.code

    @staticmethod
    def resolve_private_ip(node: Any) -> str | None:
        return node.private_ip if node.joined_at else None

    @staticmethod
    def resolve_price_per_hour(node: Any) -> Decimal:
        return node.cluster.price_per_machine_hour


# -- network tests ------------------------------------------------------------------------------


class NetworkTestPair(Schema):
    phase: Annotated[str, enum(["ring", "pairs", "nccl"])] = Field(
        description="ring: every node sent to the next at once; pairs: one pair per node at a time.")
    source: str = Field(description="The node that sent, e.g. node-0.")
    target: str = Field(description="The node that received.")
    gbps: float | None = Field(description="What iperf3 measured arriving, Gbit/s; null when it could not run.")
    latency_ms: float | None = Field(description="ping's average round trip over the private network.")
    slow: bool = Field(description="Under the test's expected_gbps.")
    error: str | None
    measured_at: Timestamp

    @staticmethod
    def resolve_source(pair: Any) -> str:
        return f"node-{pair.source_index}"

    @staticmethod
    def resolve_target(pair: Any) -> str:
        return f"node-{pair.target_index}"

    @staticmethod
    def resolve_error(pair: Any) -> str | None:
        return pair.error or None


class NetworkTestSummary(Schema):
    pairs_measured: int
    pairs_expected: int = Field(description="0 for nccl (measured as one all-reduce).")
    slow_pairs: int
    failed_pairs: int
    min_gbps: float | None
    max_gbps: float | None
    max_latency_ms: float | None
    nccl_peak_busbw_gbs: float | None = Field(description="all_reduce_perf's best bus bandwidth, GB/s.")


class NcclRow(Schema):
    size_bytes: int
    time_us: float
    algbw_gbs: float
    busbw_gbs: float


class NetworkTestItem(Schema):
    id: int
    cluster_id: int
    status: Annotated[str, enum(["queued", "running", "passed", "slow", "partial", "failed"])]
    trigger: Annotated[str, enum(NetworkTestModel.Trigger.values)]
    trigger_label: str = Field(description="What started the test, in words.")
    method: Annotated[str, enum(["iperf3", "nccl"])]
    requested_by: str
    expected_gbps: float = Field(description="A pair under this is slow (the offer promises about 1–2 Gbit/s).")
    nodes: list[str]
    created_at: Timestamp
    started_at: OptionalTimestamp
    finished_at: OptionalTimestamp
    detail: str | None
    summary: NetworkTestSummary

    @staticmethod
    def resolve_nodes(test: Any) -> list[str]:
        return list(test.node_names)

    @staticmethod
    def resolve_trigger_label(test: Any) -> str:
        return str(test.get_trigger_display())

    @staticmethod
    def resolve_detail(test: Any) -> str | None:
        return test.detail or None

    @staticmethod
    def resolve_summary(test: Any) -> dict[str, Any]:
        return card.summary(test)


class NetworkTest(NetworkTestItem):
    pairs: list[NetworkTestPair] = Field(description="Every measurement so far: rows fill in as pairs finish.")
    nccl: list[NcclRow] = Field(description="all_reduce_perf's bus bandwidth by message size (method nccl).")

    @staticmethod
    def resolve_pairs(test: Any) -> list[Any]:
        return list(test.pairs.all())

    @staticmethod
    def resolve_nccl(test: Any) -> list[Any]:
        return list(test.nccl_rows)


# -- webhooks -----------------------------------------------------------------------------------

WEBHOOK_EVENT_TYPES = [str(t) for t in _WEBHOOK_EVENTS]
WebhookEventType = Annotated[Text, enum(WEBHOOK_EVENT_TYPES)]


class WebhookEndpoint(Schema):
    id: int
    url: str
    description: str
    events: list[Annotated[str, enum(WEBHOOK_EVENT_TYPES)]]
    is_active: bool
    created_at: Timestamp


class WebhookEndpointWithSecret(WebhookEndpoint):
    secret: str = Field(description="The signing secret (whsec_…): HMAC-SHA256 key of Runcrate-Signature's v1.")


class CreateWebhookEndpoint(Body):
    url: Annotated[Text, Field(max_length=2000, description="An HTTPS URL on a public address.")]
    events: list[WebhookEventType] = Field(min_length=1, max_length=len(WEBHOOK_EVENT_TYPES))
    description: Annotated[Text, Field(max_length=200)] = ""


class UpdateWebhookEndpoint(Body):
    url: Annotated[Text, Field(max_length=2000)] | None = None
    events: list[WebhookEventType] | None = Field(None, min_length=1, max_length=len(WEBHOOK_EVENT_TYPES))
    description: Annotated[Text, Field(max_length=200)] | None = None
    is_active: bool | None = None


LOOPBACK_FIELD = Field(description="Sent to a loopback address (development only): the status code and response "
                                   "time are withheld and `error`/`last_error` give only the answer's class "
                                   "(2xx, 3xx, 4xx, 5xx or \"no answer\").")


class WebhookAttempt(Schema):
    at: Timestamp
    status_code: int | None
    response_ms: int | None
    error: str
    succeeded: bool
    to_loopback: bool = LOOPBACK_FIELD

    @staticmethod
    def resolve_status_code(attempt: Any) -> int | None:
        return None if attempt.to_loopback else attempt.status_code

    @staticmethod
    def resolve_response_ms(attempt: Any) -> int | None:
        return attempt.shown_response_ms

    @staticmethod
    def resolve_error(attempt: Any) -> str:
        return str(attempt.shown_answer) if attempt.to_loopback else str(attempt.error)


class WebhookDelivery(Schema):
    id: int
    event_id: str = Field(description="The event's id (evt_…), the same on every delivery and re-send of it.")
    event_type: str
    status: Annotated[str, enum(["pending", "succeeded", "failed"])]
    attempts: int
    last_status_code: int | None
    last_response_ms: int | None
    last_error: str
    next_attempt_at: OptionalTimestamp
    delivered_at: OptionalTimestamp
    manual: bool = Field(description="A re-send or a test event.")
    created_at: Timestamp
    attempt_log: list[WebhookAttempt]
    last_to_loopback: bool = LOOPBACK_FIELD

    @staticmethod
    def resolve_last_status_code(delivery: Any) -> int | None:
        return None if delivery.last_to_loopback else delivery.last_status_code

    @staticmethod
    def resolve_last_response_ms(delivery: Any) -> int | None:
        return delivery.shown_response_ms

    @staticmethod
    def resolve_last_error(delivery: Any) -> str:
        return str(delivery.shown_answer) if delivery.last_to_loopback else str(delivery.last_error)

    @staticmethod
    def resolve_event_id(delivery: Any) -> str:
        return delivery.event.public_id

    @staticmethod
    def resolve_event_type(delivery: Any) -> str:
        return delivery.event.type

    @staticmethod
    def resolve_attempt_log(delivery: Any) -> list[Any]:
        return list(delivery.attempt_log.all())


# -- metrics ------------------------------------------------------------------------------------


class MetricsQuery(Schema):
    since: str | None = Field(None, max_length=40, description="Seconds back from now (e.g. 900), or an ISO 8601 "
                              "time; default 15 minutes. Up to 7 days back (older points are dropped).")
    step: int | None = Field(None, ge=1, le=86400, description="Seconds per point: points are averaged into buckets "
                             "this wide. Under the coarse step (300 s) within the last hour: fine points (every round).")


class MetricPoint(Schema):
    at: Timestamp
    cpu_percent: float | None
    memory_percent: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    root_percent: float | None = Field(description="Used on / (percent).")
    shared_percent: float | None = Field(description="Used on /shared (percent).")
    net_rx_bps: float | None = Field(description="Bits per second received on wg0, the private network.")
    net_tx_bps: float | None
    load1: float | None
    gpu_percent: float | None = Field(description="Mean GPU utilisation; null without GPUs.")
    gpu_memory_used_bytes: float | None
    gpu_memory_total_bytes: float | None
    gpu_temperature_c: float | None = Field(description="The hottest GPU.")
    gpu_errors: float | None = Field(description="Uncorrected ECC errors, all GPUs.")


class NodeMetrics(Schema):
    node: str
    points: list[MetricPoint]


class ClusterMetrics(Schema):
    resolution: Annotated[str, enum(["fine", "coarse"])]
    step: int = Field(description="Seconds per point.")
    since: Timestamp
    nodes: list[NodeMetrics]


# -- members, invitations, API keys -------------------------------------------------------------

ROLES = ["owner", "manager", "developer"]


class Member(Schema):
    id: int = Field(description="The membership's id: what role changes and removals name.")
    user_id: int
    username: str
    email: str
    role: Annotated[str, enum(ROLES)]
    joined_at: Timestamp
    you: bool = Field(description="The key's creator.")


class ChangeRole(Body):
    role: Annotated[Text, Field(max_length=20, json_schema_extra={"enum": ROLES})]


class Invitation(Schema):
    id: int
    email: str
    role: Annotated[str, enum(ROLES)]
    status: Annotated[str, enum(["pending", "accepted", "revoked"])]
    invited_by: str | None = Field(description="The inviter's email (or username).")
    created_at: Timestamp
    expires_at: Timestamp


class CreateInvitation(Body):
    email: Annotated[Text, Field(max_length=254, json_schema_extra={"format": "email"})]
    role: Annotated[Text, Field(max_length=20, json_schema_extra={"enum": ROLES})] = "developer"


class ApiKeyItem(Schema):
    id: int
    name: str
    prefix: str = Field(description="The start of the key, to tell keys apart; the whole key is shown only once.")
    is_active: bool
    revoked: bool = Field(description="Revoked for good when its creator left the workspace.")
    created_by: str | None
    created_at: Timestamp
    last_used_at: OptionalTimestamp
    can_manage: bool = Field(description="Whether this key's creator may deactivate, reactivate or delete it "
                                         "(Owners, Managers and a key's own creator).")


class NewApiKey(ApiKeyItem):
    key: str = Field(description="The whole key: shown in this answer only, stored nowhere.")


class CreateApiKey(Body):
    name: Annotated[Text, Field(max_length=100, description="What uses it, e.g. 'laptop CLI'.")]


class UpdateApiKey(Body):
    is_active: bool


def _amount_text(value: Any) -> Any:
    # An amount may come as a JSON number; the dashboard's money field reads its text.
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return str(value)
    return value


def _hours(value: Any) -> str:
    """A number of hours as sent, a JSON number or its text; the form checks its range."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("Must be a number of hours, e.g. 2 or 0.5.")
    return str(value).strip()


Hours = Annotated[str, BeforeValidator(_hours), BeforeValidator(_no_nul),
                  WithJsonSchema({"type": ["number", "string"], "description": "Hours, e.g. 2 or 0.5."})]


AmountText = Annotated[str, BeforeValidator(_amount_text), BeforeValidator(_no_nul),
                       WithJsonSchema({"type": ["string", "number"], "description": "USD with the digits 0-9, e.g. \"500\" or \"12.50\"."})]


class CreateEnvironment(Body):
    name: Annotated[Text, Field(max_length=50, description="Letters, digits, hyphens and underscores.")]
    monthly_budget: Annotated[AmountText, Field(max_length=20)] = "1000"


class UpdateEnvironment(Body):
    monthly_budget: Annotated[AmountText, Field(max_length=20, description="Clusters here stop when the month's spend "
                                                "reaches it.")] | None = None
    idle_notice_hours: Hours | None = Field(None, description="Tell the owner after this many idle hours: 0 (never) to "
                                                              "168, in hundredths at most (0.5: half an hour).")


# -- quotas ---------------------------------------------------------------------------------------


class QuotaUse(Schema):
    who: str
    gpus_running: int
    spent_this_month: Money


class Quota(Schema):
    id: int
    applies_to: str = Field(description="A member's username, \"each <Role>\" or \"everyone together\".")
    member_id: int | None = Field(description="The membership it binds (GET /members), or null.")
    role: str | None
    environment_id: int | None = Field(description="null: every environment.")
    environment: str | None
    max_gpus: int | None = Field(description="GPUs running at once; null: no limit.")
    monthly_spend: Money | None = Field(description="Spend a calendar month (UTC); null: no limit.")
    in_use: list[QuotaUse] = Field(description="Per member it binds (each member of a role quota).")
    updated_at: Timestamp


class SetQuota(Body):
    member_id: Id | None = Field(None, description="One member (its id in GET /members).")
    role: Annotated[Text, Field(max_length=20, description="owner, manager or developer: each member with it.")] | None = None
    environment_id: Id | None = Field(None, description="One environment; leave out for every environment.")
    max_gpus: WholeNumber | None = Field(None, description="Most GPUs running at once.")
    monthly_spend: Annotated[AmountText, Field(max_length=20, description="Most spend a calendar month, USD.")] | None = None


# -- audit log ----------------------------------------------------------------------------------

AUDIT_SURFACES = ["page", "api", "cli", "mcp", "admin", "system"]
AUDIT_ACTOR_KINDS = ["member", "api_key", "operator", "system", "unverified"]


class AuditEvent(Schema):
    id: int
    created_at: Timestamp
    actor: str = Field(description="A username, an API key's prefix (rc_live_…), or Runcrate (the product itself).")
    actor_kind: Annotated[str, enum(AUDIT_ACTOR_KINDS)]
    surface: Annotated[str, enum(AUDIT_SURFACES)] = Field(description="Where the action came from.")
    client_address: str | None
    action: str = Field(description="What was done, e.g. cluster.terminate, member.role_change, account.sign_in.")
    object_type: str
    object_id: str
    object_label: str
    changes: dict[str, list[Any]] = Field(description="{field: [before, after]} of the fields that changed; "
                                                      "secrets are never recorded.")
    cluster_event_id: int | None = Field(description="The cluster event this action recorded, if any.")


class AuditQuery(Schema):
    actor: Annotated[Text, Field(max_length=150)] = Field("", description="A username or an API key's prefix.")
    action: Annotated[Text, Field(max_length=60)] = Field(
        "", description="An action (cluster.terminate) or every action on a kind of object (cluster).")
    object: Annotated[Text, Field(max_length=90)] = Field(
        "", description="A kind of object (cluster), or one object (cluster:12).")
    since: Annotated[Text, Field(max_length=40)] = Field("", description="From this date or time (ISO 8601, UTC by default).")
    until: Annotated[Text, Field(max_length=40)] = Field("", description="Before this date or time.")
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description=f"Entries per page (1–{MAX_LIMIT}, default {DEFAULT_LIMIT}).")
    cursor: Annotated[Text, Field(max_length=200)] = Field("", description="meta.next_cursor of the page before.")


class CursorMeta(Schema):
    limit: int
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page; null on the last page.")
