"""The paced token source the gateway bench measures CPU per event on: a real process, spoken to
with the real `openai` client and raw HTTP (streams, whole answers, bad input)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from mlxfleet_operator.dev import processes


@pytest.fixture(scope="module")
def paced() -> Iterator[str]:
    (port,) = processes.free_ports(1)
    cmd = [sys.executable, "-m", "benchmarks.paced_server", "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--interval-ms", "2", "--model", "tick"])
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, "the paced server exited"
            assert time.monotonic() < deadline, "the paced server does not listen"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    assert proc.wait(timeout=10) is not None


def test_a_stream_has_max_tokens_events_paced_then_usage_and_done(paced: str) -> None:
    client = openai.OpenAI(base_url=f"{paced}/v1", api_key="unused", max_retries=0)
    t0 = time.monotonic()
    chunks = list(
        client.chat.completions.create(
            model="tick",
            messages=[{"role": "user", "content": "x"}],
            max_tokens=40,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    took = time.monotonic() - t0
    tokens = [c for c in chunks if c.choices]
    assert len(tokens) == 40
    assert all(c.choices[0].delta.content == " tok" for c in tokens)
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 40
    assert took >= 40 * 0.002 * 0.9  # paced, not sent at once (a lower bound, not a speed goal)


def test_whole_answers_and_the_model_list(paced: str) -> None:
    client = openai.OpenAI(base_url=f"{paced}/v1", api_key="unused", max_retries=0)
    chat = client.chat.completions.create(
        model="tick", messages=[{"role": "user", "content": "x"}], max_tokens=3
    )
    assert chat.choices[0].message.content == " tok" * 3
    text = client.completions.create(model="tick", prompt="x", max_tokens=2)
    assert text.choices[0].text == " tok" * 2
    assert [m.id for m in client.models.list()] == ["tick"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/v1/chat/completions", b"{not json", 400),
        ("POST", "/v1/chat/completions", b'{"max_tokens": "many"}', 400),
        ("POST", "/v1/chat/completions", b"[1, 2]", 400),
        ("POST", "/v1/embeddings", b"{}", 404),
        ("GET", "/admin", b"", 404),
    ],
)
def test_bad_input_is_refused_and_the_server_stays_up(
    paced: str, method: str, path: str, body: bytes, status: int
) -> None:
    r = httpx.request(method, paced + path, content=body, timeout=10)
    assert r.status_code == status
    assert "message" in r.json()["error"]
    assert httpx.get(f"{paced}/health", timeout=10).status_code == 200


def test_garbage_on_the_socket_gets_400_and_closes(paced: str) -> None:
    host, port = paced.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"\x00\x01 not http at all\r\n\r\n")
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400")
    assert httpx.get(f"{paced}/health", timeout=10).status_code == 200
