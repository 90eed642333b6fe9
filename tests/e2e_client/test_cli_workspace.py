"""`runcrate members`, `invitations`, `api-keys` and `environments` against the real API: the
dashboard's rules, and the refusals said once in the customer's words with the right exit code."""

from __future__ import annotations

import pytest

from accounts.models import Membership
from api.keys import create_api_key
from api.models import ApiKey

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_owner_manages_members_keys_and_budgets_from_the_cli(cli, workspace, developer):
    dave = Membership.objects.get(workspace=workspace, user=developer)
    listed = cli("members", "list")
    assert listed.returncode == 0 and developer.username in listed.stdout and "developer" in listed.stdout
    changed = cli("members", "set-role", str(dave.pk), "manager")
    assert changed.returncode == 0 and changed.stdout.strip() == f"{developer.username} is now manager."

    made = cli("api-keys", "create", "laptop")
    assert made.returncode == 0, made.stderr
    raw = made.stdout.splitlines()[1]
    assert raw.startswith("rc_live_")
    key = ApiKey.objects.get(name="laptop")
    assert cli("clusters", "ls", api_key=raw).returncode == 0
    assert cli("api-keys", "deactivate", str(key.pk)).returncode == 0
    refused = cli("clusters", "ls", api_key=raw)
    assert refused.returncode == 3 and "deactivated" in refused.stderr
    assert cli("api-keys", "delete", str(key.pk), "--yes").returncode == 0
    assert not ApiKey.objects.filter(pk=key.pk).exists()

    created = cli("environments", "create", "staging", "--budget", "50")
    assert created.stdout.strip() == "Created environment staging with a budget of $50.00 a month."
    assert cli("environments", "set-idle-notice", "staging", "0").stdout.strip() == "staging: no idle notices."
    half = cli("environments", "set-idle-notice", "staging", "0.5")
    assert half.stdout.strip() == "staging: idle clusters are noticed after 0.5 h.", half.stderr


def test_a_developer_is_refused_once_in_plain_words(cli, workspace, developer, owner):
    key = create_api_key(workspace=workspace, created_by=developer, name="dev")[1]
    owner_member = Membership.objects.get(workspace=workspace, user=owner)
    refused = cli("members", "set-role", str(owner_member.pk), "developer", api_key=key)
    assert refused.returncode == 3
    assert refused.stderr.strip() == "Error (403 forbidden): Only the Owner changes roles."
    budget = cli("environments", "set-budget", "default", "1", api_key=key)
    assert budget.returncode == 3 and budget.stderr.count("Only Owners and Managers set budgets.") == 1
    missing = cli("environments", "set-budget", "nowhere", "1", api_key=key)
    assert missing.returncode == 5 and "No environment 'nowhere'" in missing.stderr
