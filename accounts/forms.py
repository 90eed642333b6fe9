from __future__ import annotations

from decimal import Decimal

from django import forms

from accounts.models import Role


class AddMemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.DEVELOPER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class SSHKeyForm(forms.Form):
    name = forms.CharField(max_length=100)
    public_key = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "placeholder": "ssh-ed25519 AAAA… you@laptop"}))


class EnvironmentForm(forms.Form):
    name = forms.SlugField(max_length=50)
    monthly_budget = forms.DecimalField(min_value=Decimal("0"), max_digits=12, decimal_places=2, initial=Decimal("1000"))


class BudgetForm(forms.Form):
    monthly_budget = forms.DecimalField(min_value=Decimal("0"), max_digits=12, decimal_places=2)
