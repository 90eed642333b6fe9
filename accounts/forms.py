from __future__ import annotations

from decimal import Decimal
from typing import Any

from allauth.account.forms import LoginForm
from django import forms
from django.core.exceptions import ValidationError

from accounts.models import Environment, Membership, Role, Workspace
from config.money import AmountField


class InviteForm(forms.Form):
    email = forms.EmailField(max_length=254, widget=forms.EmailInput(attrs={"placeholder": "teammate@example.com"}))
    role = forms.ChoiceField(choices=Role.choices, initial=Role.DEVELOPER)


class WorkspaceNameForm(forms.Form):
    name = forms.CharField(max_length=100, widget=forms.TextInput(attrs={"placeholder": "e.g. Acme Research"}))


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class SSHKeyForm(forms.Form):
    name = forms.CharField(max_length=100)
    public_key = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "placeholder": "ssh-ed25519 AAAA… you@laptop"}))


class EnvironmentForm(forms.Form):
    name = forms.SlugField(max_length=50)
    monthly_budget = AmountField(min_value=Decimal("0"), max_digits=12, decimal_places=2, initial=Decimal("1000"),
                                 label="Monthly budget ($)")


class BudgetForm(forms.Form):
    monthly_budget = AmountField(min_value=Decimal("0"), max_digits=12, decimal_places=2)


class IdleNoticeForm(forms.Form):
    idle_notice_hours = forms.DecimalField(min_value=0, max_value=168, max_digits=5, decimal_places=2)


class MemberChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.user.get_username()} ({obj.get_role_display()})"


class QuotaForm(forms.Form):
    """Whom a quota binds (a member, each member with a role, or everyone together), where (an
    environment or all of them), and its limits; empty limits are no limit."""

    member = MemberChoiceField(queryset=Membership.objects.none(), required=False, empty_label="—",
                               help_text="One member; or leave it and pick a role, or neither for everyone together.")
    role = forms.ChoiceField(choices=[("", "—"), *Role.choices], required=False,
                             help_text="Each member with this role, on their own.")
    environment = forms.ModelChoiceField(queryset=Environment.objects.none(), required=False,
                                         empty_label="Every environment")
    max_gpus = forms.IntegerField(min_value=0, max_value=100_000, required=False, label="Most GPUs running at once")
    monthly_spend = AmountField(min_value=Decimal("0"), max_digits=12, decimal_places=2, required=False,
                                label="Most spend a month ($)")

    def __init__(self, *args: Any, workspace: Workspace, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        member = self.fields["member"]
        assert isinstance(member, forms.ModelChoiceField)
        member.queryset = Membership.objects.filter(workspace=workspace).select_related("user")
        environment = self.fields["environment"]
        assert isinstance(environment, forms.ModelChoiceField)
        environment.queryset = Environment.objects.filter(workspace=workspace)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("member") and cleaned.get("role"):
            self.add_error("role", "A quota binds one member or one role, not both.")
        if cleaned.get("max_gpus") is None and cleaned.get("monthly_spend") is None and not self.errors:
            self.add_error("max_gpus", "Set the most GPUs, the most spend a month, or both.")
        return cleaned


class SignInForm(LoginForm):
    """allauth's sign-in form in the product's words."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["login"].label = "Email or username"
        if "remember" in self.fields:
            self.fields["remember"].label = "Keep me signed in on this computer"


def apply_errors(form: forms.Form, error: ValidationError) -> None:
    """A service's ValidationError shown on the form: under its field when the form has it."""
    if hasattr(error, "error_dict"):
        for field, errors in error.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, error.messages)


class SingleSignOnForm(forms.Form):
    issuer = forms.URLField(max_length=500, assume_scheme="https",
                            widget=forms.URLInput(attrs={"placeholder": "https://login.example.com/realms/acme"}),
                            help_text="The provider's issuer URL; its /.well-known/openid-configuration is read.")
    client_id = forms.CharField(max_length=255, label="Client ID")
    secret = forms.CharField(max_length=1000, required=False, label="Client secret", strip=True,
                             widget=forms.PasswordInput(render_value=False),
                             help_text="Stored sealed. Leave empty to keep the one stored.")
    required = forms.BooleanField(required=False, label="Require single sign-on for everyone but Owners")


class SingleSignOnAddressForm(forms.Form):
    email = forms.EmailField(max_length=254, label="Work email",
                             widget=forms.EmailInput(attrs={"placeholder": "you@company.com", "autocomplete": "email"}))
