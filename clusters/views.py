from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Prefetch, Q
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounts import services as accounts_services
from accounts.forms import QuotaForm, apply_errors
from accounts.http import AuthenticatedHttpRequest, page_redirect
from accounts.models import Environment, Quota
from accounts.tenancy import require_tenancy
from clusters import connect, queries, rules
from clusters.access import get_cluster_for_user
from clusters.forms import SOFTWARE_HELP, CreateClusterForm, SoftwareSelect, VolumeForm, is_id
from clusters.images import offer_images
from clusters.models import LIVE_STATUSES, Cluster, Software, Status, Volume
from clusters.network_test import card as network_test_card
from clusters.network_test.services import start_network_test
from clusters.queries import workspace_instance, workspace_instances
from clusters.quotas import quota_rows
from clusters.services.create import create_cluster, plan_cluster, recreate_cluster
from clusters.services.progress import retry_install
from clusters.services.replace import replace_node
from clusters.services.terminate import refuse_node_termination, terminate_cluster, terminate_instance
from clusters.services.volumes import create_volume, delete_volume, sync_volume_now
from clusters.services.workers import add_workers
from config.errors import DomainError, add_to_form, flash
from offers.inventory import find_offer
from offers.models import MAX_MACHINES, MIN_MACHINES, NETWORK_CAVEAT


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


def _typed_count(value: Any) -> int | None:
    """The machine count as typed, or None when it is not a whole number (the plan says what to enter)."""
    text = str(value if value is not None else "").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def create_plan(environment: Environment, form: CreateClusterForm, values: Any, user_id: int) -> dict[str, Any]:
    """What the create page says about the request being typed, all from the server's plan
    (the one POST /clusters/plan answers): the price, what is free, the balance's and the
    budget's runway, every refusal, and what the offer allows (Kubernetes, a volume). The
    page asks again (htmx, the `plan` partial) whenever a field changes and computes nothing
    itself. `values`: the form's data, or the query string the page was opened or refreshed with."""
    offer_value = values.get("offer")
    machine_type = find_offer(offer_value) if offer_value else form.offers.first()
    if machine_type is not None and not offer_value:
        form.initial["offer"] = machine_type.pk
    machines = _typed_count(values.get("machines", form["machines"].value()))
    software = values.get("software") or Software.NONE
    volume_value = str(values.get("volume") or "")
    volume = Volume.objects.filter(pk=int(volume_value), environment=environment).first() if is_id(volume_value) else None
    name = str(values.get("name") or "").strip()
    image = str(values.get("image") or "").strip() or None
    offered = offer_images(machine_type) if machine_type is not None and machine_type.active else None
    if not form.is_bound and image and image not in {found.name for found in offered or []}:
        # Another offer was picked: its default, not a refusal of the image the last one had.
        image = None

    kubernetes = rules.kubernetes_problem(machine_type) if machine_type is not None else None
    cast(SoftwareSelect, form.fields["software"].widget).disabled_values = {Software.KUBERNETES} if kubernetes else set()
    if not form.is_bound:
        # The choices this offer does not allow are greyed out and not kept picked.
        if kubernetes is not None and software == Software.KUBERNETES:
            software = form.initial["software"] = Software.NONE
        if machine_type is not None and machine_type.community:
            volume = form.initial["volume"] = None
            form.fields["volume"].disabled = True
    plan = plan_cluster(
        environment=environment, name=name, machine_type=machine_type, machine_count=machines, software=software,
        volume=volume, created_by_id=user_id, image=image,
    )
    keys = cast(forms.ModelMultipleChoiceField, form.fields["ssh_keys"]).queryset
    return {
        "plan": plan, "machine_type": machine_type,
        "machines_valid": machines is not None and MIN_MACHINES <= machines <= MAX_MACHINES,
        # A name not typed yet is no refusal to show while the rest is being picked, and a field
        # whose own error is shown under it is not said twice.
        "problems": [p.message for p in plan.problems
                     if (name or p.field != "name") and not (form.is_bound and p.field in form.errors)],
        "kubernetes_note": kubernetes.message if kubernetes is not None else "",
        "has_keys": keys is not None and keys.exists(), "keys_picked": bool(form["ssh_keys"].value()),
    }


@login_required
def cluster_create(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_tenancy(request)
    initial: dict[str, Any] = {
        key: request.GET[key] for key in ("offer", "machines", "software", "image", "name", "volume", "include_community")
        if key in request.GET
    }
    refresh = bool(request.htmx) and request.GET.get("partial") == "plan"
    if "ssh_keys" in request.GET or refresh:
        # A refresh sends every ticked key: none sent is none ticked.
        initial["ssh_keys"] = request.GET.getlist("ssh_keys")
    data = request.POST or None
    machines = _count((data or initial).get("machines"))
    form = CreateClusterForm(
        data, initial=initial, environment=tenancy.environment, machines=machines,
        keep_offer=(data or initial).get("offer"), include_community=bool((data or initial).get("include_community")),
    )
    if request.method == "POST" and form.is_valid():
        cleaned = form.cleaned_data
        # What the page warned of is said again once the cluster exists; asked before the
        # create, whose cluster the plan would otherwise count twice.
        warnings = create_plan(tenancy.environment, form, request.POST, request.user.pk)["plan"].money_warnings
        try:
            cluster = create_cluster(
                environment=tenancy.environment, name=cleaned["name"], machine_type=cleaned["offer"],
                machine_count=cleaned["machines"], software=cleaned["software"], volume=cleaned["volume"],
                ssh_keys=cleaned["ssh_keys"], created_by=request.user, actor=actor_label(request),
                image=cleaned["image"] or None,
            )
        except DomainError as error:
            add_to_form(form, error)
        else:
            messages.success(request, f"Created {cluster.name}: every machine is reserved. Its status below updates as they start.")
            for warning in warnings:
                messages.warning(request, warning)
            return redirect(cluster)
    context = {
        "form": form, **create_plan(tenancy.environment, form, data or initial, request.user.pk),
        "include_community": bool((data or initial).get("include_community")),
        "software_help": SOFTWARE_HELP, "network_caveat": NETWORK_CAVEAT,
    }
    return render(request, "clusters/create.html#plan" if refresh else "clusters/create.html", context)


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
    # The Network card, as the socket pushes it (clusters.live.render_network_card).
    context["network"] = network_test_card.card(cluster)
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
def cluster_sync_volume(request: AuthenticatedHttpRequest, cluster_id: int) -> HttpResponse:
    cluster = get_cluster_for_user(request, cluster_id)
    try:
        sync_volume_now(cluster, actor=actor_label(request))
        messages.success(request, "Saving the volume folder now; Events say how much was saved, and how long it took.")
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


@login_required
def quotas(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Every quota of the workspace with what each member it binds has in use; an Owner sets them."""
    tenancy = require_tenancy(request)
    form = QuotaForm(request.POST or None, workspace=tenancy.workspace)
    if request.method == "POST" and form.is_valid():
        values = form.cleaned_data
        try:
            quota = accounts_services.set_quota(
                by=tenancy.membership, membership=values["member"], role=values["role"],
                environment=values["environment"], max_gpus=values["max_gpus"], monthly_spend=values["monthly_spend"],
            )
        except PermissionDenied as exc:
            messages.error(request, str(exc))
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Quota of {quota.subject} in {quota.scope} set.")
            return redirect("clusters:quotas")
    return render(request, "clusters/quotas.html", {"form": form, "rows": quota_rows(tenancy.workspace.pk)})


@login_required
@require_POST
def quota_delete(request: AuthenticatedHttpRequest, quota_id: int) -> HttpResponse:
    tenancy = require_tenancy(request)
    quota = get_object_or_404(Quota, pk=quota_id, workspace=tenancy.workspace)
    try:
        accounts_services.delete_quota(by=tenancy.membership, quota=quota)
        messages.success(request, f"Removed the quota of {quota.subject} in {quota.scope}.")
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    return redirect("clusters:quotas")
