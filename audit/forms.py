from __future__ import annotations

import datetime as dt

from django import forms

from audit.queries import Filters

# The actions the log records, offered in the filter (any other text still filters).
ACTIONS = [
    "account.sign_in", "account.sign_in_failed", "account.password_change", "account.mfa_add", "account.mfa_remove",
    "account.mfa_reset", "api_key.create", "api_key.activate", "api_key.deactivate", "api_key.delete",
    "billing.top_up_start", "billing.top_up", "billing.auto_recharge", "billing.auto_recharge_change",
    "billing.adjustment", "cluster.create", "cluster.add_workers", "cluster.replace_node", "cluster.retry_install",
    "cluster.network_test", "cluster.terminate", "environment.create", "environment.budget_change",
    "environment.idle_notice_change", "invitation.create", "invitation.revoke", "invitation.accept", "member.role_change",
    "member.remove", "member.leave", "quota.set", "quota.delete", "single_sign_on.set", "single_sign_on.remove", "ssh_key.add", "ssh_key.delete", "volume.create", "volume.delete",
    "webhook.create", "webhook.update", "webhook.rotate_secret", "webhook.delete", "workspace.create",
    "workspace.rename",
]


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=150, help_text="A username or an API key's prefix.")
    action = forms.CharField(required=False, max_length=60, help_text="cluster.terminate, or cluster for all of them.")
    object = forms.CharField(required=False, max_length=90, help_text="cluster, or cluster:12.")
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}),
                            help_text="Inclusive.")

    def clean(self) -> dict:
        cleaned = super().clean() or {}
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and until < since:
            self.add_error("until", "Pick a day on or after the start.")
        return cleaned

    def filters(self) -> Filters:
        data = self.cleaned_data
        since, until = data.get("since"), data.get("until")
        return Filters(
            actor=data.get("actor") or "", action=data.get("action") or "", object=data.get("object") or "",
            since=dt.datetime.combine(since, dt.time(), dt.UTC) if since else None,
            until=dt.datetime.combine(until + dt.timedelta(days=1), dt.time(), dt.UTC) if until else None,
        )
