"""Members, invitations, API keys, budgets and volumes: the dashboard's workspace pages as tools.
The server checks every role (Owners change roles; Owners and Managers invite, remove and set
budgets; a key's creator or an admin manages a key); a refusal comes back as the tool's error."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from runcrate_client.client import Client
from runcrate_client.mcp_common import READ_ONLY, ToolContext, api_errors_as_tool_errors

CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)
REMOVES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=True)


def register(mcp: MCPServer, tools: ToolContext) -> None:
    _register_people(mcp, tools.client)
    _register_keys_budgets_volumes(mcp, tools.client)


def _register_people(mcp: MCPServer, client: Client) -> None:

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_members() -> dict[str, Any]:
        """Members of the workspace: id (what change_member_role and remove_member take), username, email,
        role (owner / manager / developer) and `you` for the key's own member."""
        return {"members": client.members.list_all()}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def change_member_role(member_id: int | str, role: str) -> dict[str, Any]:
        """Give a member a role: owner, manager or developer. Only an Owner may; one Owner always stays."""
        return {"member": client.members.change_role(member_id, role=role)}

    @mcp.tool(annotations=REMOVES)
    @api_errors_as_tool_errors
    def remove_member(member_id: int | str) -> dict[str, Any]:
        """Remove a member (only when the user asked): their pending invitations close and their API keys
        in this workspace stop for good."""
        return {"removed": client.members.remove(member_id)}

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_invitations() -> dict[str, Any]:
        """Pending invitations into the workspace (Owners and Managers)."""
        return {"invitations": client.members.list_invitations_all()}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def invite_member(email: str, role: str = "developer") -> dict[str, Any]:
        """Invite an email address with a role (developer, manager; owner only by an Owner); they get a link."""
        return {"invitation": client.members.create_invitation(email=email, role=role)}

    @mcp.tool(annotations=REMOVES)
    @api_errors_as_tool_errors
    def revoke_invitation(invitation_id: int | str) -> dict[str, Any]:
        """Revoke a pending invitation (Owners and Managers): its emailed link stops working at once."""
        return {"invitation": client.members.revoke_invitation(invitation_id)}



def _register_keys_budgets_volumes(mcp: MCPServer, client: Client) -> None:
    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_api_keys() -> dict[str, Any]:
        """API keys of the workspace (name, prefix, active, who made it, last used; never the key itself)."""
        return {"api_keys": client.api_keys.list_all()}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def create_api_key(name: str) -> dict[str, Any]:
        """Make an API key acting here with the user's role. The whole key is in this answer only: hand it to
        the user and do not repeat it elsewhere."""
        return {"api_key": client.api_keys.create(name=name)}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def set_api_key_active(key_id: int | str, active: bool) -> dict[str, Any]:
        """Deactivate (active=false) or reactivate (active=true) an API key. A key revoked because its
        creator left cannot come back."""
        return {"api_key": client.api_keys.update(key_id, is_active=active)}

    @mcp.tool(annotations=REMOVES)
    @api_errors_as_tool_errors
    def delete_api_key(key_id: int | str) -> dict[str, Any]:
        """Delete an API key: anything using it is refused from now on. Never the key this server uses."""
        return {"deleted": client.api_keys.delete(key_id)}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def set_environment_budget(environment_id: int | str, monthly_budget: str) -> dict[str, Any]:
        """Set an environment's monthly budget in USD (e.g. "500"): its clusters are stopped when the month's
        spend reaches it. Owners and Managers. list_environments gives the ids."""
        return {"environment": client.account.update_environment(environment_id, monthly_budget=monthly_budget)}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def create_environment(name: str, monthly_budget: str = "1000") -> dict[str, Any]:
        """Create an environment (letters, digits, - and _) with a monthly budget in USD. Owners and Managers."""
        return {"environment": client.account.create_environment(name=name, monthly_budget=monthly_budget)}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def set_idle_notice(environment_id: int | str, hours: float) -> dict[str, Any]:
        """After how many idle hours (0 to 168, e.g. 0.5 for half an hour; 0: never) the owner of a ready
        cluster in an environment is emailed. Owners and Managers."""
        return {"environment": client.account.update_environment(environment_id, idle_notice_hours=hours)}

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_quotas() -> dict[str, Any]:
        """The workspace's quotas (the most GPUs running at once, the most spend a month) with what each member
        they bind has in use. A create, added workers or a replacement that would pass one is refused."""
        return {"quotas": client.account.list_quotas_all()}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def set_quota(member_id: int | str | None = None, role: str | None = None, environment_id: int | str | None = None,
                  max_gpus: int | None = None, monthly_spend: str | None = None) -> dict[str, Any]:
        """Set a quota (Owners): for one member (member_id from list_members), each member with a role
        (owner, manager, developer), or everyone together (neither); in one environment or all (no
        environment_id). max_gpus: GPUs running at once; monthly_spend: USD a calendar month."""
        return {"quota": client.account.set_quota(member_id=member_id, role=role, environment_id=environment_id,
                                                  max_gpus=max_gpus, monthly_spend=monthly_spend)}

    @mcp.tool(annotations=REMOVES)
    @api_errors_as_tool_errors
    def delete_quota(quota_id: int | str) -> dict[str, Any]:
        """Remove a quota (Owners): its member, role or everyone are no longer limited by it. list_quotas gives
        the ids."""
        return {"deleted": client.account.delete_quota(quota_id)}

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_volumes() -> dict[str, Any]:
        """Volumes of this environment (id, name, size_gb): attach one with volume_id in plan_cluster."""
        return {"volumes": client.volumes.list_all()}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def create_volume(name: str, size_gb: int) -> dict[str, Any]:
        """Create a volume (data kept between clusters, synced into /shared/volume on node-0)."""
        return {"volume": client.volumes.create(name=name, size_gb=size_gb)}

    @mcp.tool(annotations=REMOVES)
    @api_errors_as_tool_errors
    def delete_volume(volume_id: int | str) -> dict[str, Any]:
        """Delete a volume and its data (refused while a live cluster uses it). Only when the user asked."""
        return {"deleted": client.volumes.delete(volume_id)}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def request_quote(contact_name: str, email: str, gpu: str, machines: int, company: str = "",
                      network: str = "", term: str = "", term_months: int | None = None, start_date: str = "",
                      notes: str = "") -> dict[str, Any]:
        """Ask sales for a quote: reserved capacity, clusters over 64 machines, InfiniBand or RoCE.
        network: ethernet, infiniband or roce; term: on_demand or reserved (with term_months)."""
        return {"quote": client.quotes.create(
            contact_name=contact_name, email=email, gpu=gpu, machines=machines, company=company or None,
            network=network or None, term=term or None, term_months=term_months, start_date=start_date or None,
            notes=notes or None)}
