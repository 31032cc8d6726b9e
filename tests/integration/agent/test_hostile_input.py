"""What a hostile client can do to a running agent, before and after authentication: fetch
internal URLs through the backend (image parts), exhaust memory with huge headers, hold sockets
open without a request, read host details from answers or error messages."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.integration.agent.conftest import Agent, slot_spec
from tests.support import rawhttp

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]


class _Counting(BaseHTTPRequestHandler):
    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.end_headers()
        self.wfile.write(b"\x89PNG not really")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def internal_server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback that records every path it is asked for."""
    hits: list[str] = []
    handler = type("Handler", (_Counting,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def _image_message(part: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, part]}]


def test_remote_image_urls_are_refused(
    serving_agent: Agent, internal_server: tuple[str, list[str]]
) -> None:
    base, hits = internal_server
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": f"{base}/internal"}},
        {"type": "image_url", "image_url": f"{base}/plain-string"},
        {"type": "input_image", "image_url": f"{base}/input-image"},
        {"type": "image", "image": f"{base}/image"},
        {"type": "image_url", "image_url": {"url": f"HTTPS://{base[7:]}/upper"}},
    ]
    for part in parts:
        resp = httpx.post(
            serving_agent.data_url + "/v1/chat/completions",
            json={"model": "tiny-a", "messages": _image_message(part), "max_tokens": 2},
            timeout=30,
        )
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["code"] == "image_url_not_allowed"
        assert error["param"].startswith("messages[0].content[1].")
        assert "allowedImageUrls" in error["message"]
    time.sleep(0.5)
    assert hits == [], "the backend fetched a URL a client named"


def test_allowed_image_url_prefixes_let_only_those_through(
    agent_factory: Callable[..., Agent], model_a: Path, internal_server: tuple[str, list[str]]
) -> None:
    base, hits = internal_server
    agent = agent_factory()
    spec = slot_spec(model_a, "tiny-a", server={"allowedImageUrls": [f"{base}/public/"]})
    assert agent.put_slot("a", spec).status_code == 202
    agent.wait_ready("a")
    for path in ("/internal", "/public", "/public/../internal"):
        part = {"type": "image_url", "image_url": {"url": base + path}}
        resp = httpx.post(
            agent.data_url + "/v1/chat/completions",
            json={"model": "tiny-a", "messages": _image_message(part)},
            timeout=30,
        )
        assert resp.status_code == 400, (path, resp.text)
    part = {"type": "image_url", "image_url": {"url": f"{base}/public/cat.png"}}
    resp = httpx.post(
        agent.data_url + "/v1/chat/completions",
        json={"model": "tiny-a", "messages": _image_message(part), "max_tokens": 2},
        timeout=30,
    )
    assert resp.status_code != 502, resp.text  # a text-only model refuses the image itself
    assert hits == ["/public/cat.png"]


def test_allowed_image_urls_are_validated(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    agent = agent_factory()
    for bad in ("ftp://x/", "https://example.com", "https://user@example.com/", "relative/"):
        resp = agent.put_slot("a", slot_spec(model_a, "tiny-a", server={"allowedImageUrls": [bad]}))
        assert resp.status_code == 422, (bad, resp.text)
        assert resp.json()["error"]["field"].startswith("server.allowedImageUrls")


# ---- before authentication: header size and timeout, body timeout, connection cap -------------


def test_huge_headers_are_cut_off_without_growing_the_agent(serving_agent: Agent) -> None:
    urls = [serving_agent.data_url, serving_agent.control_url]
    rawhttp.assert_floods_cut_off(serving_agent.proc.pid, urls)
    assert httpx.get(serving_agent.data_url + "/healthz", timeout=10).status_code == 200


def test_silent_connections_are_closed_after_the_header_timeout(
    agent_factory: Callable[..., Agent],
) -> None:
    agent = agent_factory(extra=["--header-timeout-s", "2"])
    socks = [
        *rawhttp.silent_connections(agent.data_url, 125),
        *rawhttp.silent_connections(agent.control_url, 125),
    ]
    time.sleep(4.0)
    still_open = rawhttp.still_open(socks, answers=(b"408", b"503"))  # control cap: 64
    assert still_open == 0, f"{still_open} of {len(socks)} connections are still open"
    assert httpx.get(agent.data_url + "/healthz", timeout=10).status_code == 200


def test_connections_beyond_the_cap_are_refused(agent_factory: Callable[..., Agent]) -> None:
    agent = agent_factory(extra=["--max-connections", "20", "--control-max-connections", "10"])
    for url, cap in ((agent.data_url, 20), (agent.control_url, 10)):
        host, port = url.split("://", 1)[1].split(":")
        socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(cap + 15)]
        time.sleep(0.5)
        closed = 0
        for sock in socks:
            sock.settimeout(0.2)
            closed += rawhttp.closed(sock)
        assert closed >= 15, (url, closed)
        for sock in socks:
            sock.close()
        time.sleep(0.3)
        assert httpx.get(url + "/healthz", timeout=10).status_code == 200


def test_a_body_sent_byte_by_byte_is_408_after_the_body_timeout(
    agent_factory: Callable[..., Agent],
) -> None:
    agent = agent_factory(extra=["--body-timeout-s", "2"])
    cases = [
        (agent.data_url, "/v1/chat/completions", {}, "code", "request_body_timeout"),
        (agent.control_url, "/v1/models/prefetch", agent.auth, "field", "body"),
    ]
    for url, path, headers, key, value in cases:
        took, answer = rawhttp.slow_body(url, path, headers=headers, give_up_s=10)
        assert answer.startswith(b"HTTP/1.1 408"), (url, took, answer[:200])
        assert 1.5 < took < 5, (url, took)
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"][key] == value
    assert httpx.get(agent.data_url + "/healthz", timeout=10).status_code == 200


def test_two_authorization_headers_are_400_on_both_ports(
    agent_factory: Callable[..., Agent], tmp_path: Path
) -> None:
    (tmp_path / "keys").write_text("k1\n")
    agent = agent_factory(extra=["--data-api-keys-file", str(tmp_path / "keys")])
    for url, path, good in (
        (agent.data_url, "/v1/models", "Bearer k1"),
        (agent.control_url, "/v1/state", f"Bearer {agent.token}"),
    ):
        both = [("Authorization", "Bearer wrong"), ("Authorization", good)]
        for headers in (both, both[::-1]):
            resp = httpx.get(url + path, headers=headers, timeout=10)
            assert resp.status_code == 400, (url, headers, resp.text)
            assert "more than one Authorization header" in resp.text
        assert httpx.get(url + path, headers={"Authorization": good}).status_code == 200
    resp = httpx.get(agent.data_url + "/v1/models", headers=both, timeout=10)
    assert resp.json()["error"]["code"] == "ambiguous_credentials"
    assert resp.json()["error"]["param"] == "authorization"


def test_json_nested_too_deeply_is_400_invalid_json(agent_factory: Callable[..., Agent]) -> None:
    agent = agent_factory()
    resp = httpx.post(
        agent.data_url + "/v1/chat/completions", content=rawhttp.nested_json(100_000), timeout=30
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "invalid_json"
    log = agent.log_path.read_text()
    assert "RecursionError" not in log
    assert "Exception in ASGI application" not in log


# ---- what answers and errors reveal ------------------------------------------------------


def test_backend_errors_are_openai_shaped(serving_agent: Agent) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("/v1/completions", {"prompt": "hi", "temperature": -1}),
        ("/v1/chat/completions", {"prompt": "no messages"}),
        ("/v1/completions", {"prompt": "hi", "max_tokens": "many"}),
    ]
    for path, body in cases:
        for stream in (False, True):
            resp = httpx.post(
                serving_agent.data_url + path,
                json={"model": "tiny-a", "stream": stream, **body},
                timeout=30,
            )
            assert resp.status_code == 400, resp.text
            assert resp.headers["content-type"] == "application/json"
            error = resp.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}, error
            assert error["type"] == "invalid_request_error"
            assert error["message"]
            assert str(serving_agent.models_dir) not in error["message"]
    client = serving_agent.openai(timeout=30.0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tiny-a", prompt="hi", temperature=-1)
    assert "temperature" in str(caught.value)


def test_answers_do_not_reveal_the_host(serving_agent: Agent) -> None:
    import platform

    secrets = [platform.platform(), platform.release(), "glibc", "Linux"]
    client = serving_agent.openai(timeout=30.0)
    prints = set()
    raw: list[str] = []
    whole = client.completions.create(model="tiny-a", prompt="hi", max_tokens=3)
    chat = client.chat.completions.create(
        model="tiny-a", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    prints |= {whole.system_fingerprint, chat.system_fingerprint}
    raw += [whole.model_dump_json(), chat.model_dump_json()]
    for chunk in client.chat.completions.create(
        model="tiny-a",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
    ):
        prints.add(chunk.system_fingerprint)
        raw.append(chunk.model_dump_json())
    assert len(prints) == 1, prints
    assert None not in prints
    for text in raw:
        for secret in secrets:
            assert secret not in text, (secret, text)


def test_control_api_bearer_scheme_is_case_insensitive(serving_agent: Agent) -> None:
    for scheme in ("Bearer", "bearer", "BEARER"):
        resp = httpx.get(
            serving_agent.control_url + "/v1/state",
            headers={"Authorization": f"{scheme} {serving_agent.token}"},
            timeout=10,
        )
        assert resp.status_code == 200, (scheme, resp.text)
    for wrong in (f"bearer {serving_agent.token}x", f"Basic {serving_agent.token}", "bearer"):
        resp = httpx.get(
            serving_agent.control_url + "/v1/state", headers={"Authorization": wrong}, timeout=10
        )
        assert resp.status_code == 401, wrong


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("file:///tmp/a\u0000b", id="nul"),
        pytest.param("MODEL\n", id="trailing-newline"),
        pytest.param("MODEL\t", id="trailing-tab"),
        pytest.param(" MODEL", id="leading-space"),
        pytest.param("hf://org/..", id="hf-dot-dot"),
        pytest.param("hf://../repo", id="hf-dot-dot-org"),
        pytest.param("hf://org/.", id="hf-dot"),
    ],
)
def test_sources_with_control_characters_or_dot_segments_are_422(
    serving_agent: Agent, model_a: Path, source: str
) -> None:
    before = without_clocks(serving_agent.state()["slots"])
    source = source.replace("MODEL", f"file://{model_a}")
    resp = serving_agent.put_slot("x", {"source": source, "servedName": "x"})
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["field"] == "source"
    prefetch = serving_agent.api("POST", "/v1/models/prefetch", json={"source": source})
    assert prefetch.status_code == 422, prefetch.text
    assert without_clocks(serving_agent.state()["slots"]) == before


def without_clocks(slots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Slots as they are, less what moves with the clock alone (`idleSeconds`)."""
    return [{k: v for k, v in slot.items() if k != "idleSeconds"} for slot in slots]


def test_403_does_not_reveal_where_a_symlink_points(
    serving_agent: Agent, model_a: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret-place" / "weights"
    secret.mkdir(parents=True)
    link = model_a.parent / f"link-{tmp_path.name}"
    link.symlink_to(secret)
    try:
        resp = serving_agent.put_slot("x", slot_spec(link, "x"))
        assert resp.status_code == 403, resp.text
        assert "secret-place" not in resp.text
        assert resp.json()["error"]["field"] == "source"
    finally:
        link.unlink()


def test_data_plane_api_key_scheme_is_case_insensitive_too(
    agent_factory: Callable[..., Agent], tmp_path: Path
) -> None:
    (tmp_path / "keys").write_text("k1\n")
    agent = agent_factory(extra=["--data-api-keys-file", str(tmp_path / "keys")])
    for scheme in ("Bearer", "bearer"):
        resp = httpx.get(
            agent.data_url + "/v1/models", headers={"Authorization": f"{scheme} k1"}, timeout=10
        )
        assert resp.status_code == 200, resp.text
    assert json.loads(httpx.get(agent.data_url + "/v1/models").text)["error"]["code"] == (
        "invalid_api_key"
    )
