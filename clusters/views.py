from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Prefetch, Q
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounts.http import AuthenticatedHttpRequest, page_redirect
from accounts.models import Environment
from accounts.tenancy import require_tenancy
from clusters import connect, queries
from clusters.access import get_cluster_for_user
from clusters.forms import SOFTWARE_HELP, CreateClusterForm, VolumeForm, is_id
from clusters.models import LIVE_STATUSES, Cluster, Status, Volume
from clusters.queries import workspace_instance, workspace_instances
from clusters.services.create import create_cluster, plan_cluster, recreate_cluster
from clusters.services.network_tests import start_network_test
from clusters.services.progress import retry_install
from clusters.services.replace import replace_node
from clusters.services.terminate import refuse_node_termination, terminate_cluster, terminate_instance
from clusters.services.volumes import create_volume, delete_volume
from clusters.services.workers import add_workers
from config.errors import DomainError, add_to_form, flash
from offers.inventory import find_offer, free_host_count
from offers.models import NETWORK_CAVEAT, MachineType


def actor_label(request: AuthenticatedHttpRequest) -> str:
    return request.user.get_username()


@login_required
def cluster_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_tenancy(request)
    # ?show= is what the tabs said before the list took any status.
    status = request.GET.get("status") or request.GET.get("show") or queries.LIVE
    try:
        clusters = queries.clusters_with_status(Cluster.objects.filter(environment=tenancy.environment), status)
    except queries.UnknownStatus:
        raise Http404("Filter by live, all or a cluster status.") from None
    page = queries.clusters_page(clusters, request.GET.get("page"))
    context = {"clusters": page.object_list, "page": page, "status": status, "statuses": Status.choices}
    return render(request, "clusters/list.html", context)


def _count(value: Any, default: int = 4) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def spend_limits(environment: Environment, machine_type: MachineType | None, machines: int) -> dict[str, Any]:
    """What the create form needs to warn before a cluster would outlast the money, from the
    same plan the API's POST /clusters/plan answers: the balance, what the workspace's clusters
    cost per hour (booting ones too), what is left of the budget, and the plan's own warnings
    for the offer and count the page opens with (the page re-words them as they change)."""
    plan = plan_cluster(
        environment=environment, name="", machine_type=machine_type, machine_count=machines,
    )
    money_warnings = plan.money_warnings if machine_type is not None else []
    return {
        "balance": plan.balance, "burn": plan.committed_per_hour, "budget_left": plan.budget_remaining,
        "budget": plan.monthly_budget, "warnings": money_warnings,
    }


@login_required
def cluster_create(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_tenancy(request)
    initial: dict[str, Any] = {key: request.GET[key] for key in ("offer", "machines", "software", "name", "volume") if key in request.GET}
    if "ssh_keys" in request.GET:
        initial["ssh_keys"] = request.GET.getlist("ssh_keys")
    data = request.POST or None
    machines = _count((data or initial).get("machines"))
    form = CreateClusterForm(
        data, initial=initial, environment=tenancy.environment, machines=machines,
        keep_offer=(data or initial).get("offer"),
    )
    if request.method == "POST" and form.is_valid():
        cleaned = form.cleaned_data
        try:
            cluster = create_cluster(
                environment=tenancy.environment, name=cleaned["name"], machine_type=cleaned["offer"],
                machine_count=cleaned["machines"], software=cleaned["software"], volume=cleaned["volume"],
                ssh_keys=cleaned["ssh_keys"], created_by=request.user, actor=actor_label(request),
            )
        except DomainError as error:
            add_to_form(form, error)
        else:
            messages.success(request, f"Created {cluster.name}: every machine is reserved. Its status below updates as they start.")
            return redirect(cluster)
    offer = form["offer"].value()
    machine_type = form.offers.filter(pk=offer).first() if is_id(str(offer or "")) else None
    context = {
        "form": form, "machine_type": machine_type,
        "free_hosts": free_host_count(machine_type) if machine_type else None,
        "limits": spend_limits(tenancy.environment, machine_type, machines), "software_help": SOFTWARE_HELP,
        "network_caveat": NETWORK_CAVEAT, "minimum_balance": settings.MINIMUM_CREATE_BALANCE,
    }
    return render(request, "clusters/create.html", context)


def _event_cursor(request: AuthenticatedHttpRequest) -> int | None:
    raw = request.GET.get("before", "")
    if not raw:
        return None
    if not is_id(raw):
        raise Http404("?before= takes an event id.")
    return int(raw)


@login_required
def cluster_detail(request: AuthenticatedHttpRequest, cluster_id: int) -> HttpResponse:
    cluster = get_cluster_for_user(request, cluster_id, detail=True)
    before = _event_cursor(request)
    events, older = queries.recent_events(cluster.pk, before=before)
    context = {
        "cluster": cluster, "connect": connect.page_context(cluster),
        "events": events, "older_events": older, "events_before": before,
    }
    partial = request.GET.get("partial")
    if request.htmx and partial in {"status-card", "nodes-table", "connect-card", "events-list", "older-events"}:
        return render(request, f"clusters/detail.html#{partial}", context)
    return render(request, "clusters/detail.html", context)


@login_required
def cluster_ssh_config(request: AuthenticatedHttpRequest, cluster_id: int) -> HttpResponse:
    cluster = get_cluster_for_user(request, cluster_id, detail=True)
    response = HttpResponse(connect.ssh_config(cluster), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{cluster.name}.ssh_config"'
    return response


@login_required
@require_POST
def cluster_terminate(request: AuthenticatedHttpRequest, cluster_id: int) -> HttpResponse:
    cluster = get_cluster_for_user(request, cluster_id)
    if request.POST.get("confirm_name", "").strip() != cluster.name:
        messages.error(request, f"Type the cluster's name ({cluster.name}) to confirm termination.")
    elif terminate_cluster(cluster, actor=actor_label(request)):
        messages.success(request, f"Terminating {cluster.name}: every machine stops and billing has ended.")
    else:
        messages.info(request, f"{cluster.name} is already {cluster.get_status_display().lower()}.")
    return _back_to(request, cluster)


@login_required
@require_POST
def cluster_recreate(request: AuthenticatedHttpRequest, cluster_id: int) -> HttpResponse:
    """One click on a failed cluster's page: the same cluster on the offer picked there."""
    failed = get_cluster_for_user(request, cluster_id)
    machine_type = find_offer(request.POST.get("offer", ""))
    try:
        cluster = recreate_cluster(failed, machine_type, created_by=request.user, actor=actor_label(request))
    except DomainError as error:
        flash(request, error)
        return _back_to(request, failed)
    messages.success(
        request, f"Created {cluster.name} again on {cluster.machine_type}: every machine is reserved. "
        "Its status below updates as they start.",
    )
    return _back_to(request, cluster)


@login_required
@require_POST
def cluster_retry_install(request: AuthenticatedHttpRequest, cluster_id: int) -> HttpResponse:
    cluster = get_cluster_for_user(request, cluster_id)
    try:
        retry_install(cluster, actor=actor_label(request))
        messages.success(request, "Retrying the install on every node.")
    except DomainError as error:
        flash(request, error)
    return _back_to(request, cluster)


@login_required
@require_POST
def cluster_add_workers(request: AuthenticatedHttpRequest, cluster_id: int) -> HttpResponse:
    cluster = get_cluster_for_user(request, cluster_id)
    try:
        count = int(request.POST.get("count", "1"))
    except ValueError:
        count = 0
    try:
        workers = add_workers(cluster, count, actor=actor_label(request))
        messages.success(request, f"Adding {len(workers)} worker(s); each is billed from the moment it is up.")
    except DomainError as error:
        flash(request, error)
    return _back_to(request, cluster)


@login_required
@require_POST
def cluster_network_test(request: AuthenticatedHttpRequest, cluster_id: int) -> HttpResponse:
    cluster = get_cluster_for_user(request, cluster_id)
    try:
        test = start_network_test(cluster, actor=actor_label(request))
        messages.success(request, f"Network test {test.pk} queued: the Network card fills in as each pair is measured.")
    except DomainError as error:
        flash(request, error)
    return _back_to(request, cluster)


@login_required
@require_POST
def node_terminate(request: AuthenticatedHttpRequest, cluster_id: int, node_name: str) -> HttpResponse:
    cluster = get_cluster_for_user(request, cluster_id)
    if node_name not in {node.name for node in cluster.nodes.all()}:
        raise Http404(f"{cluster.name} has no node {node_name}.")
    try:
        refuse_node_termination(cluster, node_name)
    except DomainError as error:
        flash(request, error)
    return _back_to(request, cluster)


@login_required
@require_POST
def node_replace(request: AuthenticatedHttpRequest, cluster_id: int, node_name: str) -> HttpResponse:
    cluster = get_cluster_for_user(request, cluster_id)
    if node_name not in {node.name for node in cluster.nodes.all() if node.released_at is None}:
        raise Http404(f"{cluster.name} has no node {node_name}.")
    try:
        new = replace_node(cluster, node_name, actor=actor_label(request))
    except DomainError as error:
        flash(request, error)
    else:
        messages.success(
            request, f"Replacing {node_name}: a new machine ({new.host.name}) is starting. {node_name} keeps running "
            "until the new machine has taken over.",
        )
    return _back_to(request, cluster)


@login_required
def instances(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Every machine the workspace runs, in every environment; each belongs to a cluster."""
    tenancy = require_tenancy(request)
    listed = workspace_instances(tenancy.workspace.pk)
    return render(request, "clusters/instances.html", {"instances": listed})


@login_required
@require_POST
def instance_terminate(request: AuthenticatedHttpRequest, instance_id: int) -> HttpResponse:
    tenancy = require_tenancy(request)
    instance = workspace_instance(tenancy.workspace.pk, instance_id)
    if instance is None:
        raise Http404("No such instance in this workspace.")
    try:
        terminate_instance(instance)
    except DomainError as error:
        flash(request, error)
    return page_redirect(request, "clusters:instances")


def _back_to(request: AuthenticatedHttpRequest, cluster: Cluster) -> HttpResponse:
    return page_redirect(request, cluster)


@login_required
def volumes(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_tenancy(request)
    form = VolumeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            volume = create_volume(environment=tenancy.environment, **form.cleaned_data)
        except DomainError as error:
            add_to_form(form, error)
        else:
            messages.success(request, f"Created volume {volume.name} ({volume.size_gb} GB).")
            return redirect("clusters:volumes")
    listed = (
        Volume.objects.filter(environment=tenancy.environment)
        .annotate(live_clusters=Count("clusters", filter=Q(clusters__status__in=LIVE_STATUSES)))
        .prefetch_related(Prefetch("clusters", queryset=Cluster.objects.live().order_by("name"), to_attr="live_cluster_list"))
    )
    return render(request, "clusters/volumes.html", {"form": form, "volumes": listed})


@login_required
@require_POST
def volume_delete(request: AuthenticatedHttpRequest, volume_id: int) -> HttpResponse:
    tenancy = require_tenancy(request)
    volume = get_object_or_404(Volume, pk=volume_id, environment__workspace=tenancy.workspace)
    try:
        delete_volume(volume)
        messages.success(request, f"Deleted volume {volume.name}.")
    except DomainError as error:
        flash(request, error)
    return redirect("clusters:volumes")
