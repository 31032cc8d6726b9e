"""Load and hang-ups on the data plane: a client that hangs up stops its generation, the slot's
`server.maxTokens` caps every request, a Ready slot admits at most `maxConcurrency` requests plus
a bounded queue (then a fast 429 with Retry-After, never a 502), and a request still running when
the shutdown drain ends gets an OpenAI-style error rather than a plain-text 500."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import pytest

from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]


def _raw_post(url: str, path: str, body: dict[str, Any]) -> socket.socket:
    """Send a whole POST on a raw socket and return the socket (the caller hangs up on it)."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def _cpu_seconds(proc: psutil.Process, over_s: float) -> float:
    before = proc.cpu_times()
    time.sleep(over_s)
    after = proc.cpu_times()
    return (after.user - before.user) + (after.system - before.system)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("/v1/completions", {"prompt": "tell me a story"}, id="completions"),
        pytest.param(
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "tell me a story"}]},
            id="chat",
        ),
        pytest.param("/v1/completions", {"prompt": "tell me a story", "stream": True}, id="stream"),
    ],
)
def test_clients_that_hang_up_free_the_backend(
    agent_factory: Callable[..., Agent], model_a: Path, path: str, body: dict[str, Any]
) -> None:
    """Four requests asking for 60,000 tokens (within the slot's context length) whose clients
    hang up: the backend stops generating (its CPU goes idle), inFlight returns to 0, and a
    normal request answers at once."""
    agent = agent_factory()
    spec = slot_spec(model_a, "tiny-a", contextLength=65536)
    assert agent.put_slot("a", spec).status_code == 202
    agent.wait_ready("a")
    [backend] = agent.backends()
    socks = [
        _raw_post(agent.data_url, path, {"model": "tiny-a", "max_tokens": 60000, **body})
        for _ in range(4)
    ]
    agent.wait_slot("a", lambda s: s["inFlight"] == 4, timeout_s=30)
    time.sleep(0.5)  # they are generating now
    generating = _cpu_seconds(backend, 2.0)
    assert generating > 0.3, "the backend is not generating: the test proves nothing"
    for sock in socks:
        sock.close()
    agent.wait_slot("a", lambda s: s["inFlight"] == 0, timeout_s=10)
    time.sleep(1.0)  # a stopped generation ends within a token or two
    busy = _cpu_seconds(backend, 2.0)
    assert busy < 0.4, f"the backend still generates for clients that left ({busy:.2f}s CPU in 2s)"
    started = time.monotonic()
    reply = httpx.post(
        agent.data_url + "/v1/completions",
        json={"model": "tiny-a", "prompt": "hi", "max_tokens": 5},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    assert time.monotonic() - started < 10


def test_max_tokens_is_capped_by_the_slot(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    """`server.maxTokens` is the most a request gets: more is clamped (finish_reason `length`),
    none means the cap; without maxTokens the slot's contextLength is the cap."""
    agent = agent_factory()
    capped = slot_spec(model_a, "capped", server={"maxTokens": 16})
    assert agent.put_slot("capped", capped).status_code == 202
    agent.wait_ready("capped")
    client = agent.openai(timeout=60.0)
    for asked in (200, None):
        max_tokens = openai.omit if asked is None else asked
        reply = client.completions.create(
            model="capped", prompt="tell me a story", max_tokens=max_tokens
        )
        assert reply.usage is not None
        assert reply.usage.completion_tokens == 16, (asked, reply.usage)
        assert reply.choices[0].finish_reason == "length"
        chat = client.chat.completions.create(
            model="capped",
            messages=[{"role": "user", "content": "tell me a story"}],
            max_completion_tokens=200,
        )
        assert chat.usage is not None
        assert chat.usage.completion_tokens == 16
    stream = client.completions.create(
        model="capped", prompt="tell me a story", max_tokens=200, stream=True
    )
    pieces = [c.choices[0].text for c in stream if c.choices]
    assert 1 <= len(pieces) <= 17


def test_whole_answers_match_the_backend(serving_agent: Agent, model_a: Path) -> None:
    """A non-streamed answer (assembled by the agent from the backend's stream, so that a hang-up
    stops generation; a one-token one asked for whole and passed through) has the fields, text
    and usage the backend's own whole answer has."""
    port = serving_agent.slot("a")["backendPort"]
    backend = f"http://127.0.0.1:{port}"
    cases: list[tuple[str, dict[str, Any]]] = [
        ("/v1/completions", {"prompt": "once upon a time"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello there"}]}),
    ]
    for (path, body), cap in itertools.product(cases, (12, 1)):
        ask = {**body, "max_tokens": cap, "temperature": 0.0}
        direct = httpx.post(backend + path, json={**ask, "model": str(model_a)}, timeout=60)
        via = httpx.post(serving_agent.data_url + path, json={**ask, "model": "tiny-a"}, timeout=60)
        assert direct.status_code == via.status_code == 200, via.text
        mine, theirs = via.json(), direct.json()
        assert set(mine) == set(theirs)
        assert mine["object"] == theirs["object"]
        assert mine["model"] == "tiny-a"
        assert mine["usage"].keys() == theirs["usage"].keys()
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):  # not the cache hits
            assert mine["usage"][key] == theirs["usage"][key]
        assert mine["choices"][0].keys() == theirs["choices"][0].keys()
        assert mine["choices"][0]["finish_reason"] == theirs["choices"][0]["finish_reason"]
        if "message" in theirs["choices"][0]:
            assert mine["choices"][0]["message"] == theirs["choices"][0]["message"]
        else:
            assert mine["choices"][0]["text"] == theirs["choices"][0]["text"]
        assert via.headers["content-length"] == str(len(via.content))


def test_load_beyond_the_slot_limits_is_429_never_502(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    """200 concurrent requests against maxConcurrency 2 and a queue of 3: every answer is a 200
    or a quick 429 with Retry-After (OpenAI-shaped); the backend never gets more than 2."""
    agent = agent_factory(extra=["--queue-limit", "3"])
    assert agent.put_slot("a", slot_spec(model_a, "tiny-a", maxConcurrency=2)).status_code == 202
    agent.wait_ready("a")

    async def one(client: httpx.AsyncClient) -> tuple[int, dict[str, str], bytes, float]:
        started = time.monotonic()
        resp = await client.post(
            "/v1/completions", json={"model": "tiny-a", "prompt": "hi", "max_tokens": 24}
        )
        return resp.status_code, dict(resp.headers), resp.content, time.monotonic() - started

    async def burst() -> list[tuple[int, dict[str, str], bytes, float]]:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
        async with httpx.AsyncClient(
            base_url=agent.data_url, limits=limits, timeout=120.0
        ) as client:
            return await asyncio.gather(*(one(client) for _ in range(200)))

    seen: list[tuple[int, int]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            slot = agent.slot("a")
            seen.append((slot["inFlight"], slot["queued"]))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        results = asyncio.run(burst())
    finally:
        done.set()
        watcher.join()
    assert max(f for f, _ in seen) <= 2, "more requests in flight than maxConcurrency"
    assert max(q for _, q in seen) <= 3, "more requests queued than --queue-limit"
    codes = sorted({r[0] for r in results})
    assert set(codes) <= {200, 429}, [(r[0], r[2][:200]) for r in results if r[0] not in (200, 429)]
    ok = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] == 429]
    assert len(ok) >= 5, len(ok)
    assert refused, "200 requests against 2 + 3 places were all admitted"
    for _, headers, content, took in refused:
        assert int(headers["retry-after"]) >= 1
        error = json.loads(content)["error"]
        assert error["type"] == "rate_limit_error"
        assert error["code"] == "queue_full"
        assert took < 10, "a refusal should be fast"
    assert agent.slot("a")["inFlight"] == 0
    assert agent.slot("a")["restarts"] == 0


def test_requests_cut_by_the_shutdown_get_an_openai_error(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    """SIGTERM with a 1 s drain: a whole answer still generating gets 503 with an OpenAI-style body,
    a stream ends with an `error` event; the agent exits 0."""
    agent = agent_factory(extra=["--shutdown-drain-s", "1"])
    assert agent.put_slot("a", slot_spec(model_a, "tiny-a", contextLength=65536)).status_code == 202
    agent.wait_ready("a")
    ask = {"model": "tiny-a", "prompt": "tell me a story", "max_tokens": 60000}
    whole = _raw_post(agent.data_url, "/v1/completions", ask)
    streamed = _raw_post(agent.data_url, "/v1/completions", {**ask, "stream": True})
    agent.wait_slot("a", lambda s: s["inFlight"] == 2, timeout_s=30)
    agent.proc.send_signal(signal.SIGTERM)
    answers = []
    for sock in (whole, streamed):
        sock.settimeout(30)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        sock.close()
        answers.append(data)
    head, _, body = answers[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), answers[0][:300]
    assert b"application/json" in head.lower()
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "shutting_down"
    assert b"HTTP/1.1 200" in answers[1][:20]
    events = [e for e in answers[1].split(b"\n\n") if b"data: {" in e]
    last = json.loads(events[-1].split(b"data: ", 1)[1].split(b"\r\n", 1)[0])
    assert last["error"]["code"] == "shutting_down", events[-1][:300]
    assert agent.proc.wait(timeout=60) == 0
