"""A desired slot is validated whole before anything changes: oversized chatTemplateArgs (too deep,
too large) are a 422 naming the field, and a state file that cannot be written changes nothing in
memory either. The control API keeps answering and the slot keeps serving (never half-applied)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": True}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


def view(agent: Agent) -> list[dict[str, Any]]:
    keep = ("name", "servedName", "source", "phase", "ready", "backendPort", "spec", "restarts")
    return [{k: s[k] for k in keep} for s in agent.state()["slots"]]


@pytest.fixture
def serving(agent_factory: Callable[..., Agent], model_a: Path) -> Agent:
    agent = agent_factory()
    resp = agent.put_slot("a", slot_spec(model_a, "tiny-a"))
    assert resp.status_code == 202, resp.text
    agent.wait_ready("a")
    return agent


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(nested(300), id="300-levels"),
        pytest.param(nested(9), id="9-levels"),
        pytest.param({"blob": "x" * 200_000}, id="200kb"),
    ],
)
def test_oversized_chat_template_args_are_refused_before_anything_changes(
    serving: Agent, model_a: Path, args: dict[str, Any]
) -> None:
    before = view(serving)
    spec = slot_spec(model_a, "tiny-a", server={"chatTemplateArgs": args})
    resp = serving.put_slot("a", spec)
    assert resp.status_code == 422, resp.text[:500]
    error = resp.json()["error"]
    assert error["field"].startswith("server.chatTemplateArgs"), error
    assert view(serving) == before  # GET /v1/state answers, nothing moved
    assert serving.swaps("a") == []
    fresh = serving.put_slot("b", slot_spec(model_a, "tiny-b", server={"chatTemplateArgs": args}))
    assert fresh.status_code == 422
    assert "b" not in {s["name"] for s in serving.state()["slots"]}
    # the agent still takes a valid change, persists it, and serves
    ok = slot_spec(model_a, "tiny-a", server={"chatTemplateArgs": {"enable_thinking": False}})
    assert serving.put_slot("a", ok).status_code == 202
    saved = (serving.state_dir / "slots.json").read_text()
    assert '"enable_thinking": false' in saved
    serving.wait_slot("a", lambda s: s["ready"] and s["spec"]["server"]["chatTemplateArgs"])
    reply = serving.openai().completions.create(model="tiny-a", prompt="hi", max_tokens=4)
    assert reply.choices


def test_state_that_cannot_be_saved_changes_nothing(serving: Agent, model_a: Path) -> None:
    before = view(serving)
    state_file = serving.state_dir / "slots.json"
    saved = state_file.read_text()
    state_file.unlink()
    (state_file / "in-the-way").mkdir(parents=True)  # a directory where the file goes
    try:
        change = slot_spec(model_a, "tiny-a", maxConcurrency=2)
        resp = serving.put_slot("a", change)
        assert resp.status_code >= 500, resp.text
        assert "state" in resp.json()["error"]["message"]
        added = serving.put_slot("b", slot_spec(model_a, "tiny-b"))
        assert added.status_code >= 500
        assert serving.api("DELETE", "/v1/slots/a").status_code >= 500
        assert view(serving) == before  # memory agrees with the (unchanged) file
    finally:
        shutil.rmtree(state_file)
        state_file.write_text(saved)
    assert serving.put_slot("a", slot_spec(model_a, "tiny-a", maxConcurrency=2)).status_code == 202
    assert '"maxConcurrency": 2' in state_file.read_text()
