from __future__ import annotations

from typing import Any

from oauth2_provider.oauth2_validators import OAuth2Validator


class ClaimsValidator(OAuth2Validator):
    """The claims an enterprise provider sends: the address, whether it is verified (the
    user's `last_name` holds "unverified" for the tests' unverified people), and names."""

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        user = request.user
        return {
            "email": user.email,
            "email_verified": user.last_name != "unverified",
            "preferred_username": user.username,
            "name": user.first_name or user.username,
        }
