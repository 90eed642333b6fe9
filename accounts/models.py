"""Tenancy: workspaces, their members and roles, environments with monthly budgets, SSH keys."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from accounts.sshkeys import parse_public_key
from config.sealing import seal, unseal


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    MANAGER = "manager", "Manager"
    DEVELOPER = "developer", "Developer"


# Who sees and is told about money: the Billing page, the API's usage, the balance and budget
# emails. One tuple, read by Membership.can_see_billing and billing_contact_ids.
BILLING_ROLES = (Role.OWNER, Role.MANAGER)


class Workspace(models.Model):
    name = models.CharField(max_length=100)
    # Cached sum of the ledger; billing.services changes it in the same transaction as
    # the ledger entry, under a row lock on this workspace.
    credit_balance = models.DecimalField(max_digits=14, decimal_places=2, default=Decimal("0.00"))
    # The burn rate: the hourly price of every machine being billed now (the sum of the open
    # usage intervals' rates), so the top bar on every page reads one row, not every machine.
    # billing.services.refresh_usage_rate recounts it in each transaction that opens or closes
    # an interval, under this row's lock; metering's balance check recounts it when it differs.
    usage_rate = models.DecimalField(max_digits=14, decimal_places=4, default=Decimal("0.0000"))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name

    @property
    def default_environment(self) -> Environment:
        return self.environments.get(is_default=True)


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.DEVELOPER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="one_membership_per_user")]
        ordering = ["workspace__name", "id"]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace} ({self.get_role_display()})"

    @property
    def can_see_billing(self) -> bool:
        return self.role in BILLING_ROLES

    @property
    def can_manage_members(self) -> bool:
        return self.role in (Role.OWNER, Role.MANAGER)

    @property
    def can_change_roles(self) -> bool:
        return self.role == Role.OWNER


class Environment(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="environments")
    name = models.CharField(max_length=50)
    is_default = models.BooleanField(default=False)
    monthly_budget = models.DecimalField(
        max_digits=12, decimal_places=2, default=Decimal("1000.00"),
        help_text="Spend in a calendar month (UTC) at which this environment's clusters are stopped.",
    )
    # Idle spend is noticed, never stopped (metrics.idle): after this many hours of every
    # machine idle the owner gets one email and one webhook a day. 0 turns the notice off;
    # parts of an hour count (0.5: half an hour).
    idle_notice_hours = models.DecimalField(
        max_digits=5, decimal_places=2, default=Decimal("2"),
        help_text="Email the owner when a ready cluster's machines stay idle this many hours (0: never).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-is_default", "name"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="environment_name_unique_in_workspace"),
            models.UniqueConstraint(
                fields=["workspace"], condition=Q(is_default=True), name="one_default_environment"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workspace} / {self.name}"


class SSHKey(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=100)
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=100, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "SSH key"
        constraints = [
            models.UniqueConstraint(fields=["workspace", "fingerprint"], name="ssh_key_unique_in_workspace")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"

    def clean(self) -> None:
        # Stored in canonical form, rebuilt from the parsed key (accounts.sshkeys).
        try:
            key = parse_public_key(self.public_key)
        except ValidationError as exc:
            raise ValidationError({"public_key": exc.messages}) from None
        self.public_key = key.line
        self.fingerprint = key.fingerprint


class Invitation(models.Model):
    """An Owner's or Manager's invitation of an email address into their workspace with a
    role. The emailed link carries a signed token naming this row (nothing secret is stored);
    the row's status and expiry decide whether the link still works."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        ACCEPTED = "accepted", "Accepted"
        REVOKED = "revoked", "Revoked"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.DEVELOPER)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    accepted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["workspace", "status"])]

    def __str__(self) -> str:
        return f"{self.email} to {self.workspace} as {self.get_role_display()} ({self.status})"

    @property
    def is_expired(self) -> bool:
        from django.utils import timezone

        return self.expires_at <= timezone.now()

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.PENDING and not self.is_expired


def billing_contact_ids(workspace_id: int) -> list[int]:
    """The members who see billing (BILLING_ROLES): who money emails go to."""
    return list(
        Membership.objects.filter(workspace_id=workspace_id, role__in=BILLING_ROLES).values_list("user_id", flat=True)
    )


class Quota(models.Model):
    """An Owner's limit on what is run: the most GPUs running at once and the most spend per
    calendar month (UTC). It binds one member (`membership`), each member with a role (`role`,
    every one of them on their own), or, with neither, everyone together; in one environment or,
    without one, across the workspace. A member's own quota replaces their role's for the same
    environment. Checked wherever machines are added (clusters.quotas), under the workspace lock."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="quotas")
    membership = models.ForeignKey(Membership, null=True, blank=True, on_delete=models.CASCADE, related_name="quotas")
    role = models.CharField(max_length=20, choices=Role.choices, blank=True)
    environment = models.ForeignKey(Environment, null=True, blank=True, on_delete=models.CASCADE, related_name="quotas")
    max_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="GPUs running at once (empty: no limit).")
    monthly_spend = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True,
        help_text="Spend in a calendar month (UTC) after which no more machines start (empty: no limit).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["environment_id", "membership_id", "role", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(membership__isnull=True) | Q(role=""), name="quota_member_or_role"),
            models.CheckConstraint(condition=Q(max_gpus__isnull=False) | Q(monthly_spend__isnull=False),
                                   name="quota_limits_something"),
            # One quota per subject and scope (NULLs are distinct in a plain unique constraint).
            models.UniqueConstraint(fields=["workspace", "membership", "role", "environment"],
                                    condition=Q(environment__isnull=False, membership__isnull=False),
                                    name="one_member_quota_per_environment"),
            models.UniqueConstraint(fields=["workspace", "membership"],
                                    condition=Q(environment__isnull=True, membership__isnull=False),
                                    name="one_member_quota_across_environments"),
            models.UniqueConstraint(fields=["workspace", "role", "environment"],
                                    condition=Q(environment__isnull=False, membership__isnull=True),
                                    name="one_role_quota_per_environment"),
            models.UniqueConstraint(fields=["workspace", "role"],
                                    condition=Q(environment__isnull=True, membership__isnull=True),
                                    name="one_role_quota_across_environments"),
        ]

    def __str__(self) -> str:
        return f"{self.subject} in {self.scope}"

    @property
    def subject(self) -> str:
        """Whom it binds, in words: "alice", "each Developer", "everyone"."""
        if self.membership is not None:
            return self.membership.user.get_username()
        if self.role:
            return f"each {self.get_role_display()}"
        return "everyone together"

    @property
    def scope(self) -> str:
        return f"environment {self.environment.name}" if self.environment is not None else "every environment"


class SingleSignOn(models.Model):
    """A workspace's OpenID Connect identity provider (docs/accounts.md, "Single sign-on").
    allauth's `openid_connect` provider signs members in through it as the provider id
    `workspace-<id>` (accounts.sso): the client secret is sealed at rest (config.sealing) and
    only unsealed to build the allauth app for a sign-in."""

    workspace = models.OneToOneField(Workspace, on_delete=models.CASCADE, related_name="single_sign_on")
    issuer = models.URLField(max_length=500)
    client_id = models.CharField(max_length=255)
    sealed_secret = models.JSONField(default=dict)
    # From the provider's discovery document when it was connected: the pages with a button
    # that posts to allauth (which redirects there) allow that origin as a form target (CSP).
    authorization_endpoint = models.URLField(max_length=500, blank=True)
    # Everyone but Owners must sign in through the provider to act in this workspace.
    required = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"Single sign-on of {self.workspace_id} through {self.issuer}"

    @property
    def provider_id(self) -> str:
        return f"workspace-{self.workspace_id}"

    @property
    def secret(self) -> str:
        return str(unseal(self.sealed_secret).get("secret", ""))

    def set_secret(self, secret: str) -> None:
        self.sealed_secret = seal({"secret": secret})
