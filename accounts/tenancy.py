"""Which workspace and environment a request acts in, and the one lookup helper for them."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.http import Http404, HttpRequest

from accounts.models import Environment, Membership, Workspace

WORKSPACE_SESSION_KEY = "workspace_id"
ENVIRONMENT_SESSION_KEY = "environment_id"


@dataclass(frozen=True)
class Tenancy:
    membership: Membership
    environment: Environment

    @property
    def workspace(self) -> Workspace:
        return self.membership.workspace


def resolve_tenancy(user: User | AnonymousUser, workspace_id: int | None, environment_id: int | None) -> Tenancy | None:
    """The membership the user picked (or their first), and an environment of that workspace."""
    if not user.is_authenticated:
        return None
    # The workspace's single sign-on comes along: every request checks it (accounts.sso).
    memberships = Membership.objects.filter(user=user).select_related("workspace", "workspace__single_sign_on")
    membership = None
    if workspace_id:
        membership = memberships.filter(workspace_id=workspace_id).first()
    membership = membership or memberships.first()
    if membership is None:
        return None
    environments = Environment.objects.filter(workspace_id=membership.workspace_id)
    environment = None
    if environment_id:
        environment = environments.filter(pk=environment_id).first()
    environment = environment or environments.filter(is_default=True).first() or environments.first()
    if environment is None:
        return None
    return Tenancy(membership=membership, environment=environment)


class NoWorkspace(Http404):
    """The signed-in user belongs to no workspace. CurrentWorkspaceMiddleware answers it with
    the page where they name one (or accept an invitation), never with a 404."""


def require_tenancy(request: HttpRequest) -> Tenancy:
    tenancy: Tenancy | None = getattr(request, "tenancy", None)
    if tenancy is None:
        raise NoWorkspace("You are not a member of any workspace.")
    return tenancy
