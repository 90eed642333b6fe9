"""HTMX requests carry the CSRF token the base template puts in <body hx-headers>."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from clusters.models import Status

pytestmark = pytest.mark.django_db


def hx_headers(html: str) -> dict:
    match = re.search(r"<body[^>]* hx-headers='([^']*)'", html)
    assert match, "the base template sets hx-headers on <body>"
    return json.loads(match.group(1))


@pytest.fixture
def strict_client(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    return client


def test_an_htmx_post_with_the_pages_token_is_accepted(strict_client, cluster):
    headers = hx_headers(strict_client.get(cluster.get_absolute_url()).text)
    response = strict_client.post(
        reverse("clusters:terminate", args=[cluster.pk]), {"confirm_name": "train"},
        headers={**headers, "HX-Request": "true"},
    )
    assert response.status_code == 200 and response["HX-Redirect"] == cluster.get_absolute_url()
    cluster.refresh_from_db()
    assert cluster.status == Status.TERMINATING


def test_an_htmx_post_without_a_token_is_refused(strict_client, cluster):
    strict_client.get(cluster.get_absolute_url())
    response = strict_client.post(
        reverse("clusters:terminate", args=[cluster.pk]), {"confirm_name": "train"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 403
    cluster.refresh_from_db()
    assert cluster.status == Status.PROVISIONING


def test_pushed_partials_post_with_hx_post_so_the_page_token_applies(cluster):
    from django.template.loader import render_to_string

    from clusters.models import Cluster
    from clusters.queries import cluster_for_detail

    loaded = cluster_for_detail(Cluster.objects.filter(pk=cluster.pk)).get()
    html = render_to_string("clusters/detail.html#status-card", {"cluster": loaded, "oob": True, "csrf_token": "NOTPROVIDED"})
    assert 'hx-swap-oob="true"' in html
    assert f'hx-post="{reverse("clusters:terminate", args=[cluster.pk])}"' in html
