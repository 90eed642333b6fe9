"""runcrate clusters: offers, plan/create, follow, grow, terminate."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import click

from runcrate_client.api import (
    ApiError,
    Record,
    TransportError,
)
from runcrate_client.cli.base import (
    EXIT_AUTH,
    EXIT_CLUSTER_FAILED,
    EXIT_CONFLICT,
    EXIT_OK,
    EXIT_OTHER,
    EXIT_PAYMENT,
    EXIT_USAGE,
    FAILED_STATES,
    READY,
    SOFTWARE_CHOICES,
    ClustersGroup,
    State,
    fail,
    json_option,
    listed_for_scripts,
    main,
    pass_state,
    print_json,
    quiet_option,
)
from runcrate_client.client import Client
from runcrate_client.formatting import (
    COMMUNITY_WARNING,
    cell,
    format_hours,
    format_money,
    format_time,
    render_pairs,
    render_table,
)


@main.group(cls=ClustersGroup)
def clusters() -> None:
    """Find offers, create, follow and terminate clusters. Aliases: ls = list, rm = delete."""


@clusters.command("offers")
@click.option("--gpu", help="GPU model, e.g. H100.")
@click.option("--machines", type=int, help="How many machines (the server checks the size).")
@click.option("--include-community", is_flag=True, help="Also list community hosts (independent operators).")
@json_option
@quiet_option
@pass_state
def clusters_offers(
    state: State, gpu: str | None, machines: int | None, include_community: bool, as_json: bool, quiet: bool
) -> None:
    """Offers that can start now for this many machines, cheapest whole cluster first."""
    offers = state.client().catalogue.list_cluster_offers(gpu=gpu, machines=machines, include_community=include_community)
    items = offers.items
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
    facts = image_lines(items)
    if facts:
        click.echo("\nImages (* the default; pick one with `clusters create --image`):\n" + "\n".join(f"  {line}" for line in facts))
    if offers.meta.get("network_caveat"):
        # INTERCONNECT is each machine's own link; between machines it is the private network.
        click.echo("\n" + str(offers.meta["network_caveat"]))
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
            image_names(item),
            "! community" if item.get("community") else "",
        ])
    headers = ["ID", "GPU", "GPUS/MACHINE", "KIND", "LOCATION", "INTERCONNECT", "AVAILABLE",
               "CLUSTER", "PER MACHINE", "SOFTWARE", "IMAGES", ""]
    return render_table(headers, rows, right={2, 6, 7, 8})


def image_names(offer: Record) -> str:
    """The offer's images, its default marked: "base, pytorch*"; "-" when it starts none."""
    images = offer.get("images")
    if not images:
        return "-"
    default = offer.get("default_image")
    return ", ".join(f"{image.get('name')}*" if image.get("name") == default else str(image.get("name"))
                     for image in images)


def image_lines(offers: list[Record]) -> list[str]:
    """Each image's facts once, as the offers list them (OS, Python, PyTorch, CUDA)."""
    seen: dict[str, str] = {}
    for offer in offers:
        for image in offer.get("images") or []:
            seen.setdefault(f"{image.get('name')}: {image.get('summary')}", "")
    return list(seen)


@clusters.command("create")
@click.option("--name", required=True, help="A name for the cluster.")
@click.option("--offer", "offer_id", required=True, help="Offer id from `runcrate clusters offers`.")
@click.option("--machines", required=True, type=int, help="How many machines (the server checks the size).")
@click.option("--software", type=click.Choice(SOFTWARE_CHOICES, case_sensitive=False), default="none",
              show_default=True, help="Software to install on every node.")
@click.option("--image", help="Machine image every node boots from (the offer's IMAGES in `clusters offers`). "
                              "Default: pytorch where the offer has it, else the offer's first.")
@click.option("--volume", "volume_id", help="Volume id to sync into /shared/volume on the head node.")
@click.option("--ssh-key", "ssh_key_ids", multiple=True,
              help="SSH key id to install (repeatable). Default: every key of the workspace.")
@click.option("--idempotency-key", help="Makes a retried create return the first result. Default: a fresh one.")
@click.option("--watch", "then_watch", is_flag=True, help="Follow the cluster until it is ready or fails.")
@click.option("--dry-run", is_flag=True, help="Only check and price it (the server's plan): nothing is reserved.")
@json_option
@quiet_option
@pass_state
def clusters_create(
    state: State, name: str, offer_id: str, machines: int, software: str, image: str | None, volume_id: str | None,
    ssh_key_ids: tuple[str, ...], idempotency_key: str | None, then_watch: bool, dry_run: bool, as_json: bool,
    quiet: bool,
) -> None:
    """Reserve every machine of an offer at once and start a cluster.

    Billing starts when every machine has joined; a cluster that never gets there costs nothing.
    With --dry-run the server checks and prices it exactly as it would create it, and nothing is reserved.
    """
    if dry_run:
        plan = state.client().clusters.plan(name=name, offer_id=offer_id, machines=machines, software=software.lower(),
                                           image=image, volume_id=volume_id, ssh_key_ids=list(ssh_key_ids) or None)
        if as_json:
            print_json(plan)
        else:
            click.echo(plan_summary(plan))
        sys.exit(plan_exit_code(plan))
    key = idempotency_key or str(uuid.uuid4())
    try:
        cluster = state.client().clusters.create(
            name=name, offer_id=offer_id, machines=machines, software=software.lower(), image=image,
            volume_id=volume_id, ssh_key_ids=list(ssh_key_ids) or None, idempotency_key=key,
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
            f"Created cluster {cluster.get('id')} ({cluster.get('name')}): {machines} machines"
            f"{', image ' + str(cluster['image']) if cluster.get('image') else ''}, status {cluster.get('status')}, {format_money(cluster.get('price_per_hour'))}/h once every machine is up."
        )
        if not then_watch:
            click.echo(f"Follow it with: runcrate clusters watch {cluster.get('id')}")
    if then_watch:
        sys.exit(watch_cluster(state.client(), str(cluster.get("id")), interval=2.0, timeout=0, quiet=as_json or quiet))


# Exit codes of a plan that a create would refuse, like the create's own answer would set them.
PLAN_EXIT_CODES = {"insufficient_credits": EXIT_PAYMENT, "budget_reached": EXIT_PAYMENT,
                   "quota_gpus": EXIT_AUTH, "quota_spend": EXIT_AUTH,
                   "offer_unavailable": EXIT_CONFLICT, "name_taken": EXIT_CONFLICT}


def plan_exit_code(plan: Record) -> int:
    problems = plan.get("problems") or []
    if not problems:
        return EXIT_OK
    return PLAN_EXIT_CODES.get(str(problems[0].get("code")), EXIT_USAGE)


def quota_line(quota: Record) -> str:
    parts = []
    if quota.get("max_gpus") is not None:
        parts.append(f"{quota.get('gpus_in_use')} of {quota.get('max_gpus')} GPUs running, "
                     f"{quota.get('gpus_after_create')} after create")
    if quota.get("monthly_spend") is not None:
        parts.append(f"{format_money(quota.get('spent'))} of {format_money(quota.get('monthly_spend'))} spent this month")
    return "; ".join(parts)


def plan_image(plan: Record) -> str:
    """The image a create would boot, with its facts where the offer lists it."""
    name = plan.get("image")
    if not name:
        return "-"
    facts = next((image for image in plan.get("images") or [] if image.get("name") == name), None)
    return f"{name} ({facts.get('summary')})" if facts else str(name)


def plan_summary(plan: Record) -> str:
    offer = plan.get("offer") or {}
    balance, budget, runway = plan.get("balance") or {}, plan.get("budget") or {}, plan.get("runway") or {}
    pairs: list[tuple[str, Any]] = [
        ("Can create", "yes" if plan.get("can_create") else "no"),
        ("Offer", f"{offer.get('gpus_per_machine')}x {offer.get('gpu')} {offer.get('machine_kind')} in "
                  f"{offer.get('location')}" if offer else "-"),
        ("Machines", f"{plan.get('machines')} ({plan.get('available_machines')} free now)"),
        ("Software", plan.get("software")),
        ("Image", plan_image(plan)),
        ("SSH keys", f"{', '.join(str(i) for i in plan['ssh_key_ids']) or 'none'} on every node"
                     if "ssh_key_ids" in plan else "-"),
        ("Price", f"{format_money(plan.get('price_per_hour'))}/h for the whole cluster "
                  f"({format_money(plan.get('price_per_machine_hour'))}/h per machine)"),
        ("Balance", f"{format_money(balance.get('credits_balance'))} (needs {format_money(balance.get('required'))})"),
        ("Budget left", f"{format_money(budget.get('remaining'))} of {format_money(budget.get('monthly_budget'))} this month"),
        ("Runway after create", (f"{format_hours(runway.get('hours'))} at "
                                 f"{format_money(runway.get('per_hour_after_create'))}/h for everything running")
                                if runway.get("hours") is not None else "-"),
    ]
    pairs += [(f"Quota ({q.get('applies_to')})", quota_line(q)) for q in plan.get("quotas") or []]
    lines = [render_pairs(pairs)]
    lines += [f"Warning: {w}" for w in plan.get("warnings") or []]
    lines += [f"Refused ({p.get('code')}): {p.get('message')}" for p in plan.get("problems") or []]
    if plan.get("can_create"):
        lines.append("Nothing was reserved. Run the same command without --dry-run to create it.")
    return "\n".join(lines)


@clusters.command("list")
@json_option
@quiet_option
@pass_state
def clusters_list(state: State, as_json: bool, quiet: bool) -> None:
    """Clusters in the environment, newest first."""
    items = state.client().clusters.list_all()
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


def node_label(node: Record) -> str:
    """A node's name; a machine being swapped in shares it, and says so."""
    return f"{node.get('name')} (replacement)" if node.get("replacing") else str(node.get("name"))


def offer_gpu(cluster: Record) -> Any:
    offer = cluster.get("offer")
    if isinstance(offer, dict):
        gpu = offer.get("gpu")
        per = offer.get("gpus_per_machine")
        return f"{per}x {gpu}" if gpu and per else gpu
    return cluster.get("gpu")


@clusters.command("info")
@click.argument("cluster_id", metavar="CLUSTER")
@json_option
@pass_state
def clusters_info(state: State, cluster_id: str, as_json: bool) -> None:
    """A cluster, its nodes and their private addresses. CLUSTER is the cluster's id or name."""
    client = state.client()
    cluster = client.clusters.get(client.find_cluster_id(cluster_id))
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
        pairs.append(("Why", cluster.get("termination_reason_label") or cluster.get("termination_reason")))
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
        ("Image", cluster.get("image") or "-"),
        ("Price", format_money(cluster.get("price_per_hour")) + "/h"),
    ]
    if cluster.get("cost") is not None:
        pairs.append(("Total cost" if cluster.get("billing_ended_at") else "Cost so far", format_money(cluster["cost"])))
    pairs += [
        ("Billing started", format_time(cluster.get("billing_started_at"))),
        ("Created", format_time(cluster.get("created_at"))),
    ]
    text = render_pairs(pairs)
    nodes = cluster.get("nodes") or []
    if nodes:
        rows = [[node_label(n), n.get("role"), n.get("status"), n.get("private_ip"), _health(n)] for n in nodes]
        text += "\n\n" + render_table(["NODE", "ROLE", "STATUS", "PRIVATE IP", "HEALTH"], rows)
    ssh_rows = [[n.get("name"), n.get("ssh")] for n in nodes if n.get("ssh")]
    if ssh_rows:
        text += "\n\n" + render_table(["NODE", "SSH"], ssh_rows)
        text += f"\n\nOr by name: runcrate clusters ssh {cluster.get('name')} node-1"
    launch = cluster.get("launch") or {}
    if launch:
        text += "\n\nLaunch lines (run on node-0; torchrun on every node, e.g. with `runcrate clusters exec`):\n"
        text += "\n".join(f"  {key}: {line}" for key, line in launch.items())
    return text


def _health(node: dict) -> str:
    """What the last health check found: "network_down: wg0 is down"; "-" before the first."""
    found = node.get("health") or "unknown"
    if found == "unknown":
        return "-"
    return f"{found}: {node['health_detail']}" if found != "healthy" and node.get("health_detail") else found


@clusters.command("events")
@click.argument("cluster_id", metavar="CLUSTER")
@json_option
@pass_state
def clusters_events(state: State, cluster_id: str, as_json: bool) -> None:
    """What happened to a cluster, oldest first. CLUSTER is the cluster's id or name."""
    client = state.client()
    items = client.clusters.list_events_all(client.find_cluster_id(cluster_id))
    items.sort(key=lambda e: str(e.get("created_at") or ""))
    if as_json:
        return print_json(items)
    if not items:
        return click.echo("No events yet.")
    rows = [[format_time(e.get("created_at")), e.get("actor"), event_label(e), cell(e.get("message"))] for e in items]
    click.echo(render_table(["TIME", "ACTOR", "EVENT", "MESSAGE"], rows))


def event_label(event: Record) -> str:
    """The event in words ("Wipe receipt"); `--json` keeps its key (`wipe_receipt`)."""
    return str(event.get("label") or event.get("event"))


def event_line(event: Record) -> str:
    """An event as `watch` prints it: "2026-12-06 07:18:38  [Wipe receipt] node-0's machine was …"."""
    return f"{format_time(event.get('created_at'))}  [{event_label(event)}] {cell(event.get('message'))}"


@clusters.command("watch")
@click.argument("cluster_id", metavar="CLUSTER")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between polls.")
@click.option("--timeout", default=0.0, show_default=True, help="Give up after this many seconds (0: never).")
@json_option
@pass_state
def clusters_watch(state: State, cluster_id: str, interval: float, timeout: float, as_json: bool) -> None:
    """Follow a cluster until it is ready (exit 0) or failed/degraded/terminated (exit 7). CLUSTER is the
    cluster's id or name."""
    cluster_id = state.client().find_cluster_id(cluster_id)
    code = watch_cluster(state.client(), cluster_id, interval=interval, timeout=timeout, quiet=as_json)
    if as_json:
        print_json(state.client().clusters.get(cluster_id))
    sys.exit(code)


def watch_cluster(client: Client, cluster_id: str, interval: float, timeout: float, quiet: bool = False) -> int:
    """Poll a cluster, printing each change of cluster or node status and each new event.

    Prints changes only (never redraws), so the output reads the same in a terminal, a log or a pipe.
    """
    say: Callable[[str], None] = (lambda _: None) if quiet else click.echo
    started = time.monotonic()
    node_status: dict[str, str] = {}
    cluster_status: str | None = None
    seen_events: set[tuple[str, str, str]] = set()
    while True:
        cluster = client.clusters.get(cluster_id)
        status = str(cluster.get("status"))
        if status != cluster_status:
            total = machine_count(cluster)
            say(f"{_now()}  cluster {cluster.get('name') or cluster_id}: {cluster_status or '…'} -> {status}"
                + (f" ({total} machines)" if total else ""))
            cluster_status = status
        for node in cluster.get("nodes") or []:
            name = node_label(node)
            current = str(node.get("status"))
            if node_status.get(name) != current:
                ip = f" {node['private_ip']}" if node.get("private_ip") else ""
                say(f"{_now()}    {name:<8} {node.get('role') or '':<6} {node_status.get(name, '…')} -> {current}{ip}")
                node_status[name] = current
        try:
            events = client.clusters.list_events(cluster_id).items
        except ApiError:
            events = []
        for event in sorted(events, key=lambda e: str(e.get("created_at") or "")):
            key = (str(event.get("created_at")), str(event.get("event")), str(event.get("message")))
            if key not in seen_events:
                seen_events.add(key)
                say(event_line(event))
        busy = nodes_in_progress(cluster)
        if status == READY and not busy:
            live = [n for n in cluster.get("nodes") or [] if str(n.get("status")) not in GONE_NODE_STATES]
            ready = sum(1 for n in live if n.get("status") == READY)
            say(f"Cluster {cluster.get('name') or cluster_id} is ready"
                + (f" ({ready}/{len(live)} nodes ready)" if live else "")
                + f"; billing since {format_time(cluster.get('billing_started_at'))}.")
            for node in live:
                if node.get("status") != READY:
                    say(f"  {node_label(node)} is {node.get('status')}"
                        + (f": {node['detail']}" if node.get("detail") else "."))
            return EXIT_OK
        if status in FAILED_STATES:
            reason = cluster.get("termination_reason_label") or cluster.get("termination_reason")
            hint = {
                "degraded": f"machines stay up and billed: `runcrate clusters retry-install {cluster_id}` "
                            f"or `runcrate clusters delete {cluster_id}`",
                "failed": "every machine was released; nothing was billed",
            }.get(status, "")
            say(f"Cluster {cluster.get('name') or cluster_id} is {status}"
                + (f" ({reason})" if reason else "") + (f": {hint}" if hint else "."))
            return EXIT_CLUSTER_FAILED
        if timeout and time.monotonic() - started > timeout:
            still = "; ".join(f"{node_label(n)} is still {n.get('status')}" for n in busy) if status == READY else ""
            say(f"Gave up after {timeout:g}s; the cluster is still {status}" + (f", {still}." if still else "."))
            return EXIT_OTHER
        time.sleep(interval)


# A node still on its way in (an added worker, a machine being swapped in) or out (the machine
# a replace swapped out): `watch` follows a ready cluster until none is left.
NODE_STATES_IN_PROGRESS = frozenset({"pending", "booting", "up", "joined", "installing", "stopping"})
GONE_NODE_STATES = frozenset({"stopping", "stopped", "released"})


def nodes_in_progress(cluster: Record) -> list[Record]:
    return [n for n in cluster.get("nodes") or [] if str(n.get("status")) in NODE_STATES_IN_PROGRESS]


def _now() -> str:
    return datetime.now().strftime("%H:%M:%S")


@clusters.command("delete")
@click.argument("cluster_id", metavar="CLUSTER")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--watch", is_flag=True, help="Follow it until every machine is wiped and released, then print the total cost.")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between polls with --watch.")
@json_option
@pass_state
def clusters_delete(state: State, cluster_id: str, yes: bool, watch: bool, interval: float, as_json: bool) -> None:
    """Terminate a cluster: every machine stops and billing ends. CLUSTER is the cluster's id or name. Aliases: rm, terminate."""
    client = state.client()
    cluster_id = client.find_cluster_id(cluster_id)
    if not yes:
        cluster = client.clusters.get(cluster_id)
        if not sys.stdin.isatty():
            fail("refusing to terminate without confirmation; pass --yes", EXIT_USAGE)
        question = (f"Terminate cluster {cluster.get('name')} ({cluster_id}), all {machine_count(cluster)} machines? "
                    "Their disks are lost and billing stops")
        if not click.confirm(question, default=False):
            fail("not terminated", EXIT_OTHER)
    seen = {str(event.get("id")) for event in client.clusters.list_events_all(cluster_id)} if watch else set()
    result = client.clusters.terminate(cluster_id)
    if watch:
        watch_termination(client, cluster_id, interval, seen, quiet=as_json)
        result = client.clusters.get(cluster_id)
    if as_json:
        return print_json(result)
    if watch:
        return
    status = (result or {}).get("status", "terminating") if isinstance(result, dict) else "terminating"
    click.echo(f"Terminating cluster {cluster_id} (status {status}); billing stops for every machine.")


def watch_termination(client: Client, cluster_id: str, interval: float, seen: set[str], quiet: bool = False) -> None:
    """Poll until the cluster is terminated, printing the events not in `seen` (a wipe receipt
    per machine), then its total cost."""
    say: Callable[[str], None] = (lambda _: None) if quiet else click.echo
    say(f"{_now()}  Terminating cluster {cluster_id}; billing stopped for every machine.")
    while True:
        cluster = client.clusters.get(cluster_id)
        for event in client.clusters.list_events_all(cluster_id):
            if str(event.get("id")) not in seen:
                seen.add(str(event.get("id")))
                say(event_line(event))
        if cluster.get("status") == "terminated":
            say(f"Cluster {cluster.get('name') or cluster_id} is terminated; total cost {format_money(cluster.get('cost'))}.")
            return
        time.sleep(interval)


@clusters.command("retry-install")
@click.argument("cluster_id", metavar="CLUSTER")
@json_option
@pass_state
def clusters_retry_install(state: State, cluster_id: str, as_json: bool) -> None:
    """Install the software again on a degraded cluster. CLUSTER is the cluster's id or name."""
    client = state.client()
    cluster_id = client.find_cluster_id(cluster_id)
    result = client.clusters.retry_install(cluster_id)
    if as_json:
        return print_json(result)
    click.echo(f"Retrying the install on cluster {cluster_id}. Follow it with: runcrate clusters watch {cluster_id}")


@clusters.command("add-workers")
@click.argument("cluster_id", metavar="CLUSTER")
@click.option("--count", default=1, show_default=True, type=click.IntRange(min=1), help="How many workers to add (the server knows the limit).")
@click.option("--watch", "then_watch", is_flag=True, help="Follow the add until every node is ready or failed.")
@json_option
@pass_state
def clusters_add_workers(state: State, cluster_id: str, count: int, then_watch: bool, as_json: bool) -> None:
    """Add worker machines to a running cluster; each is billed from the moment it is up. CLUSTER is the
    cluster's id or name. Alias: add-worker."""
    client = state.client()
    cluster_id = client.find_cluster_id(cluster_id)
    result = client.clusters.add_workers(cluster_id, count=count)
    if as_json and not then_watch:
        return print_json(result)
    if not as_json:
        click.echo(f"Adding {count} worker{'s' if count != 1 else ''} to cluster {cluster_id}."
                   + ("" if then_watch else f" Follow it with: runcrate clusters watch {cluster_id}"))
    if then_watch:
        code = watch_cluster(client, cluster_id, interval=2.0, timeout=0, quiet=as_json)
        if as_json:
            print_json(client.clusters.get(cluster_id))
        sys.exit(code)


@clusters.command("replace-node")
@click.argument("cluster")
@click.argument("node_name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--watch", is_flag=True, help="Follow the swap until the new machine has taken over (exit 0) or not (exit 7).")
@click.option("--interval", default=2.0, show_default=True, type=float, help="Seconds between polls with --watch.")
@json_option
@pass_state
def clusters_replace_node(
    state: State, cluster: str, node_name: str, yes: bool, watch: bool, interval: float, as_json: bool
) -> None:
    """Replace a node with a new machine of the same offer: it takes the node's name and private address,
    joins the network and the software, then the old machine stops. While both run, one machine more is billed.
    CLUSTER is the cluster's id or name."""
    client = state.client()
    cluster_id = client.find_cluster_id(cluster)
    # The machines there before: the new one is the machine of that name that was not.
    before = {n.get("instance_id") for n in client.clusters.get(cluster_id).get("nodes") or []} if watch or not yes else set()
    seen = {str(e.get("id")) for e in client.clusters.list_events_all(cluster_id)} if watch else set()
    if not yes:
        current = client.clusters.get(cluster_id)
        if not sys.stdin.isatty():
            fail("refusing to replace a node without confirmation; pass --yes", EXIT_USAGE)
        question = (f"Replace {node_name} of cluster {current.get('name')} ({cluster_id})? A new machine takes its name "
                    f"and address, then this one stops: files on its own disk are lost. Both are billed while they overlap")
        if not click.confirm(question, default=False):
            fail("not replaced", EXIT_OTHER)
    result = client.clusters.replace_node(cluster_id, node_name) or {}
    new = next((n for n in result.get("nodes") or []
                if n.get("name") == node_name and n.get("instance_id") not in before), None)
    if not watch:
        if as_json:
            return print_json(result)
        click.echo(f"Replacing {node_name} of cluster {cluster_id}: a new machine is starting; {node_name} keeps running "
                   f"until it has taken over. Follow it with: runcrate clusters replace-node … --watch, or "
                   f"runcrate clusters events {cluster_id}")
        return
    code = watch_replacement(client, cluster_id, node_name, new.get("instance_id") if new else None, interval,
                             seen, quiet=as_json)
    if as_json:
        print_json(client.clusters.get(cluster_id))
    sys.exit(code)


def watch_replacement(client: Client, cluster_id: str, node_name: str, instance_id: Any, interval: float,
                      seen: set[str], quiet: bool = False) -> int:
    """Poll until the machine swapped in is the node (exit 0) or was given back (exit 7), printing
    the events not in `seen` (those from before the request)."""
    say: Callable[[str], None] = (lambda _: None) if quiet else click.echo
    last = ""
    while True:
        cluster = client.clusters.get(cluster_id)
        for event in client.clusters.list_events_all(cluster_id):
            if str(event.get("id")) not in seen:
                seen.add(str(event.get("id")))
                say(event_line(event))
        node = next((n for n in cluster.get("nodes") or [] if n.get("instance_id") == instance_id), None)
        if node is None or cluster.get("status") != READY and not node.get("replacing"):
            say(f"Cluster {cluster.get('name') or cluster_id} is {cluster.get('status')}; {node_name} was not replaced.")
            return EXIT_CLUSTER_FAILED
        status = str(node.get("status"))
        if status != last:
            say(f"{_now()}    {node_name} (new machine) -> {status}")
            last = status
        if not node.get("replacing"):
            if status == READY:
                say(f"{node_name} now runs on the new machine; the old one stopped and is no longer billed.")
                return EXIT_OK
            say(f"The new machine did not take over ({node.get('detail') or status}); the old {node_name} keeps running.")
            return EXIT_CLUSTER_FAILED
        time.sleep(interval)


@clusters.command("terminate-node")
@click.argument("cluster_id", metavar="CLUSTER")
@click.argument("node_name")
@pass_state
def clusters_terminate_node(state: State, cluster_id: str, node_name: str) -> None:
    """Ask to stop one node. The API refuses: a node ends with its cluster (exit 6)."""
    client = state.client()
    cluster_id = client.find_cluster_id(cluster_id)
    client.clusters.terminate_node(cluster_id, node_name)
    click.echo(f"Node {node_name} of cluster {cluster_id} is terminating.")
