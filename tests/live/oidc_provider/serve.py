"""Start the test identity provider: `python -m tests.live.oidc_provider.serve PORT SPEC.json`.

SPEC names its people ({"users": [{"username", "password", "email", "verified"}]}) and its one
client ({"client": {"client_id", "secret", "redirect_uri"}}). The database is made afresh,
then Django's threaded development server answers on 127.0.0.1:PORT until it is terminated."""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    port, spec_path = int(sys.argv[1]), sys.argv[2]
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.live.oidc_provider.settings"
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.core.servers.basehttp import run
    from django.core.wsgi import get_wsgi_application
    from oauth2_provider.models import Application

    with open(spec_path) as spec_file:
        spec = json.load(spec_file)
    call_command("migrate", verbosity=0, interactive=False)
    for person in spec["users"]:
        User.objects.create_user(person["username"], person["email"], person["password"],
                                 last_name="" if person.get("verified", True) else "unverified")
    client = spec["client"]
    Application.objects.create(
        name="Runcrate Clusters", client_id=client["client_id"], client_secret=client["secret"],
        client_type=Application.CLIENT_CONFIDENTIAL, authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=client["redirect_uri"], algorithm=Application.RS256_ALGORITHM, skip_authorization=True,
    )
    run("127.0.0.1", port, get_wsgi_application(), threading=True)


if __name__ == "__main__":
    main()
