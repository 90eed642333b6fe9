"""A small identity provider for the single sign-on tests: Django with django-oauth-toolkit's
OpenID Connect provider, in its own process and SQLite database (tests/live/oidc_provider/serve.py).
It shares nothing with the product but the loopback interface."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent

SECRET_KEY = os.environ["IDP_SECRET_KEY"]
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.live.oidc_provider.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["IDP_DATABASE"]}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [HERE / "templates"],
    "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
}]
USE_TZ = True
LOGIN_URL = "/login/"
# Cookies are kept per host, not per port: the provider and the product both run on
# 127.0.0.1, so the provider's cookies have names of their own.
SESSION_COOKIE_NAME = "idp_session"
CSRF_COOKIE_NAME = "idp_csrftoken"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # test users only: fast
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": os.environ["IDP_RSA_PRIVATE_KEY"],
    "OAUTH2_VALIDATOR_CLASS": "tests.live.oidc_provider.validator.ClaimsValidator",
    "PKCE_REQUIRED": True,
    "SCOPES": {"openid": "OpenID Connect", "email": "Email address", "profile": "Profile"},
}
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "root": {"handlers": [], "level": "WARNING"}}
