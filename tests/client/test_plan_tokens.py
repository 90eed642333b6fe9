from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runcrate_client.mcp_common import PlanSigner, PlanTokenError

HERE = {"workspace_id": 7, "environment_id": 70}
PLAN = {"offer_id": "off_1", "machines": 4, "software": "slurm", "name": "train", "volume_id": None,
        "ssh_key_ids": ["k2", "k1"]}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def signer(clock: Clock) -> PlanSigner:
    return PlanSigner(secret=b"s" * 32, ttl=600, clock=clock)


def test_a_token_verifies_for_the_plan_it_was_issued_for(signer: PlanSigner) -> None:
    token, expires_at = signer.issue(PLAN, "78.40", HERE)
    payload = signer.verify(token, {**PLAN, "software": "Slurm", "ssh_key_ids": ["k1", "k2"]}, HERE)
    assert payload["price_per_hour"] == "78.40"
    assert expires_at == 1_000_600.0


def test_a_token_planned_for_the_default_image_verifies_without_one_and_not_for_a_named_one(signer: PlanSigner) -> None:
    token, _ = signer.issue({**PLAN, "image": None}, "78.40", HERE)
    signer.verify(token, {**PLAN, "image": ""}, HERE)
    with pytest.raises(PlanTokenError, match="image"):
        signer.verify(token, {**PLAN, "image": "pytorch"}, HERE)


def test_it_expires(signer: PlanSigner, clock: Clock) -> None:
    token, _ = signer.issue(PLAN, "78.40", HERE)
    clock.now += 601
    with pytest.raises(PlanTokenError, match="expired"):
        signer.verify(token, PLAN, HERE)


@pytest.mark.parametrize("change", [{"machines": 8}, {"offer_id": "off_2"}, {"software": "ray"}, {"name": "other"},
                                    {"volume_id": "vol_1"}, {"ssh_key_ids": []}, {"image": "base"}])
def test_it_refuses_other_arguments(signer: PlanSigner, change: dict) -> None:
    token, _ = signer.issue(PLAN, "78.40", HERE)
    with pytest.raises(PlanTokenError, match="differ from the plan"):
        signer.verify(token, {**PLAN, **change}, HERE)


def test_it_refuses_another_environment_of_the_same_workspace(signer: PlanSigner) -> None:
    token, _ = signer.issue(PLAN, "78.40", HERE)
    with pytest.raises(PlanTokenError, match="another environment"):
        signer.verify(token, PLAN, {**HERE, "environment_id": 71})


def test_a_token_planned_in_one_workspace_is_refused_in_another_that_shares_the_secret(signer: PlanSigner) -> None:
    # Two MCP servers, one RUNCRATE_MCP_SECRET, keys of two workspaces whose environments are
    # both named "default": the ids tell them apart.
    elsewhere = PlanSigner(secret=b"s" * 32, ttl=600, clock=signer.clock)
    token, _ = signer.issue(PLAN, "78.40", HERE)
    with pytest.raises(PlanTokenError, match="another workspace"):
        elsewhere.verify(token, PLAN, {"workspace_id": 8, "environment_id": 80})


def test_a_token_without_ids_is_refused(signer: PlanSigner) -> None:
    token, _ = signer.issue(PLAN, "78.40", {})
    with pytest.raises(PlanTokenError, match="another workspace"):
        signer.verify(token, PLAN, {"workspace_id": None, "environment_id": None})


def test_a_token_from_another_secret_is_refused(signer: PlanSigner, clock: Clock) -> None:
    other = PlanSigner(secret=b"x" * 32, clock=clock)
    token, _ = other.issue(PLAN, "78.40", HERE)
    with pytest.raises(PlanTokenError, match="not issued by this server"):
        signer.verify(token, PLAN, HERE)


@given(st.text(max_size=200))
def test_garbage_is_refused_not_crashing(garbage: str) -> None:
    signer = PlanSigner(secret=b"s" * 32)
    with pytest.raises(PlanTokenError):
        signer.verify(garbage, PLAN, HERE)


def test_a_tampered_payload_is_refused(signer: PlanSigner) -> None:
    import base64
    import json

    token, _ = signer.issue(PLAN, "78.40", HERE)
    prefix, body, signature = token.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["machines"] = 64
    forged = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    with pytest.raises(PlanTokenError, match="not issued by this server"):
        signer.verify(f"{prefix}.{forged}.{signature}", {**PLAN, "machines": 64}, HERE)
