"""An agent's wrong tool arguments come back in plain words, and ids may be numbers or strings."""

from __future__ import annotations

import asyncio

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from runcrate_client.api import ClientConfig
from runcrate_client.mcp_server import build_server

# Port 9 (discard) on loopback: nothing answers, so a call that passes validation fails on transport.
CONFIG = ClientConfig(api_key="rc_live_test", api_url="http://127.0.0.1:9", environment=None)


def call(tool: str, arguments: dict) -> str:
    server = build_server(CONFIG)
    with pytest.raises(ToolError) as raised:
        asyncio.run(server.call_tool(tool, arguments))
    return str(raised.value)


def test_wrong_arguments_are_named_in_plain_words_without_pydantics_text():
    message = call("plan_cluster", {"offer_id": {"x": 1}, "machines": "two"})
    assert message == ("plan_cluster was called with wrong arguments: offer_id must be an id: a number or a string "
                       "of digits; machines must be a whole number; name is required. Call it again with them corrected.")
    assert "pydantic" not in message and "input_value" not in message


@pytest.mark.parametrize("offer_id", [7, "7"])
def test_an_offer_id_may_be_a_number_or_a_string(offer_id):
    message = call("plan_cluster", {"offer_id": offer_id, "machines": 2, "name": "train"})
    assert "Runcrate API unavailable" in message and "wrong arguments" not in message  # on to the (absent) server
