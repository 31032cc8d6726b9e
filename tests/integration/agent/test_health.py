"""`GET /health` on the agent's data plane, as vLLM and mlx_lm answer it (issue 28 item 13):
load and benchmark tools for OpenAI-compatible servers probe it before they start and give up
when it is missing. 200 while a slot serves, 503 while none does; open without a credential
(as vLLM's is, even with an API key) and it names nothing (no model, no slot, no count)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = pytest.mark.mlx


def test_health_is_503_until_a_slot_serves_then_200_without_a_credential(
    agent_factory: Callable[..., Agent], model_a: Path, tmp_path: Path
) -> None:
    keys = tmp_path / "data-keys"
    keys.write_text("fleet-secret-key\n")
    agent = agent_factory(extra=["--data-api-keys-file", str(keys)])

    idle = httpx.get(agent.data_url + "/health", timeout=10)
    assert (idle.status_code, idle.json()) == (503, {"status": "unavailable"})

    assert agent.put_slot("a", slot_spec(model_a, "tiny-a")).status_code == 202
    agent.wait_ready("a")
    ok = httpx.get(agent.data_url + "/health", timeout=10)
    assert (ok.status_code, ok.json()) == (200, {"status": "ok"})
    assert "tiny-a" not in ok.text
    assert httpx.head(agent.data_url + "/health", timeout=10).status_code == 200
    # the rest of the data plane still wants the key
    assert httpx.get(agent.data_url + "/v1/models", timeout=10).status_code == 401
    assert httpx.post(agent.data_url + "/health", timeout=10).status_code == 405

    assert agent.api("DELETE", "/v1/slots/a").status_code in (200, 202, 204)
    deadline = time.monotonic() + 60
    while httpx.get(agent.data_url + "/health", timeout=10).status_code != 503:
        assert time.monotonic() < deadline, "GET /health still 200 after the slot was deleted"
        time.sleep(0.2)
