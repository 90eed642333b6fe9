"""A real OpenID Connect identity provider for the tests, on loopback: the small Django project
in tests/live/oidc_provider (django-oauth-toolkit) in a process of its own."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings

from tests.live.processes import free_port, wait_for


@dataclass
class Person:
    username: str
    email: str
    password: str = field(default_factory=lambda: uuid.uuid4().hex)
    verified: bool = True


class IdentityProvider:
    def __init__(self, directory: Path, people: list[Person], redirect_uri: str = "") -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.url}/o"
        self.client_id = f"runcrate-{uuid.uuid4().hex[:8]}"
        self.secret = uuid.uuid4().hex + uuid.uuid4().hex
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        spec = directory / "idp.json"
        spec.write_text(json.dumps({
            "users": [vars(p) for p in people],
            "client": {"client_id": self.client_id, "secret": self.secret, "redirect_uri": redirect_uri},
        }))
        self.database = directory / "idp.sqlite3"
        env = {**os.environ, "IDP_SECRET_KEY": uuid.uuid4().hex * 2, "IDP_DATABASE": str(self.database),
               "IDP_RSA_PRIVATE_KEY": key, "PYTHONUNBUFFERED": "1"}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        self.log_path = directory / "idp.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.live.oidc_provider.serve", str(self.port), str(spec)],
            cwd=settings.BASE_DIR, env=env, stdout=self.log_path.open("w"), stderr=subprocess.STDOUT,
        )
        self._wait_until_serving()

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the identity provider exited:\n{self.log_path.read_text()[-3000:]}")
        try:
            return httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def _wait_until_serving(self) -> None:
        if not wait_for(self._answers, timeout=60):
            raise RuntimeError(f"the identity provider did not start:\n{self.log_path.read_text()[-3000:]}")

    def allow_redirect(self, uri: str) -> None:
        """Register one more redirect URI for the client, as its administrator would (the
        provider reads the row on every authorization request)."""
        with sqlite3.connect(self.database, timeout=10) as db:
            (current,) = db.execute(
                "SELECT redirect_uris FROM oauth2_provider_application WHERE client_id = ?", (self.client_id,)
            ).fetchone()
            db.execute("UPDATE oauth2_provider_application SET redirect_uris = ? WHERE client_id = ?",
                       (f"{current} {uri}".strip(), self.client_id))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
