"""HTTP/1.1 for hollow nodes: one listening loopback socket per node in one event loop, and the
fleet's admin API.

Each node's server parses requests with httptools (keep-alive, one request at a time per
connection) and answers through `hollow.api`. Faults act here: `down=refuse` closes the node's
listening socket and its connections (connection refused, like a Mac that is off), `down=hang`
accepts and never answers until the fault is cleared (like a Mac asleep), `slow_s` delays every
answer.
The admin API (`http://127.0.0.1:<admin port>`, no token: loopback test tool) has
`GET /nodes` (name, url, token, memory of every node), `GET /stats` (slots by phase, requests)
and `POST /faults` `{"nodes": [...], "faults": {...}}` (the `config.Faults` fields to set).
May import: the standard library, httptools, pydantic, hollow.*. Called by: hollow.__main__,
tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections import Counter
from http import HTTPStatus
from typing import Any, cast
from urllib.parse import parse_qsl

import httptools
from pydantic import BaseModel, ValidationError

from tests.support.hollow import api, config
from tests.support.hollow import node as hnode


class _Connection(asyncio.Protocol):
    """One client connection of one node (or of the admin API)."""

    def __init__(self, answer: Any, conns: set[_Connection]) -> None:
        self.answer = answer  # async (api.Request) -> api.Response
        self.conns = conns
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: asyncio.Queue[tuple[api.Request, bool] | None] = asyncio.Queue()
        self.worker: asyncio.Task[None] | None = None
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.conns.add(self)
        self.worker = asyncio.get_running_loop().create_task(self._work())

    def connection_lost(self, exc: Exception | None) -> None:
        self.conns.discard(self)
        self.queue.put_nowait(None)
        if self.worker is not None:
            self.worker.cancel()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._write(api.error(400, "malformed HTTP request"), keep_alive=False)

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers, self._body = b"", {}, []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        if sum(map(len, self._body)) <= api.MAX_BODY:
            self._body.append(body)

    def on_message_complete(self) -> None:
        url = httptools.parse_url(self._url)
        request = api.Request(
            method=self.parser.get_method().decode(),
            path=url.path.decode(errors="replace"),
            headers=self._headers,
            body=b"".join(self._body),
            query=dict(parse_qsl((url.query or b"").decode(errors="replace"))),
        )
        self.queue.put_nowait((request, self.parser.should_keep_alive()))

    async def _work(self) -> None:
        while (item := await self.queue.get()) is not None:
            request, keep_alive = item
            response = await self.answer(request)
            if response is None:  # the node went down meanwhile
                self.abort()
                return
            self._write(response, keep_alive=keep_alive)
            if not keep_alive:
                return

    def _write(self, response: api.Response, *, keep_alive: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        reason = HTTPStatus(response.status).phrase.encode()
        head = [
            b"HTTP/1.1 %d %s" % (response.status, reason),
            b"content-length: %d" % len(response.body),
            *(b"%s: %s" % h for h in response.headers),
        ]
        if response.body:
            head.append(b"content-type: application/json")
        if not keep_alive:
            head.append(b"connection: close")
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + response.body)
        if not keep_alive:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class NodeServer:
    """One hollow node on its own port."""

    def __init__(self, n: hnode.HollowNode, host: str) -> None:
        self.node = n
        self.host = host
        self.server: asyncio.Server | None = None
        self.conns: set[_Connection] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.node.port}"

    async def start(self) -> None:
        sock = _listen(self.host, self.node.port)
        self.node.port = sock.getsockname()[1]
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: _Connection(self._answer, self.conns), sock=sock
        )

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for conn in list(self.conns):
            conn.abort()

    async def _answer(self, request: api.Request) -> api.Response | None:
        n = self.node
        if n.faults.down == "hang":
            await n.awake.wait()
        if self.server is None:
            return None
        if n.faults.slow_s:
            await asyncio.sleep(n.faults.slow_s)
        response = await api.handle(n, request)
        route = re.sub(r"^(/v1/(?:slots|models)/)[^/]+", r"\1*", request.path)
        n.answers[f"{request.method} {route} {response.status}"] += 1
        return response

    async def set_faults(self, faults: config.Faults) -> None:
        n = self.node
        n.faults = faults
        if faults.down == "hang":
            n.awake.clear()
        else:
            n.awake.set()
        if faults.down == "refuse" and self.server is not None:
            await self.stop()
        elif faults.down != "refuse" and self.server is None:
            await self.start()


class _FaultRequest(BaseModel):
    nodes: list[str]
    faults: config.Faults


class Fleet:
    """Every node of a `config.FleetConfig`, and the admin API."""

    def __init__(self, cfg: config.FleetConfig) -> None:
        self.cfg = cfg
        self.servers = {
            nc.name: NodeServer(hnode.HollowNode(nc, cfg), cfg.host) for nc in cfg.nodes
        }
        self.admin: asyncio.Server | None = None
        self.admin_port = 0
        self._admin_conns: set[_Connection] = set()

    async def start(self, *, admin_port: int = 0) -> None:
        for server in self.servers.values():
            if server.node.faults.down == "refuse":
                sock = _listen(server.host, server.node.port)  # reserve a port, then refuse
                server.node.port = sock.getsockname()[1]
                sock.close()
                continue
            await server.start()
        sock = _listen(self.cfg.host, admin_port)
        self.admin_port = sock.getsockname()[1]
        self.admin = await asyncio.get_running_loop().create_server(
            lambda: _Connection(self._admin, self._admin_conns), sock=sock
        )

    async def stop(self) -> None:
        if self.admin is not None:
            self.admin.close()
        for server in self.servers.values():
            await server.stop()
            await server.node.close()

    def nodes(self) -> list[dict[str, Any]]:
        return [
            {
                "name": s.node.cfg.name,
                "url": s.url,
                "token": s.node.cfg.token,
                "memoryBytes": s.node.cfg.memory_bytes,
                "budgetBytes": s.node.budget(),
            }
            for s in self.servers.values()
        ]

    def stats(self) -> dict[str, Any]:
        phases: Counter[str] = Counter()
        slots: dict[str, dict[str, Any]] = {}
        for name, s in self.servers.items():
            for slot in s.node.slots.values():
                phases[str(slot.phase)] += 1
                slots.setdefault(name, {})[slot.name] = {
                    "phase": str(slot.phase),
                    "ready": slot.status().ready,
                    "source": slot.active.spec.source if slot.active else slot.desired.source,
                    "deleted": slot.deleted,
                }
        answers: Counter[str] = Counter()
        for s in self.servers.values():
            answers.update(s.node.answers)
        return {
            "nodes": len(self.servers),
            "requests": sum(s.node.requests for s in self.servers.values()),
            "answers": dict(answers.most_common()),
            "phases": dict(phases),
            "slots": slots,
            "swaps": sum(
                len(slot.swaps) for s in self.servers.values() for slot in s.node.slots.values()
            ),
        }

    async def _admin(self, request: api.Request) -> api.Response:
        if request.method == "GET" and request.path == "/nodes":
            return api.Response(200, json.dumps(self.nodes()).encode())
        if request.method == "GET" and request.path == "/stats":
            return api.Response(200, json.dumps(self.stats()).encode())
        if request.method == "POST" and request.path == "/faults":
            try:
                wanted = _FaultRequest.model_validate_json(request.body)
            except ValidationError as exc:
                return api.error(422, str(exc))
            unknown = sorted(set(wanted.nodes) - set(self.servers))
            if unknown:
                return api.error(404, f"no hollow nodes {unknown}", field="nodes")
            for name in wanted.nodes:
                await self.servers[name].set_faults(wanted.faults.model_copy(deep=True))
            return api.Response(200, json.dumps({"changed": len(wanted.nodes)}).encode())
        return api.error(404, "Not Found")


@contextlib.asynccontextmanager
async def running(cfg: config.FleetConfig, *, admin_port: int = 0) -> Any:
    fleet = Fleet(cfg)
    await fleet.start(admin_port=admin_port)
    try:
        yield fleet
    finally:
        await fleet.stop()
