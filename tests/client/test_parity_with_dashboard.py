"""Every action of the dashboard has an API endpoint, a CLI command and an MCP tool.

The dashboard's actions are read from the URLconf (every named page or form post of the product's
apps), so a new page fails here until it is mapped below to its operationId, CLI command and MCP
tool, or listed in DASHBOARD_ONLY with the reason it has no place on the other surfaces."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import click
import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from runcrate_client.api import ClientConfig
from runcrate_client.cli import main as cli_main
from runcrate_client.mcp_server import build_server


@dataclass(frozen=True)
class Action:
    operation: str  # the API's operationId
    cli: str  # the CLI command, e.g. "clusters add-worker"
    mcp: str  # the MCP tool


SURFACES: dict[str, list[Action]] = {
    "clusters:list": [Action("listClusters", "clusters list", "list_clusters")],
    "clusters:create": [Action("planCluster", "clusters create", "plan_cluster"),
                        Action("createCluster", "clusters create", "create_cluster")],
    "clusters:volumes": [Action("listVolumes", "volumes list", "list_volumes"),
                         Action("createVolume", "volumes create", "create_volume")],
    "clusters:volume_delete": [Action("deleteVolume", "volumes delete", "delete_volume")],
    "clusters:instances": [Action("listInstances", "instances list", "list_instances")],
    "clusters:instance_terminate": [Action("terminateInstance", "instances terminate", "terminate_instance")],
    "clusters:detail": [Action("getCluster", "clusters info", "cluster_status"),
                        Action("listClusterEvents", "clusters events", "cluster_events"),
                        Action("listNetworkTests", "clusters network-results", "network_test_results")],
    "clusters:terminate": [Action("terminateCluster", "clusters delete", "delete_cluster")],
    "clusters:retry_install": [Action("retryInstall", "clusters retry-install", "retry_install")],
    # The SSH config is made client-side from the cluster's nodes and keys.
    "clusters:ssh_config": [Action("getCluster", "clusters ssh-config", "cluster_status")],
    "clusters:add_workers": [Action("addWorkers", "clusters add-workers", "add_workers")],
    "clusters:sync_volume": [Action("syncVolume", "volumes sync", "sync_volume")],
    "clusters:network_test": [Action("startNetworkTest", "clusters network-test", "start_network_test")],
    # Always refused everywhere (a node ends with its cluster); MCP says so through terminate_instance.
    "clusters:node_terminate": [Action("terminateNode", "clusters terminate-node", "terminate_instance")],
    "clusters:replace_node": [Action("replaceNode", "clusters replace-node", "replace_node")],
    "metrics:cluster_series": [Action("getClusterMetrics", "clusters top", "cluster_metrics")],
    "offers:list": [Action("listClusterOffers", "clusters offers", "list_cluster_offers")],
    "accounts:members": [Action("listMembers", "members list", "list_members"),
                         Action("listInvitations", "invitations list", "list_invitations"),
                         Action("createInvitation", "invitations create", "invite_member")],
    "accounts:member_role": [Action("changeMemberRole", "members set-role", "change_member_role")],
    "accounts:member_remove": [Action("removeMember", "members remove", "remove_member")],
    "accounts:invitation_revoke": [Action("revokeInvitation", "invitations revoke", "revoke_invitation")],
    "accounts:workspaces": [Action("listWorkspaces", "workspaces", "list_workspaces")],
    "accounts:ssh_keys": [Action("listSshKeys", "ssh-keys list", "list_ssh_keys"),
                          Action("createSshKey", "ssh-keys add", "add_ssh_key")],
    "accounts:ssh_key_delete": [Action("deleteSshKey", "ssh-keys delete", "delete_ssh_key")],
    "accounts:environments": [Action("listEnvironments", "environments", "list_environments"),
                              Action("createEnvironment", "environments create", "create_environment")],
    "accounts:environment_budget": [Action("updateEnvironment", "environments set-budget", "set_environment_budget")],
    "accounts:environment_idle_notice": [Action("updateEnvironment", "environments set-idle-notice", "set_idle_notice")],
    "clusters:quotas": [Action("listQuotas", "quotas", "list_quotas"), Action("setQuota", "quotas set", "set_quota")],
    "clusters:quota_delete": [Action("deleteQuota", "quotas delete", "delete_quota")],
    "billing:header": [Action("getBalance", "billing balance", "billing_balance")],
    "billing:overview": [Action("getBalance", "billing balance", "billing_balance"),
                         Action("listUsage", "billing usage", "cluster_usage")],
    "billing:usage_detail": [Action("getUsageLine", "billing usage-line", "cluster_usage")],
    # The CSV holds the usage lines with their machine rows: `billing usage --rows --json`.
    "billing:export_csv": [Action("listUsage", "billing usage", "cluster_usage")],
    "quotes:request": [Action("createQuote", "quote", "request_quote")],
    "webhooks:list": [Action("listWebhookEndpoints", "webhooks list", "list_webhooks"),
                      Action("createWebhookEndpoint", "webhooks add", "add_webhook")],
    "webhooks:detail": [Action("updateWebhookEndpoint", "webhooks update", "update_webhook"),
                        Action("listWebhookDeliveries", "webhooks deliveries", "webhook_deliveries")],
    "webhooks:test": [Action("testWebhookEndpoint", "webhooks test", "test_webhook")],
    "webhooks:rotate_secret": [Action("rotateWebhookSecret", "webhooks rotate-secret", "rotate_webhook_secret")],
    "webhooks:delete": [Action("deleteWebhookEndpoint", "webhooks remove", "delete_webhook")],
    "webhooks:resend": [Action("resendWebhookDelivery", "webhooks resend", "resend_webhook_delivery")],
    "api:keys": [Action("listApiKeys", "api-keys list", "list_api_keys"),
                 Action("createApiKey", "api-keys create", "create_api_key")],
    "api:key_deactivate": [Action("updateApiKey", "api-keys deactivate", "set_api_key_active")],
    "api:key_reactivate": [Action("updateApiKey", "api-keys reactivate", "set_api_key_active")],
    "api:key_delete": [Action("deleteApiKey", "api-keys delete", "delete_api_key")],
    "audit:log": [Action("listAuditEvents", "audit", "audit_events")],
    # One entry, and the CSV of every matching entry: the same list, by object or `--all --json`.
    "audit:entry": [Action("listAuditEvents", "audit", "audit_events")],
    "audit:export": [Action("listAuditEvents", "audit", "audit_events")],
}

DASHBOARD_ONLY: dict[str, str] = {
    "accounts:switch_workspace": "A key acts only in the workspace it was made in (issue 21): another workspace "
                                 "is reached with a key made there, not by switching.",
    "accounts:switch_environment": "Chosen per request instead: X-Environment, `runcrate -e`, RUNCRATE_ENVIRONMENT.",
    "accounts:invitation": "Accepting is signing up or in as the invited address, in a browser; a key cannot "
                           "stand for a person who is not a member yet.",
    "accounts:welcome": "The first page of a person without a workspace; a key always has one.",
    "accounts:workspace_leave": "Leaving revokes the leaver's keys (issue 21), the one making the call included; "
                                "done signed in, where the consequence is shown.",
    "accounts:sso": "Single sign-on: connecting the workspace's identity provider is an Owner's one-time set-up done "
                    "beside the provider's console, and linking and signing in through it are a person's own "
                    "credentials, in a browser; a key is neither (docs/accounts.md).",
    "sso:sign_in": "Signing in through the workspace's identity provider, in a browser.",
    "billing:top_up": "Card payment through Stripe Checkout, in a browser.",
    "billing:dev_top_up": "Development-only stand-in for the card payment.",
    "billing:auto_recharge": "Saves a card with Stripe, in a browser.",
    "billing:save_card": "Stripe's card form, in a browser.",
    "billing:stripe_webhook": "Stripe's callback to the server, not a customer action.",
    "quotes:thanks": "The confirmation page after the quote form.",
    "notifications:settings": "A person's own email preferences; keys act for the workspace, not for an inbox.",
    "clusters:recreate": "A create form pre-filled from an old cluster: the create endpoint takes the same "
                         "fields (`clusters info --json` prints them).",
    "api:openapi": "The API's own description.",
    "api:docs": "The API's own documentation page.",
}

# Whole groups that are no part of the product's own pages.
NOT_PRODUCT_NAMESPACES = {"admin"}  # the operators' console
NOT_PRODUCT_MODULES = ("allauth.",)  # sign-in, sign-up, password and two-factor: a person's own credentials


def dashboard_actions() -> Iterator[str]:
    """Every named page or form post of the product, from the URLconf."""

    def walk(patterns: list, namespace: str | None) -> Iterator[tuple[str | None, URLPattern]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, pattern.namespace or namespace)
            elif pattern.name:
                yield namespace, pattern

    for namespace, pattern in walk(get_resolver().url_patterns, None):
        module = pattern.callback.__module__
        if namespace in NOT_PRODUCT_NAMESPACES or module.startswith(NOT_PRODUCT_MODULES):
            continue
        if module == "api.app" or (namespace or "").startswith("api:v1") or pattern.name == "api-root":
            continue  # the API's own operations
        assert namespace, f"{pattern.name} ({module}) has no namespace: name it for this test"
        yield f"{namespace}:{pattern.name}"


def cli_command(path: str) -> click.Command | None:
    command: click.Command | None = cli_main
    ctx = click.Context(cli_main)
    for word in path.split():
        if not isinstance(command, click.Group):
            return None
        command = command.get_command(ctx, word)
    return command


@pytest.fixture(scope="module")
def operation_ids() -> set[str]:
    from api.pages import schema

    return {op["operationId"] for item in schema()["paths"].values() for op in item.values() if "operationId" in op}


@pytest.fixture(scope="module")
def mcp_tools() -> set[str]:
    server = build_server(ClientConfig(api_key="rc_live_parity", api_url="http://127.0.0.1:9", environment=None))
    return {tool.name for tool in asyncio.run(server.list_tools())}


def test_every_dashboard_action_is_mapped_or_justified_as_dashboard_only():
    found = set(dashboard_actions())
    assert found, "no dashboard URLs found: the URLconf walk is broken"
    unmapped = found - set(SURFACES) - set(DASHBOARD_ONLY)
    assert not unmapped, f"dashboard actions with no API/CLI/MCP mapping and no reason to be dashboard-only: {sorted(unmapped)}"
    stale = (set(SURFACES) | set(DASHBOARD_ONLY)) - found
    assert not stale, f"mapped actions the dashboard no longer has: {sorted(stale)}"
    assert not set(SURFACES) & set(DASHBOARD_ONLY)


def test_every_mapped_action_exists_on_the_api_the_cli_and_mcp(operation_ids, mcp_tools):
    missing = []
    for name, actions in SURFACES.items():
        for action in actions:
            if action.operation not in operation_ids:
                missing.append(f"{name}: no API operation {action.operation}")
            if cli_command(action.cli) is None:
                missing.append(f"{name}: no CLI command `runcrate {action.cli}`")
            if action.mcp not in mcp_tools:
                missing.append(f"{name}: no MCP tool {action.mcp}")
    assert not missing, "\n".join(missing)


def test_the_check_notices_a_missing_surface(mcp_tools):
    assert cli_command("members set-role") is not None
    assert cli_command("members promote") is None
    assert "remove_member" in mcp_tools and "remove_everyone" not in mcp_tools


# What a create takes, by its dashboard field: the API body's name for it (the CLI's option and
# the MCP tools' arguments are named as the API's).
CREATE_FIELDS = {"name": "name", "offer": "offer_id", "machines": "machines", "software": "software",
                 "image": "image", "volume": "volume_id", "ssh_keys": "ssh_key_ids"}


def test_every_field_of_the_create_form_is_taken_by_the_api_the_cli_and_mcp(mcp_tools):
    from api.pages import schema
    from clusters.forms import CreateClusterForm

    form_fields = set(CreateClusterForm.base_fields)
    assert form_fields == set(CREATE_FIELDS), "map the create form's new field to the API body's name for it"
    wanted = set(CREATE_FIELDS.values())
    document = schema()
    body = set(document["components"]["schemas"]["CreateCluster"]["properties"])
    assert wanted <= body, f"POST /clusters lacks {sorted(wanted - body)}"
    command = cli_command("clusters create")
    assert command is not None
    options = {param.name for param in command.params}
    assert wanted <= options, f"`runcrate clusters create` lacks {sorted(wanted - options)}"
    server = build_server(ClientConfig(api_key="rc_live_parity", api_url="http://127.0.0.1:9", environment=None))
    tools = {tool.name: tool for tool in asyncio.run(server.list_tools())}
    for name in ("plan_cluster", "create_cluster"):
        arguments = set(tools[name].input_schema["properties"])
        assert wanted <= arguments, f"MCP {name} lacks {sorted(wanted - arguments)}"
