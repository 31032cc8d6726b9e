"""Async client of one node agent's control API (`/v1`, bearer token, optional private CA).

May import: aiohttp, yarl, certifi, the agent `contract`,
`api.modelref`, `core.kit.clocks`, `metrics`, `leader` (`may_act`, checked before every request
that changes an agent), `netenv`, the standard library.
Called by: `fleet` (which keeps one client per InferenceNode) and, through it, the handlers.
Every call has a timeout and is counted (`mlxfleet_operator_agent_calls_total{op,result}`);
errors come back as `AgentError` subclasses so callers can tell "unreachable" from "refused".
With an `IoLoop` (the fleet's), requests are sent, timed and read on that loop's own thread: a
timeout then measures the agent, not how late the caller's busy event loop runs (under load a
request needs several loop turns, each one late, and healthy agents timed out).
The transport is plain aiohttp (one pool per agent, made on the loop that sends): httpx over
httpcore and anyio cost about 8x its CPU per request (740 against 90 us for a /v1/state answer,
measured side by side), the fleet polls every agent every few seconds, and importing httpx
(which brings click, rich and pygments along) cost the operator 6.5 MB (docs/operator.md).
"""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

import aiohttp
import certifi
import yarl
from pydantic import ValidationError

from mlxfleet_agent import contract
from mlxfleet_operator.adapters import leader, metrics, netenv
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.kit import clocks

PREFIX = contract.API_PREFIX
CONNECT_S = 3.0  # a TCP (and TLS) connection to an agent is made within this, or it is down


def budget(read_s: float) -> aiohttp.ClientTimeout:
    """How long a request may take: `CONNECT_S` to connect, then `read_s` for the agent to
    answer (between two reads of its answer, as httpx's read timeout was); waiting for a
    connection of the pool counts against `read_s` too."""
    return aiohttp.ClientTimeout(
        total=None, connect=read_s, sock_connect=CONNECT_S, sock_read=read_s
    )


DEFAULT_TIMEOUT = budget(5.0)
# PUT /v1/slots may have to read a model's config (estimate) before answering.
SLOT_TIMEOUT = budget(30.0)
PREFETCH_TIMEOUT = budget(300.0)
# An idle connection to an agent is kept this long (httpx's default was 5 s: with polls every
# 5 s each poll found its connection just expired and opened a new one, 100 TCP connects a
# second at 500 nodes, about 8 % of the operator's samples). Below the agent's own 30 s
# (`runtime.serve`), so the agent never closes one the operator is about to reuse.
KEEPALIVE_S = 20.0
CONNECTIONS = 100  # requests at once to one agent (more wait for a connection)
T = TypeVar("T")


class IoLoop:
    """An event loop on its own (daemon) thread that only sends agent requests and reads their
    answers; started on first use, stopped by `close`. `run` awaits a coroutine there from any
    other loop (cancelling the caller cancels it there too)."""

    def __init__(self, name: str = "mlxfleet-agent-io") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=loop.run_forever, name=self._name, daemon=True
                )
                self._thread.start()
                self._loop = loop
            return self._loop

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._started()
        if asyncio.get_running_loop() is loop:  # already there (a call made by a call)
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    def close(self) -> None:
        """Cancel what still runs there, stop the loop and its thread (idempotent)."""
        with self._guard:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout=5)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            if not thread.is_alive():
                loop.close()


class AgentError(Exception):
    """A control API call that did not succeed; `status` and `field` come from the agent's answer
    (none: no answer), so callers classify it by those, never by its text."""

    def __init__(self, message: str, *, status: int | None = None, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.field = field


class AgentUnreachable(AgentError):
    """No answer (connection refused, timeout, TLS failure) or a 5xx: the agent could not do it
    now (e.g. 502: the model source could not be fetched). Worth retrying."""


class NotLeading(AgentUnreachable):
    """Not sent: this process does not lead with a fresh lease (`leader.may_act`). Handled like
    an agent that did not answer: the leader that does lead sends it."""


class AgentRefused(AgentError):
    """The agent answered with a 4xx/507: the request itself cannot work (message says why)."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        field: str | None = None,
        insufficient: contract.InsufficientMemory | None = None,
    ) -> None:
        super().__init__(message, status=status, field=field)
        self.insufficient = insufficient


@dataclass(frozen=True)
class Credentials:
    url: str
    token: str
    ca_pem: str | None = None
    token_expires_at: datetime | None = None  # the token Secret's mlxfleet.io/expires-at


@functools.lru_cache(maxsize=64)
def _verify(ca_pem: str | None) -> ssl.SSLContext:
    """One TLS context per trust root, shared by every client that uses it: each context loads
    its CA bundle (about 0.9 MB and 60 ms a client, 430 MB for 500 nodes when every client made
    its own). None: the trust store httpx used before (`SSL_CERT_FILE`, else `SSL_CERT_DIR`,
    else certifi's bundle)."""
    if ca_pem is None:
        if os.environ.get("SSL_CERT_FILE"):
            return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
        if os.environ.get("SSL_CERT_DIR"):
            return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
        return ssl.create_default_context(cafile=certifi.where())
    return ssl.create_default_context(cadata=ca_pem)


def untrusted(ca_pem: str) -> str | None:
    """Why `ca_pem` cannot be a trust root (None: it can): the reason is shown in the node's
    status instead of a TLS error in every poll."""
    try:
        _verify(ca_pem)
    except (ssl.SSLError, ValueError) as exc:
        return str(exc)
    return None


def data_endpoint(agent_url: str, data_port: int) -> str:
    """The agent's data-plane base URL: the control URL's host, the data port, plain http (the
    agent serves TLS on its control API only; the data plane sits behind the LAN/gateway)."""
    host = urlsplit(agent_url).hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    return urlunsplit(("http", f"{host}:{data_port}", "", "", ""))


@dataclass(frozen=True, slots=True)
class Answer:
    """An agent's answer, read whole: its status and body."""

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


def _message(response: Answer) -> tuple[str, str | None]:
    """The error text and the field the agent's error body names (if it is one of ours)."""
    try:
        body = contract.ErrorBody.model_validate_json(response.content)
    except ValidationError:
        return f"HTTP {response.status_code}: {response.text[:300]}", None
    detail = body.error
    where = f"{detail.field}: " if detail.field else ""
    allowed = f" (allowed: {detail.allowed})" if detail.allowed else ""
    return f"HTTP {response.status_code}: {where}{detail.message}{allowed}", detail.field


def _refused(response: Answer) -> AgentRefused:
    """A 4xx or 507 answer: the request cannot work as is (507: the agent's memory check)."""
    insufficient = None
    if response.status_code == 507:
        try:
            insufficient = contract.InsufficientMemory.model_validate_json(response.content)
        except ValidationError:
            insufficient = None
    text, field = _message(response)
    return AgentRefused(text, status=response.status_code, field=field, insufficient=insufficient)


class AgentClient:
    """One agent. Create with `Credentials`; close with `aclose()`. With `io`, every request
    runs on that loop (see `IoLoop`); without, on the caller's loop. Its connection pool is
    made by the first request, on the loop that sends it (an aiohttp pool belongs to one loop)."""

    def __init__(self, credentials: Credentials, *, io: IoLoop | None = None) -> None:
        self.credentials = credentials
        self._io = io
        self._base = credentials.url.rstrip("/") + PREFIX
        self._ssl = _verify(credentials.ca_pem)
        self._proxy = netenv.env_proxy(credentials.url)
        self._session: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        await self._on_io(self._close())

    async def _close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _on_io(self, coro: Coroutine[Any, Any, T]) -> T:
        return await (self._io.run(coro) if self._io is not None else coro)

    def _pool(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    ssl=self._ssl, limit=CONNECTIONS, keepalive_timeout=KEEPALIVE_S
                ),
                headers={"Authorization": f"Bearer {self.credentials.token}"},
                trust_env=False,  # the proxy is looked up once (`netenv`)
            )
        return self._session

    async def _call(
        self,
        op: str,
        method: str,
        path: str,
        *,
        budget: aiohttp.ClientTimeout | None = None,
        json: Any = None,
        missing_ok: bool = False,
    ) -> Answer:
        """One request, counted under `op` (ok, refused, unreachable). `missing_ok`: a 404
        (nothing there) is an answer, returned as is, not an error."""
        try:
            response = await self._send(method, path, budget=budget, json=json)
        except NotLeading:
            metrics.AGENT_CALLS.labels(op, "not_leading").inc()
            raise
        except AgentUnreachable:
            metrics.AGENT_CALLS.labels(op, "unreachable").inc()
            raise
        if response.status_code >= 400 and not (missing_ok and response.status_code == 404):
            metrics.AGENT_CALLS.labels(op, "refused").inc()
            raise _refused(response)
        metrics.AGENT_CALLS.labels(op, "ok").inc()
        return response

    async def _send(
        self, method: str, path: str, *, budget: aiohttp.ClientTimeout | None, json: Any
    ) -> Answer:
        """The agent's answer; no answer or a 5xx other than 507 raises `AgentUnreachable`.
        A request that changes the agent is sent only while this process may act (fencing: a
        leader past its renew deadline, e.g. woken from a freeze, never PUTs a stale decision)."""
        if method not in ("GET", "HEAD") and not leader.may_act():
            raise NotLeading(f"{method} {path}: not sent, this operator does not lead now")
        try:
            response = await self._on_io(
                self._request(method, path, json=json, limits=budget or DEFAULT_TIMEOUT)
            )
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            raise AgentUnreachable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 500 and response.status_code != 507:
            text, field = _message(response)
            raise AgentUnreachable(text, status=response.status_code, field=field)
        return response

    async def _request(
        self, method: str, path: str, *, json: Any, limits: aiohttp.ClientTimeout
    ) -> Answer:
        """Send and read the whole answer (on the loop that runs it; see `IoLoop`). `path` is
        already quoted."""
        url = yarl.URL(self._base + path, encoded=True)
        async with self._pool().request(
            method, url, json=json, timeout=limits, proxy=self._proxy
        ) as response:
            return Answer(response.status, await response.read())

    async def state(self) -> contract.AgentState:
        response = await self._call("state", "GET", "/state")
        try:
            return contract.AgentState.model_validate_json(response.content)
        except ValidationError as exc:
            raise AgentUnreachable(f"GET /state: unexpected body: {exc}") from exc

    async def clocked_state(self) -> tuple[contract.AgentState, timedelta | None]:
        """`GET /state` and the agent's clock minus ours (None: an agent too old to say), timed
        where the request is sent (see `IoLoop`)."""
        return await self._on_io(self._clocked_state())

    async def _clocked_state(self) -> tuple[contract.AgentState, timedelta | None]:
        sent, start = datetime.now(UTC), time.monotonic()
        state = await self.state()
        round_trip = timedelta(seconds=time.monotonic() - start)
        return state, clocks.offset(state.now, sent, round_trip)

    async def put_slot(
        self, name: str, spec: contract.SlotSpec, *, request_id: str | None = None
    ) -> contract.SlotStatus:
        """PUT the desired slot; `request_id`: the caller's id for the swap it may start (the
        agent's record of that swap echoes it)."""
        body = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        path = f"/slots/{quote(name)}"
        if request_id is not None:
            path += f"?requestId={quote(request_id, safe='')}"
        response = await self._call("put_slot", "PUT", path, json=body, budget=SLOT_TIMEOUT)
        return contract.SlotStatus.model_validate_json(response.content)

    async def delete_slot(self, name: str) -> None:
        """Drop the slot; one that is not there is fine (DELETE is idempotent)."""
        await self._call("delete_slot", "DELETE", f"/slots/{quote(name)}", missing_ok=True)

    async def swaps(self, name: str) -> list[contract.SwapRecord]:
        path = f"/slots/{quote(name)}/swaps"
        response = await self._call("swaps", "GET", path, missing_ok=True)
        if response.status_code == 404:  # no such slot: no swaps
            return []
        return contract.SwapList.model_validate_json(response.content).items

    async def put_credentials(self, creds: contract.NodeCredentials) -> str:
        """Send the node its own keys; the fingerprint it now reports."""
        body = creds.model_dump(mode="json", by_alias=True)
        response = await self._call("put_credentials", "PUT", "/credentials", json=body)
        try:
            return contract.CredentialsStatus.model_validate_json(response.content).fingerprint
        except ValidationError as exc:
            raise AgentUnreachable(f"PUT /credentials: unexpected body: {exc}") from exc

    async def prefetch(
        self, model: ModelRef, peers: Sequence[contract.Peer | str] = ()
    ) -> contract.CachedModel | None:
        """Ask the agent to fetch (and size) a model, from `peers` (agents' control URLs, each
        with the fetch token it accepts from this node) before the origin; None when it answers
        without a body yet."""
        body = contract.PrefetchRequest(
            source=model.source, revision=model.revision, peers=list(peers)
        )
        response = await self._call(
            "prefetch",
            "POST",
            "/models/prefetch",
            json=body.model_dump(mode="json", by_alias=True, exclude_none=True),
            budget=PREFETCH_TIMEOUT,
        )
        try:
            return contract.CachedModel.model_validate_json(response.content)
        except ValidationError:
            return None
