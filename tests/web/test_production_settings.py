"""Production settings refuse to start when a Stripe key is set without the webhook secret."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]


def load_settings(**env: str | None) -> subprocess.CompletedProcess:
    """Import the settings in a fresh interpreter; a variable given as None is left unset."""
    merged: dict[str, str | None] = {
        k: v for k, v in os.environ.items() if not k.startswith(("STRIPE_", "DEBUG", "RUNCRATE_TESTING"))
    }
    merged.update({"SECRET_KEY": "x" * 60, "ALLOWED_HOSTS": "example.com", "DEBUG": "0",
                   "NODE_SECRETS_KEY": "mJ6Qk3bVw0gkq4w2wz0Sx1wq1v0yZbq4m8nB9YzQv2c=", **env})
    clean = {k: v for k, v in merged.items() if v is not None}
    return subprocess.run(
        [sys.executable, "-c", "import config.settings"], cwd=BASE_DIR, env=clean, capture_output=True, text=True,
    )


@pytest.mark.parametrize("key", ["STRIPE_SECRET_KEY", "STRIPE_PUBLISHABLE_KEY"])
def test_a_stripe_key_without_the_webhook_secret_fails_loudly(key):
    result = load_settings(**{key: "sk_live_x"})
    assert result.returncode != 0 and "STRIPE_WEBHOOK_SECRET must be set" in result.stderr


def test_stripe_keys_with_the_webhook_secret_load(tmp_path):
    result = load_settings(STRIPE_SECRET_KEY="sk_live_x", STRIPE_WEBHOOK_SECRET="whsec_x", RUNCRATE_VAR_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr


def test_the_readme_deploy_steps_include_collectstatic():
    assert "manage.py collectstatic" in (BASE_DIR / "README.md").read_text()


def test_production_without_a_node_secrets_key_fails_loudly():
    result = load_settings(NODE_SECRETS_KEY=None)
    assert result.returncode != 0 and "NODE_SECRETS_KEY must be set" in result.stderr
