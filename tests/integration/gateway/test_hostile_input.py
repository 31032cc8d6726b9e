"""What a client without a key can do to a running `mlxfleet-gateway` (a real process on the
session's control plane, as its own identity): grow it with endless headers, hold sockets with
heads or bodies that never finish, open more connections than it can serve, crash a request
with JSON nested too deeply, or send two API keys and have one of them chosen."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mlxfleet_operator.dev import controlplane
from tests.support import gateway as gws
from tests.support import rawhttp

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

MIB = rawhttp.MIB
CAP = 40
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def key_and_gateway(
    cluster: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, gws.Gateway]]:
    key, secret = gws.api_key_secret(f"hostile-{uuid.uuid4().hex[:8]}", namespaces="default")
    cluster.kubectl("apply", "-f", "-", input=json.dumps(secret))
    gw = gws.start_gateway(
        cluster.gateway_kubeconfig,
        tmp_path_factory.mktemp("gateway-hostile"),
        extra=[
            *("--header-timeout-s", "2", "--body-timeout-s", "2"),
            *("--max-connections", str(CAP)),
        ],
    )
    try:
        auth = {"Authorization": f"Bearer {key}"}
        gw.wait_for(
            "the gateway knows the key",
            lambda: httpx.get(gw.url + "/v1/models", headers=auth, timeout=5).status_code == 200,
        )
        yield key, gw
    finally:
        gw.stop()
        cluster.kubectl("delete", "secret", "-n", "mlxfleet-system", secret["metadata"]["name"])


@pytest.fixture
def gateway(key_and_gateway: tuple[str, gws.Gateway]) -> gws.Gateway:
    return key_and_gateway[1]


@pytest.fixture
def key(key_and_gateway: tuple[str, gws.Gateway]) -> str:
    return key_and_gateway[0]


def _error(answer: bytes) -> dict[str, str]:
    error: dict[str, str] = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return error


def test_huge_headers_are_cut_off_without_growing_the_gateway(gateway: gws.Gateway) -> None:
    rawhttp.assert_floods_cut_off(gateway.proc.pid, [gateway.url])
    _, reply = rawhttp.flood_headers(gateway.url, 64 * 1024)
    assert reply.startswith(b"HTTP/1.1 431"), reply[:100]
    assert _error(reply)["code"] == "request_head_too_large"
    assert httpx.get(gateway.url + "/healthz", timeout=10).status_code == 200


def test_heads_that_never_end_are_408_after_the_header_timeout(gateway: gws.Gateway) -> None:
    socks = rawhttp.silent_connections(gateway.url, CAP // 2)
    time.sleep(3.5)
    still_open = rawhttp.still_open(socks)
    assert still_open == 0, f"{still_open} of {len(socks)} connections are still open"
    sock = socket.create_connection(rawhttp.address(gateway.url), timeout=10)
    sock.sendall(b"GET /v1/models HTTP/1.1\r\n")
    sock.settimeout(5)
    answer = sock.recv(4096)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
    assert _error(answer)["code"] == "request_head_timeout"


def test_connections_beyond_the_cap_are_503(gateway: gws.Gateway) -> None:
    time.sleep(0.3)  # connections of earlier tests are gone
    socks = [
        socket.create_connection(rawhttp.address(gateway.url), timeout=10) for _ in range(CAP + 15)
    ]
    time.sleep(0.5)
    refused = []
    for sock in socks:
        sock.settimeout(0.05)  # the refused ones were answered at once
        try:
            answer = sock.recv(4096)
        except TimeoutError:
            continue
        if not answer.startswith(b"HTTP/1.1 408"):  # not one the header timeout closed since
            refused.append(answer)
    for sock in socks:
        sock.close()
    assert len(refused) >= 15, len(refused)
    for answer in refused:
        assert answer.startswith(b"HTTP/1.1 503"), answer[:100]
        assert b"retry-after: 1\r\n" in answer
        assert _error(answer)["code"] == "too_many_connections"
    time.sleep(0.3)
    assert httpx.get(gateway.url + "/healthz", timeout=10).status_code == 200


def test_a_body_sent_byte_by_byte_is_408_after_the_body_timeout(
    gateway: gws.Gateway, key: str
) -> None:
    took, answer = rawhttp.slow_body(
        gateway.url, CHAT, headers={"Authorization": f"Bearer {key}"}, give_up_s=10
    )
    assert answer.startswith(b"HTTP/1.1 408"), (took, answer[:200])
    assert 1.5 < took < 5, took
    assert _error(answer)["code"] == "request_body_timeout"


def test_json_nested_too_deeply_is_400_invalid_json(gateway: gws.Gateway, key: str) -> None:
    resp = httpx.post(
        gateway.url + CHAT,
        content=rawhttp.nested_json(100_000),
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "invalid_json"
    assert "RecursionError" not in gateway.log()
    assert "Exception in ASGI application" not in gateway.log()


def test_two_authorization_headers_are_400(gateway: gws.Gateway, key: str) -> None:
    both = [("Authorization", "Bearer sk-wrong"), ("Authorization", f"Bearer {key}")]
    for headers in (both, both[::-1]):
        resp = httpx.get(gateway.url + "/v1/models", headers=headers, timeout=10)
        assert resp.status_code == 400, (headers, resp.text)
        error = resp.json()["error"]
        assert error["code"] == "ambiguous_credentials"
        assert error["param"] == "authorization"
    one = {"Authorization": f"Bearer {key}"}
    assert httpx.get(gateway.url + "/v1/models", headers=one, timeout=10).status_code == 200


def test_the_metrics_port_bounds_heads_and_connections(gateway: gws.Gateway) -> None:
    assert gateway.metrics_url is not None
    sent, _ = rawhttp.flood_headers(gateway.metrics_url, 64 * MIB)
    assert sent < 8 * MIB, f"the metrics port read {sent} bytes of headers"
    socks = [
        socket.create_connection(rawhttp.address(gateway.metrics_url), timeout=10)
        for _ in range(80)
    ]
    time.sleep(0.5)
    closed = 0
    for sock in socks:
        sock.settimeout(0.05)
        closed += rawhttp.closed(sock, answers=())
    assert closed >= 80 - 64, closed
    time.sleep(2.5)  # the header timeout closes the rest
    for sock in socks:
        sock.settimeout(0.05)
        assert rawhttp.closed(sock, answers=())
        sock.close()
    assert "mlxfleet_gateway" in gateway.metrics()


def test_the_documented_command_line_still_runs(
    cluster: controlplane.ControlPlane, tmp_path: Path
) -> None:
    gw = gws.start_gateway(
        cluster.gateway_kubeconfig,
        tmp_path,
        anonymous=True,
        fleet_key=None,
    )
    try:
        assert httpx.get(gw.url + "/v1/models", timeout=10).status_code == 200
    finally:
        gw.stop()


def test_health_answers_as_vllm_does_without_a_key_and_says_nothing(
    gateway: gws.Gateway,
) -> None:
    """`GET /health` (issue 28 item 13): what load tools for OpenAI-compatible servers probe
    before they start; open, as vLLM's is, with nothing in it but the verdict."""
    ok = httpx.get(gateway.url + "/health", timeout=10)
    assert (ok.status_code, ok.json()) == (200, {"status": "ok"})
    assert httpx.head(gateway.url + "/health", timeout=10).status_code == 200
    assert httpx.post(gateway.url + "/health", timeout=10).status_code == 405
    assert httpx.get(gateway.url + "/v1/models", timeout=10).status_code == 401
