"""The peer fetcher against a small real HTTP server on loopback (a stand-in for a peer agent's
`/peer/v1/` file routes, so a test can see how many requests are in flight): one peer still gets
two files asked at once (MD5 is sequential within a file, so one stream would be bound to one
core), every file lands verified, and a peer that lies on one stream is dropped for all of them."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mlxfleet_agent.peers import checks, fetch

MODEL_ID = "0123456789abcdef"
FILES = {f"model-{n}.safetensors": bytes([n]) * (3 * 1024 * 1024 + n) for n in range(4)}


class Peer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, tamper: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.tamper = tamper
        self.lock = threading.Lock()
        self.inflight = 0
        self.most = 0
        self.requests = 0
        self.two = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Peer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        peer = self.server
        with peer.lock:
            peer.inflight += 1
            peer.requests += 1
            peer.most = max(peer.most, peer.inflight)
            if peer.inflight >= 2:
                peer.two.set()
        try:
            peer.two.wait(5)  # hold the first answer until a second request comes (or 5 s)
            rel = self.path.rsplit("/", 1)[-1]
            body = FILES[rel]
            if peer.tamper:
                body = body[:-1] + bytes([body[-1] ^ 0xFF])
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        finally:
            with peer.lock:
                peer.inflight -= 1


@pytest.fixture
def peer() -> Iterator[Peer]:
    yield from _serve(Peer())


@pytest.fixture
def liar() -> Iterator[Peer]:
    yield from _serve(Peer(tamper=True))


def _serve(server: Peer) -> Iterator[Peer]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def expects() -> list[checks.Expect]:
    return [
        checks.Expect(rel, len(data), md5=hashlib.md5(data, usedforsecurity=False).hexdigest())
        for rel, data in FILES.items()
    ]


def test_one_peer_sends_two_files_at_once(peer: Peer, tmp_path: Path) -> None:
    out = fetch.fetch(expects(), model_id=MODEL_ID, peers=[(peer.url, "t")], partial=tmp_path)
    assert out.done == set(FILES)
    assert peer.most == 2, f"{peer.most} request(s) in flight at most, 2 expected"
    for rel, data in FILES.items():
        assert (tmp_path / rel).read_bytes() == data
    assert not list(tmp_path.glob("*.part"))


def test_a_lying_peer_is_dropped_for_every_stream(liar: Peer, tmp_path: Path) -> None:
    out = fetch.fetch(expects(), model_id=MODEL_ID, peers=[(liar.url, "t")], partial=tmp_path)
    assert out.done == set()
    assert liar.url in out.lying
    assert liar.requests <= 2, "a stream went on asking a peer caught lying"
    assert not list(tmp_path.iterdir()), "a file from the liar was kept"
