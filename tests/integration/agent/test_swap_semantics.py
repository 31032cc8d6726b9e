"""The switch itself: an in-flight stream stays on the old backend until it ends (surge), new
requests wait in the queue and go to the new backend (hold), the old backend stops only after
its in-flight requests ended."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def test_surge_keeps_in_flight_stream_on_a_and_sends_new_requests_to_b(
    agent_factory: Callable[..., Agent], model_a: Path, model_b: Path
) -> None:
    agent = agent_factory()
    assert agent.put_slot("s", slot_spec(model_a, "tiny")).status_code == 202
    port_a = agent.wait_ready("s")["backendPort"]
    [backend_a] = agent.backends()

    client = agent.openai(timeout=60.0)
    raw = client.chat.completions.with_raw_response.create(
        model="tiny",
        messages=[{"role": "user", "content": "a long one"}],
        max_tokens=3000,
        stream=True,
    )
    assert int(raw.headers["x-mlxfleet-backend"]) == port_a
    chunks = iter(raw.parse())
    next(chunks)

    resp = agent.put_slot("s", slot_spec(model_b, "tiny", swap={"strategy": "surge"}))
    assert resp.status_code == 202
    deadline = time.monotonic() + 60
    while not (agent.swaps("s") and agent.swaps("s")[0]["switchedAt"]):
        assert time.monotonic() < deadline, agent.log_tail()
        time.sleep(0.05)
    port_b = agent.slot("s")["backendPort"]
    assert port_b != port_a
    new = client.completions.with_raw_response.create(model="tiny", prompt="x", max_tokens=3)
    assert int(new.headers["x-mlxfleet-backend"]) == port_b
    assert backend_a.is_running(), "A stopped while a stream was still on it"
    assert agent.swaps("s")[0]["oldDrainedAt"] is None

    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    ended = time.time()
    assert finish[-1] == "length"
    record = agent.wait_swap("s", 1)
    assert record["outcome"] == "Completed"
    assert record["strategy"] == "surge"
    assert _ts(record["oldDrainedAt"]) >= _ts(record["switchedAt"])
    assert _ts(record["oldDrainedAt"]) <= ended + 1.0
    assert record["requestsServed"] >= 2
    assert record["requestsFailed"] == 0
    backend_a.wait(timeout=30)
    assert not psutil.pid_exists(backend_a.pid) or backend_a.status() == "zombie"


def test_hold_queues_new_requests_and_releases_them_to_b(
    agent_factory: Callable[..., Agent], model_a: Path, model_b: Path
) -> None:
    agent = agent_factory()
    assert agent.put_slot("s", slot_spec(model_a, "tiny")).status_code == 202
    port_a = agent.wait_ready("s")["backendPort"]
    resp = agent.put_slot("s", slot_spec(model_b, "tiny", swap={"strategy": "hold"}))
    assert resp.status_code == 202
    deadline = time.monotonic() + 30
    while agent.slot("s")["ready"]:
        assert time.monotonic() < deadline
        time.sleep(0.01)

    answers: list[Any] = []

    def ask() -> None:
        answers.append(
            httpx.post(
                agent.data_url + "/v1/completions",
                json={"model": "tiny", "prompt": "x", "max_tokens": 3},
                timeout=60,
            )
        )

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert agent.slot("s")["queued"] > 0 or agent.swaps("s")[0]["outcome"] is not None
    for t in threads:
        t.join(timeout=60)
    record = agent.wait_swap("s", 1)
    port_b = agent.slot("s")["backendPort"]
    assert record["strategy"] == "hold"
    assert record["outcome"] == "Completed"
    assert port_b != port_a
    assert [a.status_code for a in answers] == [200] * 4
    assert {int(a.headers["x-mlxfleet-backend"]) for a in answers} == {port_b}
    assert record["maxQueueWaitMs"] > 0
    assert record["requestsServed"] == 4
    assert _ts(record["oldStoppedAt"]) <= _ts(record["newReadyAt"]), "hold: A stops before B loads"


def test_swap_record_echoes_the_request_id_and_state_reports_the_agent_clock(
    agent_factory: Callable[..., Agent], model_a: Path, model_b: Path
) -> None:
    """The operator finds its own swap by the id it PUT with (not by comparing two clocks), and
    reads the agent's clock in /v1/state to put the record's times on its own."""
    agent = agent_factory()
    assert agent.put_slot("s", slot_spec(model_a, "tiny")).status_code == 202
    agent.wait_ready("s")
    before = time.time()
    now = agent.state()["now"]
    assert before - 1 <= _ts(now) <= time.time() + 1

    bad = agent.api("PUT", "/v1/slots/s?requestId=no%20spaces", json=slot_spec(model_b, "tiny"))
    assert bad.status_code == 422, bad.text
    assert "requestId" in bad.text
    assert agent.slot("s")["spec"]["source"] == slot_spec(model_a, "tiny")["source"]  # unchanged

    uid = "0b6c1a52-6a8e-4c55-9d5e-2f1f3f1b7c11.0"
    put = agent.api("PUT", f"/v1/slots/s?requestId={uid}", json=slot_spec(model_b, "tiny"))
    assert put.status_code == 202, put.text
    record = agent.wait_swap("s", 1)
    assert record["outcome"] == "Completed"
    assert record["requestId"] == uid
    again = agent.api("PUT", f"/v1/slots/s?requestId={uid}", json=slot_spec(model_b, "tiny"))
    assert again.status_code == 202  # the same request again: no second swap
    assert agent.put_slot("s", slot_spec(model_a, "tiny")).status_code == 202  # no id
    back = agent.wait_swap("s", 2)
    assert back["outcome"] == "Completed"
    assert back.get("requestId") is None
    assert [r.get("requestId") for r in agent.swaps("s")] == [None, uid]
