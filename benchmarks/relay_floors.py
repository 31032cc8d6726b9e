"""What one streamed event costs a Python relay on this machine, by how much the relay does.

    python -m benchmarks.relay_floors [--rounds 3] [--tokens 2000]

Starts `benchmarks.paced_server` (one token event every 1 ms) and four relays in front of it,
then streams through each in turn (1 stream, then 8), alternating, and prints the CPU per event
of each relay process (its own CPU clock, as `benchmarks.gateway_bench` measures):
- `c`: `benchmarks/c_relay.c`, an epoll loop in C copying bytes (compiled with `cc -O2` when a C
  compiler is present, left out otherwise): the machine's own cost of waking a process per event;
- `bare`: a uvloop `asyncio.Protocol` relay that writes each read from `data_received`, no HTTP
  parsing at all (the least any Python process can do per event);
- `own`: our own `asyncio.Protocol` server (httptools request parsing, no uvicorn), the upstream
  through the agent's `httpclient` and `StreamScanner`, chunks written to the transport;
- `pipe`: uvicorn + `httpclient` + `EventPipe`, the gateway's stream path without routing;
- `floor`: `benchmarks.floor_proxy` (uvicorn + asyncio streams), the gateway bench's floor.
Used to tell the wake-up's cost from the code's (docs/benchmarks.md, "A paced source").
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, cast

import httptools
import httpx
import uvloop

from benchmarks.floor_proxy import STREAM_START, Send, http_app
from benchmarks.gateway_bench import _listening, cpu
from benchmarks.paced_server import CHUNK_HEAD, chunk
from mlxfleet_common.wire import eventpipe, httpclient, openai_proxy
from mlxfleet_gateway import server
from mlxfleet_operator.dev import processes

JSON = [(b"Content-Type", b"application/json")]


# ---- the relays (each runs in its own process: `python -m benchmarks.relay_floors serve ...`)


class _BareUp(asyncio.Protocol):
    def __init__(self, down: asyncio.Transport) -> None:
        self.down = down

    def data_received(self, data: bytes) -> None:
        self.down.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.down.close()


class _BareDown(asyncio.Protocol):
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.up: asyncio.Transport | None = None
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = cast(asyncio.Transport, transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        up, _ = await loop.create_connection(lambda: _BareUp(self.t), *self.upstream)
        self.up = up
        for data in self.early:
            up.write(data)

    def data_received(self, data: bytes) -> None:
        if self.up is None:
            self.early.append(data)
        else:
            self.up.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.up is not None:
            self.up.close()


class _Own(asyncio.Protocol):
    def __init__(self, pool: httpclient.Pool, origin: httpclient.Origin) -> None:
        self.pool, self.origin = pool, origin
        self.url, self.body = b"", b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = cast(asyncio.Transport, transport)
        self.parser = httptools.HttpRequestParser(self)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        asyncio.get_running_loop().create_task(self._answer(self.url, self.body))
        self.url, self.body = b"", b""

    async def _answer(self, url: bytes, body: bytes) -> None:
        resp = await self.pool.request(self.origin, b"POST", url, headers=JSON, body=body)
        self.t.write(CHUNK_HEAD)
        feed, write = openai_proxy.StreamScanner(forward_usage=True).feed, self.t.write

        def forward(data: bytes) -> None:
            if out := feed(data):
                write(chunk(out))

        await resp.forward(forward)
        write(b"0\r\n\r\n")


def _pipe_app(pool: httpclient.Pool, origin: httpclient.Origin) -> Any:
    async def forward(scope: MutableMapping[str, Any], body: bytes, send: Send) -> None:
        path = scope["path"].encode()
        resp = await pool.request(origin, b"POST", path, headers=JSON, body=body)
        await send(STREAM_START)
        scanner = openai_proxy.StreamScanner(forward_usage=True)
        await eventpipe.EventPipe(resp, send, scanner).run()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return http_app(forward)


async def _serve(kind: str, port: int, upstream: str) -> None:
    loop = asyncio.get_running_loop()
    pool = httpclient.Pool()
    origin, _ = httpclient.Origin.from_url(upstream)
    if kind == "pipe":
        await server._uvicorn(_pipe_app(pool, origin), drain_s=1).serve(
            sockets=[server.bind("127.0.0.1", port)]
        )
        return
    if kind == "bare":
        await loop.create_server(lambda: _BareDown((origin.host, origin.port)), "127.0.0.1", port)
    else:
        await loop.create_server(lambda: _Own(pool, origin), "127.0.0.1", port)
    await asyncio.Event().wait()


# ---- the measurement


async def _stream(url: str, tokens: int, streams: int) -> int:
    body = {"model": "paced", "messages": [{"role": "user", "content": "x"}], "stream": True}
    async with httpx.AsyncClient(timeout=120, trust_env=False) as client:

        async def one() -> int:
            events = 0
            path = f"{url}/v1/chat/completions"
            headers = {"connection": "close"}  # the bare relay forwards one exchange
            async with client.stream(
                "POST", path, json={**body, "max_tokens": tokens}, headers=headers
            ) as r:
                async for line in r.aiter_lines():
                    events += line.startswith("data: {")
            return events

        return sum(await asyncio.gather(*(one() for _ in range(streams))))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        uvloop.run(_serve(argv[1], int(argv[2]), argv[3]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.relay_floors")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=2000, help="events per 1-stream run")
    args = parser.parse_args(argv)
    up_port, *ports = processes.free_ports(6)
    upstream = f"http://127.0.0.1:{up_port}"
    me = [sys.executable, "-m", "benchmarks.relay_floors", "serve"]
    scratch = tempfile.TemporaryDirectory(prefix="relay-floors-")
    procs = [
        subprocess.Popen([sys.executable, "-m", "benchmarks.paced_server", "--port", str(up_port)])
    ]
    relays: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
    for name, port in zip(("bare", "own", "pipe"), ports, strict=False):
        relays[name] = (port, subprocess.Popen([*me, name, str(port), upstream]))
    floor_cmd = [sys.executable, "-m", "benchmarks.floor_proxy", str(ports[3]), upstream, "-"]
    relays["floor"] = (ports[3], subprocess.Popen(floor_cmd))
    if c_relay := _compile_c_relay(Path(scratch.name)):
        relays["c"] = (ports[4], subprocess.Popen([str(c_relay), str(ports[4]), str(up_port)]))
    procs += [p for _, p in relays.values()]
    try:
        deadline = time.monotonic() + 60
        for port in (up_port, *(port for port, _ in relays.values())):
            while not _listening(port):
                if time.monotonic() > deadline:
                    raise SystemExit(f"nothing listens on {port} after 60 s")
                time.sleep(0.2)
        figures: dict[tuple[str, int], list[float]] = {}
        for streams, tokens in ((1, args.tokens), (8, args.tokens // 4)):
            for _ in range(args.rounds):
                for name, (port, proc) in relays.items():
                    url = f"http://127.0.0.1:{port}"
                    asyncio.run(_stream(url, 4, 1))  # warm: the connection pool, the code
                    c0 = cpu(proc.pid)
                    events = asyncio.run(_stream(url, tokens, streams))
                    per = (cpu(proc.pid) - c0) / max(1, events) * 1e6
                    figures.setdefault((name, streams), []).append(per)
        print("| relay | 1 stream (us per event, each round) | 8 streams |")
        print("| --- | --- | --- |")
        for name in relays:
            one = ", ".join(f"{x:.1f}" for x in figures[(name, 1)])
            eight = ", ".join(f"{x:.1f}" for x in figures[(name, 8)])
            print(f"| {name} | {one} | {eight} |")
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
        scratch.cleanup()
    return 0


def _compile_c_relay(scratch: Path) -> Path | None:
    """`benchmarks/c_relay.c` built into `scratch`, or None (said) without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        print("no C compiler: the `c` relay is left out", file=sys.stderr)
        return None
    out = scratch / "c_relay"
    source = Path(__file__).with_name("c_relay.c")
    subprocess.run([cc, "-O2", "-o", str(out), str(source)], check=True)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
