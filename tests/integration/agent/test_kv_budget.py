"""The KV budget at a real agent with real mlx-lm, through the openai client.

A slot sized like the demo's (contextLength 2048): a prompt whose tokens plus `max_tokens`
exceed it is refused with 400 `context_length_exceeded` in under 50 ms, streamed or not, chat or
completions, and the backend never reads a byte of it (its process's read counter); a prompt
that fits exactly is served, and the agent's count is mlx-lm's own (`usage.prompt_tokens`).
Then the failure story of the issue: a long prompt that fits, whose client hangs up while mlx-lm
is still processing it (a request it serves alone: `seed`, which it cannot interrupt), leaves
the slot serving other requests within seconds (the backend is restarted and says so), and
while such a prompt holds the backend past `--busy-after-s` the slot is busy (not ready, and
`/v1/state` says why).
"""

from __future__ import annotations

import contextlib
import json
import socket
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.integration.agent.conftest import Agent, cleanup, slot_spec, start_agent
from tests.support import models as support_models

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(600)]
CONTEXT = 2048
SENTENCE = "The quick brown fox jumps over the lazy dog. "  # 12 tokens of the dev tokenizer
HUGE = SENTENCE * 17_000  # ~200k tokens, 765 KB
REFUSAL_BUDGET_S = 0.050


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, model_a: Path) -> Iterator[Agent]:
    base = tmp_path_factory.mktemp("kv-budget")
    found = start_agent(
        state_dir=base / "state",
        models_dir=base / "models",
        allowed_root=support_models.models_root(tmp_path_factory),
        log_path=base / "agent.log",
    )
    try:
        spec = slot_spec(model_a, "kv", contextLength=CONTEXT)
        assert found.put_slot("kv", spec).status_code == 202
        found.wait_ready("kv")
        yield found
    finally:
        cleanup(found)


@pytest.fixture
def client(agent: Agent) -> Iterator[openai.OpenAI]:
    with _client(agent, 120.0) as found:
        yield found


def _backend(agent: Agent) -> psutil.Process:
    [backend] = agent.backends()
    return backend


def _read_chars(proc: psutil.Process) -> int:
    return int(proc.io_counters().read_chars)


def _body(kind: str, text: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    if kind == "chat":
        return "/v1/chat/completions", {
            "model": "kv",
            "messages": [{"role": "user", "content": text}],
            **extra,
        }
    return "/v1/completions", {"model": "kv", "prompt": text, **extra}


@contextlib.contextmanager
def _client(agent: Agent, timeout: float) -> Iterator[openai.OpenAI]:
    """An openai client whose connections are closed when the block ends."""
    with agent.openai(timeout=timeout) as client:
        yield client


def _hi(agent: Agent, model: str, *, timeout: float = 60.0) -> Any:
    """A two-token completion: the slot serves."""
    with _client(agent, timeout) as client:
        return client.completions.create(model=model, prompt="hi", max_tokens=2)


def _ask(client: openai.OpenAI, kind: str, text: str, **extra: Any) -> Any:
    if kind == "chat":
        messages = [{"role": "user", "content": text}]
        return client.chat.completions.create(model="kv", messages=messages, **extra)  # type: ignore[arg-type]
    return client.completions.create(model="kv", prompt=text, **extra)


@pytest.mark.parametrize("kind", ["chat", "completions"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("text", "max_tokens"),
    [
        pytest.param(HUGE, 16, id="200k-tokens"),
        pytest.param(SENTENCE * 160, 256, id="just-over"),  # ~1,930 + 256 > 2,048
        pytest.param(SENTENCE * 8, 4096, id="max-tokens-over"),
    ],
)
def test_over_the_context_is_refused_fast_and_the_backend_never_sees_it(
    agent: Agent, kind: str, stream: bool, text: str, max_tokens: int
) -> None:
    path, body = _body(kind, text, max_tokens=max_tokens, stream=stream)
    raw = json.dumps(body).encode()
    backend = _backend(agent)
    read_before = _read_chars(backend)
    took = []
    with httpx.Client(base_url=agent.data_url, timeout=30) as http:
        http.post(path, content=b"{}")  # the connection is open before the clock starts
        for _ in range(5):
            started = time.perf_counter()
            reply = http.post(path, content=raw, headers={"content-type": "application/json"})
            took.append(time.perf_counter() - started)
            assert reply.status_code == 400, reply.text
            error = reply.json()["error"]
            assert error["code"] == "context_length_exceeded"
            assert error["type"] == "invalid_request_error"
            assert error["param"] == ("messages" if kind == "chat" else "prompt")
            assert f"maximum context length is {CONTEXT} tokens" in error["message"]
    assert statistics.median(took) < REFUSAL_BUDGET_S, took
    # the backend read nothing of five bodies (only its own health polls' few bytes)
    assert _read_chars(backend) - read_before < len(raw), "the backend read the refused body"
    with _client(agent, 30.0) as client, pytest.raises(openai.BadRequestError) as caught:
        _ask(client, kind, text, max_tokens=max_tokens, stream=stream)
    assert caught.value.code == "context_length_exceeded"
    assert agent.slot("kv")["inFlight"] == 0


@pytest.mark.parametrize("kind", ["chat", "completions"])
def test_a_prompt_that_fits_exactly_is_served_one_more_token_is_not(
    client: openai.OpenAI, kind: str
) -> None:
    """The agent counts what mlx-lm counts: prompt + max_tokens == contextLength is served
    (mlx-lm's own usage says the prompt's tokens), one token more is refused."""
    text = SENTENCE * 100  # ~1,200 tokens
    if kind == "chat":
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": text},
        ]

        def ask(n: int, stream: bool = False) -> Any:
            return client.chat.completions.create(
                model="kv", messages=messages, max_tokens=n, stream=stream
            )
    else:

        def ask(n: int, stream: bool = False) -> Any:
            return client.completions.create(model="kv", prompt=text, max_tokens=n, stream=stream)

    first = ask(1)
    prompt = first.usage.prompt_tokens
    assert 1000 < prompt < CONTEXT
    served = ask(CONTEXT - prompt)
    assert served.usage.prompt_tokens == prompt
    assert served.usage.completion_tokens == CONTEXT - prompt
    with pytest.raises(openai.BadRequestError) as caught:
        ask(CONTEXT - prompt + 1)
    assert caught.value.code == "context_length_exceeded"
    message = str(caught.value)
    assert f"{prompt} in the" in message
    assert f"{CONTEXT - prompt + 1} in the completion" in message
    with pytest.raises(openai.BadRequestError):
        ask(CONTEXT - prompt + 1, stream=True)


def test_without_max_tokens_the_answer_gets_the_room_left(client: openai.OpenAI) -> None:
    text = SENTENCE * 165  # ~1,980 tokens: less room than mlx-lm's default 512
    reply = client.completions.create(model="kv", prompt=text)
    assert reply.usage is not None
    assert reply.usage.prompt_tokens + reply.usage.completion_tokens == CONTEXT
    assert reply.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="kv", prompt=SENTENCE * 171)  # ~2,052 tokens
    assert caught.value.code == "context_length_exceeded"
    assert "your prompt resulted in" in str(caught.value)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            {"messages": [{"role": "user", "content": [{"type": "text", "text": HUGE}]}]},
            id="huge-text-part",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": "x"}] * 50_000}, id="50k-tiny-messages"
        ),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"type": "function", "function": {"name": "f", "arguments": "{nope"}}
                        ],
                    },
                    {"role": "user", "content": HUGE},
                ]
            },
            id="bad-tool-arguments",
        ),
        pytest.param(
            {
                "messages": [{"role": "user", "content": HUGE}],
                "chat_template_kwargs": {"add_generation_prompt": False, "messages": 3},
            },
            id="template-kwargs-shadowing",
        ),
        pytest.param({"prompt": "\u00e9\U0001f600" * 300_000}, id="multibyte"),
    ],
)
def test_hostile_bodies_are_refused_quickly_and_the_slot_keeps_serving(
    agent: Agent, body: dict[str, Any]
) -> None:
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    started = time.perf_counter()
    reply = httpx.post(agent.data_url + path, json={"model": "kv", **body}, timeout=30)
    took = time.perf_counter() - started
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["code"] == "context_length_exceeded"
    assert took < 2.0, took  # client serialisation included; the agent's part is bounded
    ok = _hi(agent, "kv")
    assert ok.choices[0].finish_reason == "length"


# ---- a long prompt whose client hangs up -----------------------------------------------------


@pytest.fixture
def raw_stream() -> Iterator[Callable[[str, dict[str, Any]], socket.socket]]:
    """`_raw_stream`, whose sockets are closed after the test whatever happened in it."""
    opened: list[socket.socket] = []

    def open_one(url: str, body: dict[str, Any]) -> socket.socket:
        opened.append(_raw_stream(url, body))
        return opened[-1]

    yield open_one
    for sock in opened:
        sock.close()


def _raw_stream(url: str, body: dict[str, Any]) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def test_a_hung_up_prompt_mlx_lm_cannot_stop_restarts_the_backend_within_seconds(
    agent_factory: Callable[..., Agent],
    model_a: Path,
    raw_stream: Callable[[str, dict[str, Any]], socket.socket],
) -> None:
    """A 12k-token prompt with a `seed` (mlx-lm serves it alone and processes the whole prompt
    before it writes: minutes on this box). While it runs past --busy-after-s the slot is busy;
    its client hangs up; within seconds the backend is restarted (lastError, restarts say so),
    the slot is ready again and serves the next request."""
    agent = agent_factory(extra=["--busy-after-s", "2", "--hung-up-grace-s", "2"])
    spec = slot_spec(model_a, "long", contextLength=16384)
    assert agent.put_slot("long", spec).status_code == 202
    agent.wait_ready("long")
    old = _backend(agent)
    sock = raw_stream(
        agent.data_url,
        {"model": "long", "prompt": SENTENCE * 1000, "max_tokens": 8, "seed": 7, "stream": True},
    )
    busy = agent.wait_slot("long", lambda s: s["busy"] is not None, timeout_s=30)
    assert busy["ready"] is False
    assert "waited" in busy["busy"]
    assert "first token" in busy["busy"]
    state = agent.state()
    [reported] = [s["busy"] for s in state["slots"] if s["name"] == "long"]
    assert reported.startswith("a request has waited ")  # the seconds move on between reads
    sock.close()
    hung_up = time.monotonic()
    back = agent.wait_slot(
        "long", lambda s: s["ready"] and s["restarts"] == 1 and s["busy"] is None, timeout_s=60
    )
    assert back["lastError"].startswith("backend restarted: a request whose client left")
    reply = _hi(agent, "long")
    assert reply.choices[0].finish_reason == "length"
    took = time.monotonic() - hung_up
    assert took < 30, f"the replica served again {took:.1f}s after the hang-up"
    with contextlib.suppress(psutil.NoSuchProcess):
        old.wait(timeout=30)  # stopped after the switch: SIGINT, then SIGKILL past the grace
    assert [p.pid for p in agent.backends()] != [old.pid]
    assert "backend restarting" in agent.log_tail(200)


def test_a_hung_up_prompt_of_the_batch_stops_without_a_restart(
    agent_factory: Callable[..., Agent],
    model_a: Path,
    raw_stream: Callable[[str, dict[str, Any]], socket.socket],
) -> None:
    """A 24k-token prompt without a seed is processed in mlx-lm's batch, 2,048 tokens a step
    with a keep-alive comment after each: closing its connection stops it after a step or two
    (steps late in a prompt are the slow ones: a 36k-token prompt took 9 minutes here), so the
    agent closes it at once and restarts nothing."""
    agent = agent_factory(extra=["--hung-up-grace-s", "2"])
    spec = slot_spec(model_a, "long", contextLength=32768)
    assert agent.put_slot("long", spec).status_code == 202
    agent.wait_ready("long")
    backend = _backend(agent)
    sock = raw_stream(
        agent.data_url,
        {"model": "long", "prompt": SENTENCE * 2000, "max_tokens": 8, "stream": True},
    )
    agent.wait_slot("long", lambda s: s["inFlight"] == 1, timeout_s=30)
    time.sleep(1.0)  # it is processing the prompt's first step now
    sock.close()
    hung_up = time.monotonic()
    reply = _hi(agent, "long", timeout=300.0)
    assert reply.choices[0].finish_reason == "length"
    took = time.monotonic() - hung_up
    assert took < 90, f"the replica served again {took:.1f}s after the hang-up"
    slot = agent.slot("long")
    assert slot["restarts"] == 0
    assert _backend(agent).pid == backend.pid


def test_requests_beyond_max_concurrency_queue_and_the_queue_is_measured(
    agent_factory: Callable[..., Agent],
    model_a: Path,
    raw_stream: Callable[[str, dict[str, Any]], socket.socket],
) -> None:
    """maxConcurrency 1: a long request runs, the next two wait in the slot's queue (never at the
    backend), and `queued` in /v1/slots and `mlxfleet_agent_queued_requests` in /metrics say 2."""
    agent = agent_factory()
    spec = slot_spec(model_a, "one", maxConcurrency=1, contextLength=8192)
    assert agent.put_slot("one", spec).status_code == 202
    agent.wait_ready("one")
    body = {"model": "one", "prompt": "tell me a story", "max_tokens": 8000, "stream": True}
    socks = [raw_stream(agent.data_url, body)]
    agent.wait_slot("one", lambda s: s["inFlight"] == 1, timeout_s=30)
    socks += [raw_stream(agent.data_url, body) for _ in range(2)]
    slot = agent.wait_slot("one", lambda s: s["queued"] == 2, timeout_s=30)
    assert slot["inFlight"] == 1
    scraped = agent.api("GET", "/metrics").text
    assert 'mlxfleet_agent_queued_requests{slot="one"} 2.0' in scraped
    assert 'mlxfleet_agent_in_flight_requests{slot="one"} 1.0' in scraped
    assert 'mlxfleet_agent_slot_busy{slot="one"} 0.0' in scraped
    for sock in socks:
        sock.close()
    agent.wait_slot("one", lambda s: s["inFlight"] == 0 and s["queued"] == 0, timeout_s=60)


def test_a_stuck_backend_without_room_beside_it_is_stopped_first(
    agent_factory: Callable[..., Agent],
    model_a: Path,
    raw_stream: Callable[[str, dict[str, Any]], socket.socket],
    tmp_path: Path,
) -> None:
    """The memory budget holds one backend of the slot, not two: the stuck backend is stopped
    before the fresh one loads (its other requests would fail; here there are none), and the
    slot serves again."""
    spec = slot_spec(model_a, "long", contextLength=16384)
    sizing = agent_factory(state_dir=tmp_path / "sizing" / "state")
    assert sizing.put_slot("long", spec).status_code == 202
    estimate = sizing.wait_ready("long")["estimatedMemoryBytes"]
    sizing.stop()
    budget = str(int(estimate * 1.5))
    agent = agent_factory(
        extra=["--memory-budget", budget, "--busy-after-s", "2", "--hung-up-grace-s", "2"]
    )
    assert agent.put_slot("long", spec).status_code == 202
    agent.wait_ready("long")
    old = _backend(agent)
    sock = raw_stream(
        agent.data_url,
        {"model": "long", "prompt": SENTENCE * 1000, "max_tokens": 8, "seed": 7, "stream": True},
    )
    agent.wait_slot("long", lambda s: s["busy"] is not None, timeout_s=30)
    sock.close()
    hung_up = time.monotonic()
    back = agent.wait_slot("long", lambda s: s["ready"] and s["restarts"] == 1, timeout_s=90)
    assert back["lastError"].startswith("backend restarted: ")
    reply = _hi(agent, "long")
    assert reply.choices[0].finish_reason == "length"
    assert time.monotonic() - hung_up < 60
    assert not old.is_running(), "the stuck backend was not stopped"
    logged = [json.loads(line) for line in agent.log_tail(400).splitlines() if "restarting" in line]
    assert [r.get("beside_old") for r in logged] == [False], logged


def test_a_request_queued_during_a_cold_start_is_checked_when_it_gets_the_backend(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    """No backend serves yet (nothing to count with): the request queues, and is refused as
    soon as the loaded backend's tokenizer can count it, before that backend sees it."""
    agent = agent_factory()
    assert agent.put_slot("kv", slot_spec(model_a, "kv", contextLength=CONTEXT)).status_code == 202
    assert agent.slot("kv")["ready"] is False
    path, body = _body("chat", SENTENCE * 200, max_tokens=16)  # ~2,400 tokens
    reply = httpx.post(agent.data_url + path, json=body, timeout=120)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["code"] == "context_length_exceeded"
    ready = agent.wait_ready("kv")
    assert ready["inFlight"] == 0
