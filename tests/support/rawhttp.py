"""Raw-socket clients for what the connection limits stop (`mlxfleet_common.wire.connlimits`),
shared by the agent's and the gateway's hostile-input tests: endless headers, silent or half-sent
heads, more connections than the cap, a body sent one byte at a time, JSON nested too deeply.

May import: the standard library, psutil. Called by: tests/integration/agent/test_hostile_input.py,
tests/integration/gateway/test_hostile_input.py.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import psutil

MIB = 1024 * 1024


def address(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rstrip("/").split(":")
    return host, int(port)


def flood_headers(url: str, total: int, *, path: str = "/v1/models") -> tuple[int, bytes]:
    """Send one request whose headers go on for `total` bytes; return (bytes sent, reply)."""
    sock = socket.create_connection(address(url), timeout=30)
    sent = 0
    with contextlib.suppress(OSError):
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n" % path.encode())
        line = b"X-Pad: " + b"a" * 8185 + b"\r\n"
        while sent < total:
            sock.sendall(line * 16)
            sent += len(line) * 16
    reply = b""
    with contextlib.suppress(OSError):
        reply = sock.recv(4096)
    sock.close()
    return sent, reply


def flood_in_threads(url: str, count: int, *, total: int = 64 * MIB) -> list[tuple[int, bytes]]:
    """`flood_headers` from `count` connections at once."""
    results: list[tuple[int, bytes]] = []

    def one() -> None:
        results.append(flood_headers(url, total))

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def assert_floods_cut_off(pid: int, urls: list[str]) -> None:
    """4 connections to each URL send endless headers: each is cut off within 8 MiB (431, or
    reset), and the process `pid` grows by less than 32 MiB."""
    proc = psutil.Process(pid)
    before = proc.memory_info().rss
    for url in urls:
        results = flood_in_threads(url, 4)
        assert len(results) == 4
        for sent, reply in results:
            assert sent < 8 * MIB, f"{url} read {sent} bytes of headers"
            assert reply == b"" or reply.startswith(b"HTTP/1.1 431"), reply[:100]
    grown = proc.memory_info().rss - before
    assert grown < 32 * MIB, f"{pid} grew {grown / MIB:.0f} MiB"


def closed(sock: socket.socket, *, answers: tuple[bytes, ...] = (b"408", b"503")) -> bool:
    """Whether the server closed this connection (after an error answer with one of the
    `answers` statuses, if it wrote one); the socket's timeout bounds the wait."""
    answer = b""
    try:
        while data := sock.recv(4096):
            answer += data
            assert answer.startswith(tuple(b"HTTP/1.1 " + a for a in answers)), answer[:100]
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def silent_connections(url: str, count: int) -> list[socket.socket]:
    """`count` connections: half say nothing, half send a head that never ends."""
    socks = []
    for i in range(count):
        sock = socket.create_connection(address(url), timeout=10)
        if i % 2:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        socks.append(sock)
    return socks


def still_open(socks: list[socket.socket], *, answers: tuple[bytes, ...] = (b"408",)) -> int:
    """How many of `socks` the server has not closed (each closed one answered one of
    `answers`, if anything); closes them all."""
    count = 0
    for sock in socks:
        sock.settimeout(0.05)
        count += not closed(sock, answers=answers)
        sock.close()
    return count


def slow_body(
    url: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    declared: int = 100_000,
    every_s: float = 0.5,
    give_up_s: float = 30.0,
) -> tuple[float, bytes]:
    """POST a head declaring `declared` body bytes, then send one byte every `every_s` until
    the server answers or closes; (seconds from the head to the end, what it answered)."""
    sock = socket.create_connection(address(url), timeout=10)
    head = [f"POST {path} HTTP/1.1", "Host: x", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    head.append(f"Content-Length: {declared}")
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    t0 = time.monotonic()
    sock.settimeout(every_s)
    answer = b""
    with contextlib.suppress(OSError):
        sock.sendall(b"{")
        while time.monotonic() - t0 < give_up_s:
            try:
                data = sock.recv(4096)
            except TimeoutError:
                sock.sendall(b" ")
                continue
            if not data:
                break
            answer += data
    sock.close()
    return time.monotonic() - t0, answer


def nested_json(depth: int) -> bytes:
    """A chat body whose extra field nests `depth` arrays."""
    return b'{"model":"chat","messages":[],"x":' + b"[" * depth + b"]" * depth + b"}"
