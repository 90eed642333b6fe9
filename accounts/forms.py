from __future__ import annotations

from decimal import Decimal
from typing import Any

from allauth.account.forms import LoginForm
from django import forms

from accounts.models import Role
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


class SignInForm(LoginForm):
    """allauth's sign-in form in the product's words."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["login"].label = "Email or username"
        if "remember" in self.fields:
            self.fields["remember"].label = "Keep me signed in on this computer"
