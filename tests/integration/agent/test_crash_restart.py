"""Crashes: the agent killed with SIGKILL comes back with its slots; a backend killed mid-stream
fails that stream cleanly (an error event, not a hang) and the next request is served again."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import openai
import psutil
import pytest

from tests.integration.agent.conftest import Agent, backend_processes_using, slot_spec

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]


def _wait_gone(pids: list[int], timeout_s: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    alive = pids
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def test_sigkilled_agent_restores_its_slots_and_leaves_no_orphans(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    agent = agent_factory()
    assert agent.put_slot("a", slot_spec(model_a, "tiny-a")).status_code == 202
    agent.wait_ready("a")
    old_backends = [p.pid for p in agent.backends()]
    assert len(old_backends) == 1

    client = agent.openai(timeout=30.0)
    stream = client.chat.completions.create(
        model="tiny-a",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=400,
        stream=True,
    )
    next(iter(stream))  # the agent is serving this stream when it dies
    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait(timeout=10)
    with pytest.raises((openai.APIError, openai.APIConnectionError)):
        for _ in stream:
            pass

    assert _wait_gone(old_backends) == [], "backend outlived its agent"

    again = agent_factory(state_dir=agent.state_dir)
    slot = again.wait_ready("a")
    assert slot["servedName"] == "tiny-a"
    assert slot["source"] == f"file://{model_a}"
    reply = again.openai(timeout=30.0).completions.create(model="tiny-a", prompt="hi", max_tokens=4)
    assert reply.choices[0].finish_reason == "length"
    assert [p.pid for p in backend_processes_using(again.state_dir)] == [
        p.pid for p in again.backends()
    ]


def test_backend_killed_mid_stream_fails_that_stream_and_recovers(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    agent = agent_factory()
    assert agent.put_slot("a", slot_spec(model_a, "tiny-a")).status_code == 202
    first = agent.wait_ready("a")
    [backend] = agent.backends()

    client = agent.openai(timeout=30.0)
    stream = client.chat.completions.create(
        model="tiny-a",
        messages=[{"role": "user", "content": "tell me a long story"}],
        max_tokens=2000,
        stream=True,
    )
    chunks = iter(stream)
    next(chunks)
    backend.kill()
    started = time.monotonic()
    with pytest.raises(openai.APIError) as caught:
        for _ in chunks:
            pass
    assert time.monotonic() - started < 10, "the broken stream hung"
    assert "backend" in str(caught.value)

    slot = agent.wait_slot("a", lambda s: s["ready"] and s["restarts"] >= 1)
    assert slot["backendPort"] != first["backendPort"]
    assert "exited" in (slot["lastError"] or "")
    reply = client.completions.create(model="tiny-a", prompt="hi", max_tokens=4)
    assert reply.choices[0].text
    assert not psutil.pid_exists(backend.pid) or backend.status() == "zombie"


def test_sigterm_drains_and_stops_backends(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    agent = agent_factory()
    assert agent.put_slot("a", slot_spec(model_a, "tiny-a")).status_code == 202
    agent.wait_ready("a")
    pids = [p.pid for p in agent.backends()]
    client = agent.openai(timeout=60.0)
    stream = client.chat.completions.create(
        model="tiny-a",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=300,
        stream=True,
    )
    chunks = iter(stream)
    next(chunks)
    agent.proc.send_signal(signal.SIGTERM)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "length", "the in-flight stream was cut by the shutdown"
    assert agent.proc.wait(timeout=60) == 0
    assert _wait_gone(pids) == []
