"""The `runcrate` command line: clusters, offers, billing and quotes over the JSON API.

Tables for people, `--json` for scripts (the API's `data`, unchanged), `-q` for ids only. Every API
error ends the command with one line on stderr and an exit code per kind of error:

    0 ok · 1 other (server error, unreachable, rate limited) · 2 usage / bad input (400)
    3 authentication or permission (401, 403, no key) · 4 payment (402) · 5 not found (404)
    6 conflict (409) · 7 `clusters watch`: the cluster ended failed, degraded or terminated
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, ClassVar, NoReturn

import click

from runcrate_client.api import (
    CONFIG_KEYS,
    ApiError,
    ClientConfig,
    ConfigError,
    Record,
    RuncrateClient,
    RuncrateError,
    TransportError,
    config_path,
    read_config_file,
    write_config_value,
)
from runcrate_client.formatting import (
    COMMUNITY_WARNING,
    cell,
    format_hours,
    format_money,
    format_time,
    mask_key,
    render_pairs,
    render_table,
)

EXIT_OK = 0
EXIT_OTHER = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_PAYMENT = 4
EXIT_NOT_FOUND = 5
EXIT_CONFLICT = 6
EXIT_CLUSTER_FAILED = 7

SOFTWARE_CHOICES = ("none", "slurm", "kubernetes", "ray")
READY = "ready"
FAILED_STATES = frozenset({"failed", "degraded", "terminated"})


def exit_code_for(error: BaseException) -> int:
    if isinstance(error, ApiError):
        return {
            400: EXIT_USAGE,
            401: EXIT_AUTH,
            403: EXIT_AUTH,
            402: EXIT_PAYMENT,
            404: EXIT_NOT_FOUND,
            409: EXIT_CONFLICT,
        }.get(error.status, EXIT_OTHER)
    if isinstance(error, ConfigError):
        return EXIT_AUTH
    return EXIT_OTHER


def error_line(error: BaseException) -> str:
    if isinstance(error, ApiError):
        code = f" {error.code}" if error.code else ""
        return f"Error ({error.status}{code}): {error}"
    return f"Error: {error}"


class RuncrateGroup(click.Group):
    """A group with command aliases (`ls`, `rm`) that turns client errors into one line and an exit code."""

    aliases: ClassVar[dict[str, str]] = {}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        return (command.name if command else name), command, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RuncrateError as error:
            click.echo(error_line(error), err=True)
            ctx.exit(exit_code_for(error))


class ClustersGroup(RuncrateGroup):
    aliases: ClassVar[dict[str, str]] = {"ls": "list", "rm": "delete"}


# -- shared plumbing ---------------------------------------------------------------------------


class State:
    def __init__(self, api_key: str | None, api_url: str | None, environment: str | None, timeout: float) -> None:
        self.overrides = {"api_key": api_key, "api_url": api_url, "environment": environment}
        self.timeout = timeout
        self._client: RuncrateClient | None = None

    def config(self) -> ClientConfig:
        return ClientConfig.resolve(
            api_key=self.overrides["api_key"], api_url=self.overrides["api_url"],
            environment=self.overrides["environment"],
        )

    def client(self) -> RuncrateClient:
        if self._client is None:
            self._client = RuncrateClient.from_config(self.config(), timeout=self.timeout)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


pass_state = click.make_pass_decorator(State)


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print the API's data as JSON (for scripts).")(fn)


def quiet_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("-q", "--quiet", is_flag=True, help="Print ids only, one a line.")(fn)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


# -- root --------------------------------------------------------------------------------------


@click.group(cls=RuncrateGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--api-key", help="API key (rc_live_…). Default: $RUNCRATE_API_KEY or the config file.")
@click.option("--api-url", help="API base URL. Default: $RUNCRATE_API_URL, the config file, http://127.0.0.1:8000.")
@click.option("-e", "--environment", help="Environment name or id (X-Environment). Default: $RUNCRATE_ENVIRONMENT.")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for each API answer.")
@click.version_option("0.1.0", prog_name="runcrate")
@click.pass_context
def main(ctx: click.Context, api_key: str | None, api_url: str | None, environment: str | None, timeout: float) -> None:
    """Runcrate Clusters: GPU clusters from the command line.

    \b
    Exit codes: 0 ok, 1 other error, 2 usage/bad input, 3 auth, 4 payment,
    5 not found, 6 conflict, 7 watched cluster failed/degraded/terminated.
    """
    state = State(api_key, api_url, environment, timeout)
    ctx.obj = state
    ctx.call_on_close(state.close)


# -- config ------------------------------------------------------------------------------------


@main.group(cls=RuncrateGroup)
def config() -> None:
    """Read and write ~/.runcrate/config.yaml (or $RUNCRATE_CONFIG)."""


@config.command("set")
@click.argument("key", type=click.Choice([*CONFIG_KEYS, *(k.replace("_", "-") for k in CONFIG_KEYS)]))
@click.argument("value")
def config_set(key: str, value: str) -> None:
    """Save a setting: api_key, api_url or environment."""
    path = write_config_value(key, value)
    shown = mask_key(value) if key.replace("-", "_") == "api_key" else value
    click.echo(f"Saved {key.replace('-', '_')} = {shown} in {path}")


@config.command("unset")
@click.argument("key", type=click.Choice(list(CONFIG_KEYS)))
def config_unset(key: str) -> None:
    """Remove a setting from the config file."""
    path = write_config_value(key, None)
    click.echo(f"Removed {key} from {path}")


@config.command("show")
@json_option
@pass_state
def config_show(state: State, as_json: bool) -> None:
    """Show the settings in effect and where each one comes from."""
    resolved = state.config()
    values = {"api_key": mask_key(resolved.api_key) if resolved.api_key else None,
              "api_url": resolved.api_url, "environment": resolved.environment}
    if as_json:
        print_json({"config_file": str(config_path()), "values": values, "sources": resolved.sources})
        return
    path = config_path()
    click.echo(f"Config file: {path}{'' if path.exists() else ' (not created yet)'}")
    rows = [(key, values[key] or "-", resolved.sources.get(key, "default")) for key in CONFIG_KEYS]
    click.echo(render_table(["SETTING", "VALUE", "FROM"], rows))
    if not read_config_file(path) and not resolved.api_key:
        click.echo("\nNo API key yet: make one on the Keys page, then `runcrate config set api_key rc_live_...`.")


# -- catalogue ---------------------------------------------------------------------------------


@main.command("gpu-types")
@json_option
@quiet_option
@pass_state
def gpu_types(state: State, as_json: bool, quiet: bool) -> None:
    """List the GPU models clusters can be made of."""
    items = state.client().list_gpu_types().items
    if as_json:
        return print_json(items)
    if quiet:
        for item in items:
            click.echo(item.get("name") or item.get("id"))
        return
    if not items:
        return click.echo("No GPU types.")
    click.echo(generic_table(items, preferred=("name", "id", "vendor", "memory_gb", "memory", "description")))


def listed_for_scripts(items: list[Record], *, as_json: bool, quiet: bool, empty: str) -> bool:
    """Print a list as JSON, as ids, or the message for no items; False when a table is wanted."""
    if as_json:
        print_json(items)
    elif quiet:
        for item in items:
            click.echo(item.get("id"))
    elif not items:
        click.echo(empty)
    else:
        return False
    return True


def generic_table(items: list[Record], preferred: Iterable[str] = ()) -> str:
    """A table of the scalar fields of records whose exact shape the contract does not pin down."""
    keys: list[str] = [k for k in preferred if any(k in item for item in items)]
    for item in items:
        for key, value in item.items():
            if key not in keys and not isinstance(value, (dict, list)):
                keys.append(key)
    rows = [[item.get(k) for k in keys] for item in items]
    return render_table([k.upper().replace("_", " ") for k in keys], rows)


# -- clusters ----------------------------------------------------------------------------------


@main.group(cls=ClustersGroup)
def clusters() -> None:
    """Find offers, create, follow and terminate clusters. Aliases: ls = list, rm = delete."""


@clusters.command("offers")
@click.option("--gpu", help="GPU model, e.g. H100.")
@click.option("--machines", type=click.IntRange(2, 64), help="How many machines (2..64).")
@click.option("--include-community", is_flag=True, help="Also list community hosts (independent operators).")
@json_option
@quiet_option
@pass_state
def clusters_offers(
    state: State, gpu: str | None, machines: int | None, include_community: bool, as_json: bool, quiet: bool
) -> None:
    """Offers that can start now for this many machines, cheapest whole cluster first."""
    items = state.client().list_cluster_offers(gpu=gpu, machines=machines, include_community=include_community).items
    if as_json:
        return print_json(items)
    if quiet:
        for item in items:
            click.echo(item.get("id"))
        return
    if not items:
        size = f" for {machines} machines" if machines else ""
        return click.echo(f"No offers can start now{size}. Try fewer machines, another GPU, or `runcrate quote`.")
    click.echo(offers_table(items))
    if any(item.get("community") for item in items):
        click.echo("\n" + COMMUNITY_WARNING)


def offers_table(items: list[Record]) -> str:
    rows = []
    for item in items:
        rows.append([
            item.get("id"),
            item.get("gpu"),
            item.get("gpus_per_machine"),
            item.get("machine_kind"),
            item.get("location"),
            item.get("interconnect"),
            item.get("available_machines"),
            format_money(item.get("price_per_cluster_hour")) + "/h",
            format_money(item.get("price_per_machine_hour")) + "/h",
            item.get("software"),
            "! community" if item.get("community") else "",
        ])
    headers = ["ID", "GPU", "GPUS/MACHINE", "KIND", "LOCATION", "INTERCONNECT", "AVAILABLE",
               "CLUSTER", "PER MACHINE", "SOFTWARE", ""]
    return render_table(headers, rows, right={2, 6, 7, 8})


@clusters.command("create")
@click.option("--name", required=True, help="A name for the cluster.")
@click.option("--offer", "offer_id", required=True, help="Offer id from `runcrate clusters offers`.")
@click.option("--machines", required=True, type=click.IntRange(2, 64), help="How many machines (2..64).")
@click.option("--software", type=click.Choice(SOFTWARE_CHOICES, case_sensitive=False), default="none",
              show_default=True, help="Software to install on every node.")
@click.option("--volume", "volume_id", help="Volume id to sync into /shared/volume on the head node.")
@click.option("--ssh-key", "ssh_key_ids", multiple=True, help="SSH key id to install (repeatable).")
@click.option("--idempotency-key", help="Makes a retried create return the first result. Default: a fresh one.")
@click.option("--watch", "then_watch", is_flag=True, help="Follow the cluster until it is ready or fails.")
@json_option
@quiet_option
@pass_state
def clusters_create(
    state: State, name: str, offer_id: str, machines: int, software: str, volume_id: str | None,
    ssh_key_ids: tuple[str, ...], idempotency_key: str | None, then_watch: bool, as_json: bool, quiet: bool,
) -> None:
    """Reserve every machine of an offer at once and start a cluster.

    Billing starts when every machine has joined; a cluster that never gets there costs nothing.
    """
    key = idempotency_key or str(uuid.uuid4())
    try:
        cluster = state.client().create_cluster(
            name=name, offer_id=offer_id, machines=machines, software=software.lower(),
            volume_id=volume_id, ssh_key_ids=list(ssh_key_ids), idempotency_key=key,
        )
    except TransportError as error:
        # The request may have reached the server: the same key makes a rerun safe.
        raise TransportError(f"{error}. If unsure whether it was created, rerun with --idempotency-key {key}") from error
    if as_json:
        print_json(cluster)
    elif quiet:
        click.echo(cluster.get("id"))
    else:
        click.echo(
            f"Created cluster {cluster.get('id')} ({cluster.get('name')}): {machines} machines, "
            f"status {cluster.get('status')}, {format_money(cluster.get('price_per_hour'))}/h once every machine is up."
        )
        if not then_watch:
            click.echo(f"Follow it with: runcrate clusters watch {cluster.get('id')}")
    if then_watch:
        sys.exit(watch_cluster(state.client(), str(cluster.get("id")), interval=2.0, timeout=0, quiet=as_json or quiet))


@clusters.command("list")
@json_option
@quiet_option
@pass_state
def clusters_list(state: State, as_json: bool, quiet: bool) -> None:
    """Clusters in the environment, newest first."""
    items = state.client().all_clusters()
    if listed_for_scripts(items, as_json=as_json, quiet=quiet,
                          empty="No clusters. Find an offer with `runcrate clusters offers --gpu H100 --machines 2`."):
        return
    rows = [
        [c.get("id"), c.get("name"), c.get("status"), machine_count(c), offer_gpu(c),
         format_money(c.get("price_per_hour")) + "/h", format_time(c.get("created_at"))]
        for c in items
    ]
    click.echo(render_table(["ID", "NAME", "STATUS", "MACHINES", "GPU", "PRICE", "CREATED"], rows, right={3, 5}))


def machine_count(cluster: Record) -> Any:
    machines = cluster.get("machines")
    if isinstance(machines, list):
        return len(machines)
    if machines is None and isinstance(cluster.get("nodes"), list):
        return len(cluster["nodes"])
    return machines


def offer_gpu(cluster: Record) -> Any:
    offer = cluster.get("offer")
    if isinstance(offer, dict):
        gpu = offer.get("gpu")
        per = offer.get("gpus_per_machine")
        return f"{per}x {gpu}" if gpu and per else gpu
    return cluster.get("gpu")


@clusters.command("info")
@click.argument("cluster_id")
@json_option
@pass_state
def clusters_info(state: State, cluster_id: str, as_json: bool) -> None:
    """A cluster, its nodes and their private addresses."""
    cluster = state.client().get_cluster(cluster_id)
    if as_json:
        return print_json(cluster)
    click.echo(cluster_summary(cluster))


def cluster_summary(cluster: Record) -> str:
    offer = cluster.get("offer")
    pairs: list[tuple[str, Any]] = [
        ("ID", cluster.get("id")),
        ("Name", cluster.get("name")),
        ("Status", cluster.get("status")),
    ]
    if cluster.get("termination_reason"):
        pairs.append(("Termination reason", cluster.get("termination_reason")))
    pairs += [
        ("Environment", cluster.get("environment")),
        ("Machines", machine_count(cluster)),
        ("GPU", offer_gpu(cluster)),
    ]
    if isinstance(offer, dict):
        pairs += [("Location", offer.get("location")), ("Machine kind", offer.get("machine_kind")),
                  ("Interconnect", offer.get("interconnect"))]
        if offer.get("community"):
            pairs.append(("Community", COMMUNITY_WARNING.removeprefix("! community: ")))
    elif offer:
        pairs.append(("Offer", offer))
    pairs += [
        ("Software", cluster.get("software")),
        ("Price", format_money(cluster.get("price_per_hour")) + "/h"),
        ("Billing started", format_time(cluster.get("billing_started_at"))),
        ("Created", format_time(cluster.get("created_at"))),
    ]
    text = render_pairs(pairs)
    nodes = cluster.get("nodes") or []
    if nodes:
        rows = [[n.get("name"), n.get("role"), n.get("status"), n.get("private_ip")] for n in nodes]
        text += "\n\n" + render_table(["NODE", "ROLE", "STATUS", "PRIVATE IP"], rows)
    return text


@clusters.command("events")
@click.argument("cluster_id")
@json_option
@pass_state
def clusters_events(state: State, cluster_id: str, as_json: bool) -> None:
    """What happened to a cluster, oldest first."""
    items = state.client().all_cluster_events(cluster_id)
    items.sort(key=lambda e: str(e.get("created_at") or ""))
    if as_json:
        return print_json(items)
    if not items:
        return click.echo("No events yet.")
    rows = [[format_time(e.get("created_at")), e.get("actor"), e.get("event"), event_text(e)] for e in items]
    click.echo(render_table(["TIME", "ACTOR", "EVENT", "MESSAGE"], rows))


def event_text(event: Record) -> str:
    message = cell(event.get("message"))
    reason = event.get("reason")
    return f"{message} ({reason})" if reason else message


@clusters.command("watch")
@click.argument("cluster_id")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between polls.")
@click.option("--timeout", default=0.0, show_default=True, help="Give up after this many seconds (0: never).")
@json_option
@pass_state
def clusters_watch(state: State, cluster_id: str, interval: float, timeout: float, as_json: bool) -> None:
    """Follow a cluster until it is ready (exit 0) or failed/degraded/terminated (exit 7)."""
    code = watch_cluster(state.client(), cluster_id, interval=interval, timeout=timeout, quiet=as_json)
    if as_json:
        print_json(state.client().get_cluster(cluster_id))
    sys.exit(code)


def watch_cluster(client: RuncrateClient, cluster_id: str, interval: float, timeout: float, quiet: bool = False) -> int:
    """Poll a cluster, printing each change of cluster or node status and each new event.

    Prints changes only (never redraws), so the output reads the same in a terminal, a log or a pipe.
    """
    say: Callable[[str], None] = (lambda _: None) if quiet else click.echo
    started = time.monotonic()
    node_status: dict[str, str] = {}
    cluster_status: str | None = None
    seen_events: set[tuple[str, str, str]] = set()
    while True:
        cluster = client.get_cluster(cluster_id)
        status = str(cluster.get("status"))
        if status != cluster_status:
            total = machine_count(cluster)
            say(f"{_now()}  cluster {cluster.get('name') or cluster_id}: {cluster_status or '…'} -> {status}"
                + (f" ({total} machines)" if total else ""))
            cluster_status = status
        for node in cluster.get("nodes") or []:
            name = str(node.get("name"))
            current = str(node.get("status"))
            if node_status.get(name) != current:
                ip = f" {node['private_ip']}" if node.get("private_ip") else ""
                say(f"{_now()}    {name:<8} {node.get('role') or '':<6} {node_status.get(name, '…')} -> {current}{ip}")
                node_status[name] = current
        try:
            events = client.cluster_events(cluster_id).items
        except ApiError:
            events = []
        for event in sorted(events, key=lambda e: str(e.get("created_at") or "")):
            key = (str(event.get("created_at")), str(event.get("event")), str(event.get("message")))
            if key not in seen_events:
                seen_events.add(key)
                say(f"{format_time(event.get('created_at'))}  [{event.get('event')}] {event_text(event)}")
        if status == READY:
            ready = sum(1 for s in node_status.values() if s == READY)
            say(f"Cluster {cluster.get('name') or cluster_id} is ready"
                + (f" ({ready}/{len(node_status)} nodes ready)" if ready else "")
                + f"; billing since {format_time(cluster.get('billing_started_at'))}.")
            return EXIT_OK
        if status in FAILED_STATES:
            reason = cluster.get("termination_reason")
            hint = {
                "degraded": f"machines stay up and billed: `runcrate clusters retry-install {cluster_id}` "
                            f"or `runcrate clusters delete {cluster_id}`",
                "failed": "every machine was released; nothing was billed",
            }.get(status, "")
            say(f"Cluster {cluster.get('name') or cluster_id} is {status}"
                + (f" ({reason})" if reason else "") + (f": {hint}" if hint else "."))
            return EXIT_CLUSTER_FAILED
        if timeout and time.monotonic() - started > timeout:
            say(f"Gave up after {timeout:g}s; the cluster is still {status}.")
            return EXIT_OTHER
        time.sleep(interval)


def _now() -> str:
    return datetime.now().strftime("%H:%M:%S")


@clusters.command("delete")
@click.argument("cluster_id")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@pass_state
def clusters_delete(state: State, cluster_id: str, yes: bool, as_json: bool) -> None:
    """Terminate a cluster: every machine stops and billing ends. Alias: rm."""
    client = state.client()
    if not yes:
        cluster = client.get_cluster(cluster_id)
        if not sys.stdin.isatty():
            fail("refusing to terminate without confirmation; pass --yes", EXIT_USAGE)
        question = (f"Terminate cluster {cluster.get('name')} ({cluster_id}), all {machine_count(cluster)} machines? "
                    "Their disks are lost and billing stops")
        if not click.confirm(question, default=False):
            fail("not terminated", EXIT_OTHER)
    result = client.delete_cluster(cluster_id)
    if as_json:
        return print_json(result)
    status = (result or {}).get("status", "terminating") if isinstance(result, dict) else "terminating"
    click.echo(f"Terminating cluster {cluster_id} (status {status}); billing stops for every machine.")


@clusters.command("retry-install")
@click.argument("cluster_id")
@json_option
@pass_state
def clusters_retry_install(state: State, cluster_id: str, as_json: bool) -> None:
    """Install the software again on a degraded cluster."""
    result = state.client().retry_install(cluster_id)
    if as_json:
        return print_json(result)
    click.echo(f"Retrying the install on cluster {cluster_id}. Follow it with: runcrate clusters watch {cluster_id}")


@clusters.command("add-worker")
@click.argument("cluster_id")
@click.option("--count", default=1, show_default=True, type=click.IntRange(min=1), help="How many workers to add (the server knows the limit).")
@json_option
@pass_state
def clusters_add_worker(state: State, cluster_id: str, count: int, as_json: bool) -> None:
    """Add worker machines to a running cluster; each is billed from the moment it is up."""
    result = state.client().add_workers(cluster_id, count)
    if as_json:
        return print_json(result)
    click.echo(f"Adding {count} worker{'s' if count != 1 else ''} to cluster {cluster_id}.")


@clusters.command("terminate-node")
@click.argument("cluster_id")
@click.argument("node_name")
@pass_state
def clusters_terminate_node(state: State, cluster_id: str, node_name: str) -> None:
    """Ask to stop one node. The API refuses: a node ends with its cluster (exit 6)."""
    state.client().terminate_node(cluster_id, node_name)
    click.echo(f"Node {node_name} of cluster {cluster_id} is terminating.")


# -- billing -----------------------------------------------------------------------------------


@main.group(cls=RuncrateGroup)
def volumes() -> None:
    """Volumes: data kept between clusters, synced into /shared/volume on node-0."""


@volumes.command("list")
@json_option
@quiet_option
@pass_state
def volumes_list(state: State, as_json: bool, quiet: bool) -> None:
    """The environment's volumes."""
    items = state.client().list_volumes()
    if listed_for_scripts(items, as_json=as_json, quiet=quiet,
                          empty="No volumes. Create one with: runcrate volumes create NAME --size-gb 500"):
        return
    click.echo(generic_table(items, preferred=("id", "name", "size_gb", "environment", "created_at")))


@volumes.command("create")
@click.argument("name")
@click.option("--size-gb", type=click.IntRange(1, 100_000), required=True, help="Size in GB.")
@json_option
@pass_state
def volumes_create(state: State, name: str, size_gb: int, as_json: bool) -> None:
    """Create a volume; attach it with `clusters create --volume ID`."""
    volume = state.client().create_volume(name, size_gb)
    if as_json:
        return print_json(volume)
    click.echo(f"Created volume {volume.get('name')} (id {volume.get('id')}, {volume.get('size_gb')} GB).")


@volumes.command("delete")
@click.argument("volume_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def volumes_delete(state: State, volume_id: str, yes: bool) -> None:
    """Delete a volume and its data (refused while a live cluster uses it)."""
    if not yes:
        click.confirm(f"Delete volume {volume_id} and its data?", abort=True)
    state.client().delete_volume(volume_id)
    click.echo(f"Deleted volume {volume_id}.")


@main.group(cls=RuncrateGroup)
def billing() -> None:
    """Credits, burn rate and usage per cluster."""


@billing.command("balance")
@json_option
@pass_state
def billing_balance(state: State, as_json: bool) -> None:
    """Credits left, what running clusters cost per hour, and how long that lasts."""
    data = state.client().billing_balance()
    if as_json:
        return print_json(data)
    hours = data.get("hours_remaining")
    pairs: list[tuple[str, Any]] = [
        ("Credits", format_money(data.get("credits_balance"))),
        ("Running clusters cost", format_money(data.get("active_usage_cost_per_hour")) + "/h"),
        ("Hours remaining", format_hours(hours) if hours is not None else "- (nothing running)"),
    ]
    for key in ("monthly_budget", "budget_remaining", "monthly_budget_remaining"):
        if data.get(key) is not None:
            pairs.append((key.replace("_", " ").capitalize(), format_money(data[key])))
    click.echo(render_pairs(pairs))


@billing.command("usage")
@click.option("--month", help="YYYY-MM (default: this month).")
@json_option
@pass_state
def billing_usage(state: State, month: str | None, as_json: bool) -> None:
    """One line per cluster ("Cluster usage <name>") with a row per machine under it."""
    if month:
        try:
            datetime.strptime(month, "%Y-%m")
        except ValueError:
            fail(f"--month must look like 2025-01, not {month!r}")
    items = list(state.client().iterate("/billing/usage", {"month": month}))
    if as_json:
        return print_json(items)
    if not items:
        return click.echo(f"No usage{' in ' + month if month else ' this month'}.")
    click.echo(usage_table(items))


def usage_table(items: list[Record]) -> str:
    """Cluster lines flush left, their machine rows indented under them, every column aligned."""
    from decimal import Decimal, InvalidOperation

    rows: list[list[Any]] = []
    total = Decimal(0)
    for item in items:
        rows.append([item.get("description") or f"Cluster usage {item.get('cluster_id')}", "", "", "", "", "",
                     format_money(item.get("amount"))])
        try:
            total += Decimal(str(item.get("amount") or "0"))
        except InvalidOperation:
            pass
        for row in item.get("rows") or []:
            rows.append([
                "    " + cell(row.get("node")), row.get("gpu"), format_time(row.get("start")),
                format_time(row.get("end")) if row.get("end") else "running",
                format_hours(row.get("hours")), format_money(row.get("rate")) + "/h", format_money(row.get("amount")),
            ])
    rows.append(["Total", "", "", "", "", "", format_money(total)])
    return render_table(["DESCRIPTION", "GPU", "START", "END", "HOURS", "RATE", "AMOUNT"], rows, right={4, 5, 6})


# -- quotes ------------------------------------------------------------------------------------


@main.command("quote")
@click.option("--contact-name", required=True)
@click.option("--email", required=True)
@click.option("--company")
@click.option("--gpu", required=True, help="GPU model, e.g. H100.")
@click.option("--machines", required=True, type=int, help="How many machines.")
@click.option("--network", help="Interconnect wanted, e.g. infiniband, roce, ethernet.")
@click.option("--term", help="e.g. reserved or on_demand.")
@click.option("--term-months", type=int)
@click.option("--start-date", help="YYYY-MM-DD.")
@click.option("--notes")
@json_option
@pass_state
def quote(state: State, as_json: bool, **fields: Any) -> None:
    """Request a quote: reserved capacity, very large clusters, InfiniBand/RoCE."""
    result = state.client().request_quote(**fields)
    if as_json:
        return print_json(result)
    ident = f" {result.get('id')}" if isinstance(result, dict) and result.get("id") else ""
    click.echo(f"Quote request{ident} sent; we will answer at {fields['email']}.")


# -- MCP ---------------------------------------------------------------------------------------


@main.command("mcp")
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True, type=int)
@pass_state
def mcp_command(state: State, use_http: bool, host: str, port: int) -> None:
    """Run the MCP server for agents, acting in one environment with this key."""
    from runcrate_client.mcp_server import serve

    serve(state.config(), http=use_http, host=host, port=port)


if __name__ == "__main__":
    main(prog_name="runcrate")
