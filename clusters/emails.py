"""Emails about a cluster: text and HTML from templates/emails/, sent by Celery after commit."""

from __future__ import annotations

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone

from accounts.models import Role
from clusters.models import Cluster


def recipients_for(cluster: Cluster) -> list[str]:
    """The person who created the cluster; else the workspace's owners."""
    if cluster.created_by and cluster.created_by.email:
        return [cluster.created_by.email]
    return list(
        cluster.workspace.memberships.filter(role=Role.OWNER).exclude(user__email="").values_list("user__email", flat=True)
    )


def send_templated(template: str, subject: str, to: list[str], context: dict) -> None:
    context = {"site_url": settings.SITE_URL, **context}
    message = EmailMultiAlternatives(
        subject=subject,
        body=render_to_string(f"emails/{template}.txt", context),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=to,
    )
    message.attach_alternative(render_to_string(f"emails/{template}.html", context), "text/html")
    message.send()


def send_cluster_ready(cluster_id: int) -> None:
    with transaction.atomic():
        # Claim the send first, so duplicate tasks send it once.
        claimed = Cluster.objects.filter(pk=cluster_id, ready_email_sent_at__isnull=True).update(
            ready_email_sent_at=timezone.now()
        )
        if not claimed:
            return
        cluster = Cluster.objects.select_related("machine_type__gpu", "machine_type__location", "created_by", "workspace").get(pk=cluster_id)
        to = recipients_for(cluster)
        if not to:
            return
        send_templated(
            "cluster_ready", f"Your cluster {cluster.name} is ready", to,
            {"cluster": cluster, "nodes": list(cluster.nodes.all()), "url": settings.SITE_URL + cluster.get_absolute_url()},
        )
