"""A node's own credentials on a real agent (issue 22, items 1 and 4): a data plane beyond
loopback without a key refuses every request; the operator's keys (PUT /v1/credentials) open it
to their holder only, survive a restart, and a damaged credentials file leaves it closed, never
open; the request body is checked field by field."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import httpx

from mlxfleet_agent import contract
from tests.integration.agent.conftest import Agent

FLEET_KEY = "fleet-key-for-the-node-credential-tests"
MINE = contract.credentials.for_node((FLEET_KEY,), "mac-1")
OTHER = contract.credentials.for_node((FLEET_KEY,), "mac-2")


def models(agent: Agent, key: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.get(agent.data_url + "/v1/models", headers=headers, timeout=10)


def put(agent: Agent, body: object, **kwargs: object) -> httpx.Response:
    return agent.api("PUT", "/v1/credentials", json=body, **kwargs)


def test_beyond_loopback_the_data_plane_serves_only_its_own_key(
    agent_factory: Callable[..., Agent], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    beyond = ["--bind", "0.0.0.0"]  # what join writes: closed without a key
    agent = agent_factory(state_dir=state, extra=beyond)
    closed = models(agent, None)
    assert closed.status_code == 401
    assert "no key yet" in closed.json()["error"]["message"]
    assert models(agent, "anything").status_code == 401
    assert httpx.get(agent.data_url + "/healthz", timeout=10).status_code == 200
    assert "refuses every request" in agent.log_tail()
    assert agent.state()["credentials"] is None

    # only the control token may set the keys; the body is checked field by field
    body = MINE.model_dump(by_alias=True)
    wrong_token = put(agent, body, headers={"Authorization": "Bearer not-the-token"})
    assert wrong_token.status_code == 401
    assert httpx.put(agent.control_url + "/v1/credentials", json=body).status_code == 401
    for bad, field in (
        ({"dataPlane": ["short"]}, "dataPlane"),
        ({"dataPlane": []}, "dataPlane"),
        ({"dataPlane": MINE.data_plane, "extra": 1}, "extra"),
        ({"dataPlane": MINE.data_plane * 5}, "dataPlane"),
    ):
        refused = put(agent, bad)
        assert refused.status_code == 422, (bad, refused.text)
        assert field in refused.json()["error"]["message"], refused.text
    assert models(agent, MINE.data_plane[0]).status_code == 401  # nothing was kept

    answer = put(agent, MINE.model_dump(by_alias=True))
    assert answer.status_code == 200, answer.text
    fingerprint = contract.credentials.fingerprint(MINE)
    assert answer.json() == {"fingerprint": fingerprint}
    assert agent.state()["credentials"] == fingerprint
    assert models(agent, MINE.data_plane[0]).status_code == 200
    for wrong in (None, MINE.peer[0], OTHER.data_plane[0], FLEET_KEY):
        assert models(agent, wrong).status_code == 401, wrong
    assert (state / "credentials.json").stat().st_mode & 0o777 == 0o600
    assert agent.stop(signal.SIGTERM) == 0

    # kept across a restart
    again = agent_factory(state_dir=state, extra=beyond)
    assert again.state()["credentials"] == fingerprint
    assert models(again, MINE.data_plane[0]).status_code == 200
    assert models(again, None).status_code == 401
    assert again.stop(signal.SIGTERM) == 0

    # a damaged file: set aside, the data plane closed (never open), the operator sends again
    (state / "credentials.json").write_text('{"dataPlane": ["not-hex"]')
    damaged = agent_factory(state_dir=state, extra=beyond)
    assert damaged.state()["credentials"] is None
    assert models(damaged, None).status_code == 401
    assert models(damaged, MINE.data_plane[0]).status_code == 401
    assert (state / "credentials.json.bad").exists()
    assert "not valid" in damaged.log_tail()
    assert put(damaged, MINE.model_dump(by_alias=True)).status_code == 200
    assert models(damaged, MINE.data_plane[0]).status_code == 200


def test_keys_from_the_file_and_from_the_operator_are_both_accepted(
    agent_factory: Callable[..., Agent], tmp_path: Path
) -> None:
    """A loopback agent without a key is open (development); a key of either kind closes it."""
    assert models(agent_factory(state_dir=tmp_path / "open"), None).status_code == 200
    keys = tmp_path / "keys"
    keys.write_text("direct-client-key\n")
    agent = agent_factory(extra=["--data-api-keys-file", str(keys)])
    assert put(agent, MINE.model_dump(by_alias=True)).status_code == 200
    assert models(agent, "direct-client-key").status_code == 200
    assert models(agent, MINE.data_plane[0]).status_code == 200
    assert models(agent, None).status_code == 401
