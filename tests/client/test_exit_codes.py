"""The CLI's exit code per kind of client error (the live tests drive each one through the API)."""

from __future__ import annotations

import pytest

from runcrate_client.api import ApiError, ConfigError, TransportError
from runcrate_client.cli.base import exit_code_for


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ApiError(400, "invalid", "Invalid input."), 2),
        (ApiError(401, "unauthenticated", "No."), 3),
        (ApiError(403, "forbidden", "No."), 3),
        (ApiError(402, "insufficient_credits", "Top up."), 4),
        (ApiError(404, "not_found", "Gone."), 5),
        (ApiError(409, "offer_unavailable", "Taken."), 6),
        (ApiError(429, "rate_limited", "Slow down."), 1),
        (ApiError(500, "server_error", "Oops."), 1),
        (ConfigError("no key"), 3),
        (TransportError("down"), 1),
    ],
)
def test_each_kind_of_error_has_its_exit_code(error: Exception, code: int) -> None:
    assert exit_code_for(error) == code
