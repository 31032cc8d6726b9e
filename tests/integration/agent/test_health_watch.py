"""The backend health watch (`readiness.watch_health`) against real HTTP servers on loopback:
mlx_lm's shape (HTTP/1.0, no Content-Length: the body ends when the server closes) and a
kept-alive HTTP/1.1 server. A 200 keeps it watching, any other answer ends it naming the status,
silence counts only with `silent_limit`, and the process going away ends it quietly."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from mlxfleet_agent.backends import readiness


class _Backend(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, version: str) -> None:
        self.statuses: list[int] = []  # answered in turn; the last one repeats
        self.polls = 0
        self.connections: set[tuple[str, int]] = set()
        handler = type("Handler", (_Handler,), {"protocol_version": version})
        super().__init__(("127.0.0.1", 0), handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Backend

    def do_GET(self) -> None:
        srv = self.server
        srv.connections.add(self.client_address)
        status = srv.statuses[min(srv.polls, len(srv.statuses) - 1)]
        srv.polls += 1
        body = b'{"status": "ok"}' if status == 200 else b'{"status": "unavailable"}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if self.protocol_version == "HTTP/1.1":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()  # HTTP/1.0 as mlx_lm: no length, the close ends the body
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(params=["HTTP/1.0", "HTTP/1.1"])
def backend(request: pytest.FixtureRequest) -> Iterator[_Backend]:
    srv = _Backend(request.param)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _watch(url: str, **kwargs: Any) -> str | None:
    """`watch_health(url, **kwargs)` to its verdict, bounded at 10 s."""
    return asyncio.run(asyncio.wait_for(readiness.watch_health(url, **kwargs), 10))


def _url(srv: _Backend) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}/health"


def test_watches_while_200_and_names_the_status_that_ends_it(backend: _Backend) -> None:
    backend.statuses = [200, 200, 200, 200, 503]
    why = _watch(_url(backend), alive=lambda: True, interval_s=0.01)
    assert why == "unhealthy (GET /health answered 503)"
    assert backend.polls == 5
    if backend.RequestHandlerClass.protocol_version == "HTTP/1.1":  # type: ignore[attr-defined]
        assert len(backend.connections) == 1, backend.connections  # one kept-alive connection


def test_returns_none_once_the_process_is_gone(backend: _Backend) -> None:
    backend.statuses = [200]
    polls_left = [3]

    def alive() -> bool:
        polls_left[0] -= 1
        return polls_left[0] >= 0

    why = _watch(_url(backend), alive=alive, interval_s=0.01)
    assert why is None
    assert backend.polls == 3


def test_silence_counts_only_with_a_limit() -> None:
    silent = socket.socket()  # accepts (the kernel's backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/health"
    try:
        why = _watch(url, alive=lambda: True, interval_s=0.01, silent_limit=2, timeout_s=0.2)
        assert why is not None
        assert why.startswith("does not answer GET /health: no answer"), why

        polls = [0]

        def alive() -> bool:
            polls[0] += 1
            return polls[0] <= 4

        # without a limit, four silent polls in a row are not a verdict
        why = _watch(url, alive=alive, interval_s=0.01, timeout_s=0.1)
        assert why is None
    finally:
        silent.close()


def test_a_200_whose_body_never_completes_is_silence_not_unhealthy() -> None:
    stalled = socket.socket()
    stalled.bind(("127.0.0.1", 0))
    stalled.listen(16)
    held: list[socket.socket] = []

    def answer_head_only() -> None:
        while True:
            try:
                conn, _ = stalled.accept()
            except OSError:
                return
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
            held.append(conn)  # open, the rest of the body never comes

    threading.Thread(target=answer_head_only, daemon=True).start()
    try:
        why = _watch(
            f"http://127.0.0.1:{stalled.getsockname()[1]}/health",
            alive=lambda: True,
            interval_s=0.01,
            silent_limit=2,
            timeout_s=0.2,
        )
        assert why is not None
        assert why.startswith("does not answer GET /health: no answer"), why
    finally:
        stalled.close()
        for conn in held:
            conn.close()


def test_a_refused_connection_is_silence_not_an_answer() -> None:
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    why = _watch(
        f"http://127.0.0.1:{port}/health",
        alive=lambda: True,
        interval_s=0.01,
        silent_limit=3,
    )
    assert why is not None
    assert why.startswith("does not answer GET /health: connect:"), why
