"""mlx_lm's one generation thread: bodies that would kill it are refused (400 naming the field)
before they reach it, and a backend whose thread died anyway is restarted, its requests in
between answered 503 (retryable), never 404. Real agent, real mlx_lm backend."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
HI = [{"role": "user", "content": "hi"}]


def _post(agent: Agent, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        agent.data_url + path, json={"model": "tiny-a", "max_tokens": 2, **body}, timeout=60
    )


def _backend_health(agent: Agent) -> int:
    port = agent.slot("a")["backendPort"]
    return httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        pytest.param(CHAT, {"messages": HI, "stop": 5}, "stop", id="stop-int"),
        pytest.param(CHAT, {"messages": HI, "stop": [1, 2]}, "stop[0]", id="stop-list-of-int"),
        pytest.param(CHAT, {"messages": HI, "stop": [{}]}, "stop[0]", id="stop-unhashable"),
        pytest.param(CHAT, {"messages": ["hi"]}, "messages[0]", id="message-not-object"),
        pytest.param(CHAT, {"messages": "hi"}, "messages", id="messages-string"),
        pytest.param(CHAT, {"messages": []}, "messages", id="messages-empty"),
        pytest.param(
            CHAT,
            {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages[0].content[0].text",
            id="text-part-without-text",
        ),
        pytest.param(
            CHAT,
            {"messages": [{"role": "user", "content": ["hi"]}]},
            "messages[0].content[0]",
            id="part-not-object",
        ),
        pytest.param(TEXT, {"prompt": 5}, "prompt", id="prompt-int"),
        pytest.param(TEXT, {"prompt": "hi", "stop": 5}, "stop", id="text-stop-int"),
        pytest.param(TEXT, {"prompt": "hi", "logit_bias": {"3": None}}, "logit_bias.3", id="bias"),
        pytest.param(TEXT, {"prompt": "hi", "n": 2}, "n", id="n-2"),
        pytest.param(
            CHAT,
            {"messages": HI, "chat_template_kwargs": "x"},
            "chat_template_kwargs",
            id="template-kwargs",
        ),
    ],
)
def test_bodies_mlx_lm_chokes_on_are_400_and_the_backend_serves_on(
    serving_agent: Agent, path: str, body: dict[str, Any], param: str
) -> None:
    for stream in (False, True):
        resp = _post(serving_agent, path, {**body, "stream": stream})
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["param"] == param, error
        assert "must" in error["message"] or "required" in error["message"], error
    assert _backend_health(serving_agent) == 200, "the backend's generation thread died"
    good = _post(serving_agent, CHAT, {"messages": HI})
    assert good.status_code == 200, good.text
    assert serving_agent.slot("a")["restarts"] == 0


def test_logit_bias_beyond_the_vocabulary_is_400_and_the_backend_lives(
    serving_agent: Agent, model_a: Path
) -> None:
    """mlx_lm indexes the logits with `logit_bias` ids unchecked: one beyond the vocabulary
    killed its process (a model reload per request)."""
    vocab = json.loads((model_a / "config.json").read_text())["vocab_size"]
    port = serving_agent.slot("a")["backendPort"]
    resp = _post(serving_agent, CHAT, {"messages": HI, "logit_bias": {str(vocab): 5}})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == f"logit_bias.{vocab}"
    inside = _post(serving_agent, CHAT, {"messages": HI, "logit_bias": {str(vocab - 1): 5}})
    assert inside.status_code == 200, inside.text
    slot = serving_agent.slot("a")
    assert (slot["backendPort"], slot["restarts"]) == (port, 0)
    assert _backend_health(serving_agent) == 200


def test_bad_bodies_mlx_lm_refuses_itself_are_400_not_404(serving_agent: Agent) -> None:
    """What passes the shape check but fails inside mlx_lm (it answers 404 with the exception's
    text) is the client's 400, with mlx_lm's words."""
    resp = _post(
        serving_agent,
        CHAT,
        {"messages": [{"role": "user", "content": [{"type": "input_audio", "x": 1}]}]},
    )
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "text" in error["message"]
    assert _backend_health(serving_agent) == 200


HEALTH_INTERVAL_S = 15  # polls at ready + 0, 15, ...: the kill falls well inside the first gap


def test_a_backend_whose_generation_thread_died_is_restarted_and_503_meanwhile(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    agent = agent_factory(extra=["--health-interval-s", str(HEALTH_INTERVAL_S)])
    assert agent.put_slot("a", slot_spec(model_a, "tiny-a")).status_code == 202
    first = agent.wait_ready("a")
    port = first["backendPort"]

    # past the agent, straight to mlx_lm: its generation thread dies, the process lives on
    killer = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json={"messages": HI, "max_tokens": 2, "stop": 5},  # no model: the one it serves
        timeout=60,
    )
    assert killer.status_code == 404, killer.text
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 503

    statuses: list[int] = []
    deadline = time.monotonic() + 3 * HEALTH_INTERVAL_S + 60
    while time.monotonic() < deadline:
        resp = _post(agent, CHAT, {"messages": HI})
        statuses.append(resp.status_code)
        if resp.status_code == 503:
            error = resp.json()["error"]
            assert error["code"] == "backend_unhealthy", error
            assert error["type"] == "server_error", error
            assert resp.headers.get("retry-after"), resp.headers
        if resp.status_code == 200:
            break
        time.sleep(0.2)
    assert statuses[-1] == 200, statuses
    assert statuses[0] == 503, statuses  # the dead backend, before the agent's next poll
    assert set(statuses) == {200, 503}, statuses  # never mlx_lm's 404
    slot = agent.slot("a")
    assert slot["restarts"] >= 1
    assert slot["backendPort"] != port
    assert "unhealthy" in (slot["lastError"] or ""), slot["lastError"]
    assert _backend_health(agent) == 200
