"""Clusters list, detail (and its HTMX partials), terminate, retry install and node terminate."""

from __future__ import annotations

import pytest
from django.urls import reverse

from clusters.models import Cluster, Node, Status
from offers.models import Host
from tests.web.conftest import HTMX

pytestmark = pytest.mark.django_db

PARTIALS = ["status-card", "nodes-table", "events-list"]


def detail_url(cluster: Cluster) -> str:
    return reverse("clusters:detail", args=[cluster.pk])


class TestList:
    def test_it_lists_the_environments_live_clusters(self, member_client, cluster):
        response = member_client.get(reverse("clusters:list"))
        assert response.status_code == 200
        assert f'id="cluster-row-{cluster.pk}"' in response.text
        assert "Provisioning" in response.text
        assert "$10.00" in response.text  # 4 × $2.50

    def test_it_hides_ended_clusters_unless_asked(self, member_client, cluster):
        Cluster.objects.filter(pk=cluster.pk).update(status=Status.TERMINATED)
        assert f"cluster-row-{cluster.pk}" not in member_client.get(reverse("clusters:list")).text
        assert f"cluster-row-{cluster.pk}" in member_client.get(reverse("clusters:list") + "?show=all").text

    def test_it_subscribes_to_the_environments_socket(self, member_client, environment):
        response = member_client.get(reverse("clusters:list"))
        assert f'ws-connect="/ws/environments/{environment.pk}/"' in response.text

    def test_an_outsider_sees_none_of_them(self, outsider_client, cluster):
        response = outsider_client.get(reverse("clusters:list"))
        assert response.status_code == 200
        assert "train" not in response.text
        assert "No live clusters" in response.text

    def test_anonymous_is_sent_to_sign_in(self, client):
        response = client.get(reverse("clusters:list"))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))

    def test_the_home_page_leads_to_the_list(self, member_client):
        response = member_client.get("/", follow=True)
        assert response.redirect_chain[-1][0] == reverse("clusters:list")


class TestDetail:
    def test_it_shows_status_nodes_and_events(self, member_client, cluster):
        response = member_client.get(detail_url(cluster))
        assert response.status_code == 200
        text = response.text
        assert 'data-testid="cluster-status">Provisioning<' in text
        for index in range(4):
            assert f'id="node-{index}"' in text and f"10.77.0.{index + 1}" in text
        assert "node-0" in text and "head" in text
        assert "created" in text
        assert f'ws-connect="/ws/clusters/{cluster.pk}/"' in text

    @pytest.mark.parametrize("partial", PARTIALS)
    def test_each_partial_renders_alone_for_htmx(self, member_client, cluster, partial):
        response = member_client.get(detail_url(cluster), {"partial": partial}, **HTMX)
        assert response.status_code == 200
        assert f'id="{partial}"' in response.text
        assert "<html" not in response.text
        others = [p for p in PARTIALS if p != partial]
        assert not any(f'id="{p}"' in response.text for p in others)

    def test_a_partial_without_htmx_gets_the_whole_page(self, member_client, cluster):
        response = member_client.get(detail_url(cluster), {"partial": "status-card"})
        assert "<html" in response.text

    @pytest.mark.parametrize("partial", [None, *PARTIALS])
    def test_an_outsider_gets_404(self, outsider_client, cluster, partial):
        params = {"partial": partial} if partial else {}
        assert outsider_client.get(detail_url(cluster), params, **HTMX).status_code == 404

    def test_anonymous_is_sent_to_sign_in(self, client, cluster):
        response = client.get(detail_url(cluster))
        assert response.status_code == 302 and response["Location"].startswith(reverse("login"))

    def test_a_cluster_of_another_environment_of_the_workspace_is_reachable(self, member_client, cluster, workspace):
        # Clusters are scoped by workspace; the environment switcher filters the list only.
        other = workspace.environments.create(name="staging")
        Cluster.objects.filter(pk=cluster.pk).update(environment=other)
        assert member_client.get(detail_url(cluster)).status_code == 200

    def test_a_degraded_cluster_offers_retry_and_terminate(self, member_client, cluster):
        Cluster.objects.filter(pk=cluster.pk).update(status=Status.DEGRADED, software="slurm")
        text = member_client.get(detail_url(cluster)).text
        assert "Retry install" in text and "Terminate cluster" in text

    def test_a_terminated_cluster_offers_no_actions(self, member_client, cluster):
        Cluster.objects.filter(pk=cluster.pk).update(status=Status.TERMINATED)
        text = member_client.get(detail_url(cluster)).text
        assert "Retry install" not in text and "Terminate cluster" not in text and "Terminate node" not in text


class TestTerminate:
    def url(self, cluster):
        return reverse("clusters:terminate", args=[cluster.pk])

    def test_it_needs_the_name_typed_to_confirm(self, member_client, cluster):
        response = member_client.post(self.url(cluster), {"confirm_name": "nope"}, follow=True)
        assert "Type the cluster&#x27;s name (train) to confirm" in response.text
        cluster.refresh_from_db()
        assert cluster.status == Status.PROVISIONING

    def test_it_terminates_with_the_name(self, member_client, cluster, member):
        response = member_client.post(self.url(cluster), {"confirm_name": "train"})
        assert response.status_code == 302 and response["Location"] == detail_url(cluster)
        cluster.refresh_from_db()
        assert cluster.status == Status.TERMINATING
        event = cluster.events.get(event="terminating")
        assert event.actor == member.username and event.reason == "user_requested"

    def test_it_runs_to_terminated_and_frees_every_host(self, member_client, cluster, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks(execute=True):
            member_client.post(self.url(cluster), {"confirm_name": "train"})
        cluster.refresh_from_db()
        assert cluster.status == Status.TERMINATED
        assert not Host.objects.filter(state=Host.State.RESERVED).exists()

    def test_over_htmx_it_redirects_the_client(self, member_client, cluster):
        response = member_client.post(self.url(cluster), {"confirm_name": "train"}, **HTMX)
        assert response.status_code == 200
        assert response["HX-Redirect"] == detail_url(cluster)

    def test_terminating_twice_says_so(self, member_client, cluster):
        member_client.post(self.url(cluster), {"confirm_name": "train"})
        response = member_client.post(self.url(cluster), {"confirm_name": "train"}, follow=True)
        assert "train is already terminating" in response.text

    def test_an_outsider_cannot(self, outsider_client, cluster):
        assert outsider_client.post(self.url(cluster), {"confirm_name": "train"}).status_code == 404
        cluster.refresh_from_db()
        assert cluster.status == Status.PROVISIONING

    def test_it_needs_post(self, member_client, cluster):
        assert member_client.get(self.url(cluster)).status_code == 405

    def test_anonymous_is_sent_to_sign_in(self, client, cluster):
        assert client.post(self.url(cluster), {"confirm_name": "train"}).status_code == 302
        cluster.refresh_from_db()
        assert cluster.status == Status.PROVISIONING


class TestRetryInstall:
    def url(self, cluster):
        return reverse("clusters:retry_install", args=[cluster.pk])

    def test_it_retries_a_degraded_cluster(self, member_client, cluster):
        Cluster.objects.filter(pk=cluster.pk).update(status=Status.DEGRADED, software="slurm")
        response = member_client.post(self.url(cluster), follow=True)
        assert "Retrying the install on every node." in response.text
        cluster.refresh_from_db()
        assert cluster.status == Status.INSTALLING and cluster.install_attempts == 1

    def test_it_refuses_unless_degraded(self, member_client, cluster):
        response = member_client.post(self.url(cluster), follow=True)
        assert "Only a degraded cluster can retry its install" in response.text
        cluster.refresh_from_db()
        assert cluster.status == Status.PROVISIONING

    def test_an_outsider_cannot(self, outsider_client, cluster):
        Cluster.objects.filter(pk=cluster.pk).update(status=Status.DEGRADED)
        assert outsider_client.post(self.url(cluster)).status_code == 404
        cluster.refresh_from_db()
        assert cluster.status == Status.DEGRADED


class TestNodeTerminate:
    def url(self, cluster, node="node-1"):
        return reverse("clusters:node_terminate", args=[cluster.pk, node])

    def test_it_is_refused_with_a_clear_message(self, member_client, cluster):
        response = member_client.post(self.url(cluster), follow=True)
        assert "node-1 cannot be terminated on its own" in response.text
        assert "Terminate the whole cluster" in response.text
        assert not Node.objects.filter(cluster=cluster).exclude(state=Node.State.PENDING).exists()
        cluster.refresh_from_db()
        assert cluster.status == Status.PROVISIONING

    def test_an_unknown_node_is_404(self, member_client, cluster):
        assert member_client.post(self.url(cluster, "node-9")).status_code == 404

    def test_an_outsider_gets_404(self, outsider_client, cluster):
        assert outsider_client.post(self.url(cluster)).status_code == 404
