"""The data plane: an OpenAI-compatible reverse proxy in front of the slots' backends (raw ASGI).

Per request: read the body (bounded), route by `model`, lease the slot's backend (queueing while
it is not ready), rewrite `model` to the backend's pinned path, forward it over a plain asyncio
stream (mlx_lm.server speaks HTTP/1.0 and closes every connection, so there is nothing to pool:
see `BackendReply`), and pass the answer back as it arrives (no buffering of streams; whole SSE
events; the pinned path in `model` fields is put back to the served name). The lease is held
until the last byte, so a swap never cuts a request. A stream whose backend dies ends with an
OpenAI-style `error` event instead of hanging. Raw ASGI and raw sockets rather than a framework
and an HTTP client keep the added latency per request small.
May import: router, answers, control, slots, telemetry, stdlib. Called by: app (mounts it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, MutableMapping
from typing import Any

from mlxfleet_agent import answers, control, router, slots, telemetry

log = logging.getLogger(__name__)
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

ENDPOINTS = {
    "/v1/chat/completions": "chat.completions",
    "/chat/completions": "chat.completions",
    "/v1/completions": "completions",
}
BACKEND_PATHS = {"chat.completions": "/v1/chat/completions", "completions": "/v1/completions"}
DONE = b"data: [DONE]"
BACKEND_HEADER = b"x-mlxfleet-backend"
JSON_HEADERS = [(b"content-type", b"application/json")]


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    """The client disconnected before it sent its whole request."""


CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0  # longest silence of a backend within one answer
CHUNK = 65536
LIMIT = 1 << 20  # largest response head we accept from a backend
ERROR_BODY_LIMIT = 64 * 1024  # of a backend's error body, what the client is shown
RETRY_AFTER = router.RETRY_AFTER


class DataPlane:
    """ASGI app of the data port."""

    def __init__(
        self,
        *,
        manager: control.Manager,
        telemetry: telemetry.Telemetry,
        api_keys: frozenset[str] | None,
        max_body_bytes: int,
        queue_timeout_s: float,
    ) -> None:
        self.manager = manager
        self.telemetry = telemetry
        self.api_keys = [k.encode() for k in api_keys] if api_keys else None
        self.max_body_bytes = max_body_bytes
        self.queue_timeout_s = queue_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            if path == "/healthz":
                await _send_json(send, 200, b'{"status":"ok"}')
                return
            self._authorize(scope)
            endpoint = ENDPOINTS.get(path)
            if endpoint is not None and method == "POST":
                await self._complete(scope, receive, send, endpoint)
            elif path in ("/v1/models", "/models") and method == "GET":
                await _send_json(send, 200, self._models_body())
            elif endpoint is not None or path in ("/v1/models", "/models"):
                raise router.RouteError(405, f"method {method} not allowed on {path}")
            else:
                raise router.RouteError(404, f"no route {path}", code="not_found")
        except router.RouteError as exc:
            await _send_json(send, exc.status, exc.body(), exc.headers)
        except ClientGone:
            return

    def _authorize(self, scope: Scope) -> None:
        if self.api_keys is None:
            return
        given = b""
        for name, value in scope["headers"]:
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
        ok = False
        for key in self.api_keys:
            ok |= hmac.compare_digest(given, key)
        if not ok:
            raise router.RouteError(
                401,
                "missing or invalid API key",
                type_="authentication_error",
                code="invalid_api_key",
            )

    def _models_body(self) -> bytes:
        now = int(time.time())
        data = [
            {"id": name, "object": "model", "created": now, "owned_by": "mlxfleet"}
            for name in self.manager.served_names()
        ]
        return json.dumps({"object": "list", "data": data}).encode()

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body_bytes:
                raise BodyTooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _complete(self, scope: Scope, receive: Receive, send: Send, endpoint: str) -> None:
        t0 = time.monotonic()
        try:
            raw = await self._read_body(scope, receive)
        except BodyTooLarge:
            raise router.RouteError(
                413, f"request body exceeds {self.max_body_bytes} bytes", code="body_too_large"
            ) from None
        routed = router.resolve(self.manager, router.parse(raw))
        slot = routed.slot
        router.check_images(routed.body, allowed=slot.desired.server.allowed_image_urls or ())
        lease = await router.lease(slot, timeout_s=self.queue_timeout_s)
        handle = lease.handle
        self.telemetry.request_started(slot.name)
        outcome = _Outcome()
        try:
            await self._forward(routed, handle, endpoint, receive, send, outcome=outcome, t0=t0)
        except asyncio.CancelledError:  # the shutdown drain ended with this request still running
            outcome.error = "shutdown"
            await _cut_by_shutdown(send, outcome)
            raise
        finally:
            slot.finished(lease, ok=outcome.error is None)
            self.telemetry.request_finished(
                telemetry.RequestRecord(
                    slot=slot.name,
                    served_name=handle.spec.served_name,
                    source=handle.spec.source,
                    endpoint=endpoint,
                    stream=routed.stream,
                    prompt_tokens=outcome.prompt_tokens,
                    completion_tokens=outcome.completion_tokens,
                    queue_wait_s=lease.waited_s,
                    ttft_s=outcome.ttft_s,
                    e2e_s=time.monotonic() - t0,
                    error_kind=outcome.error,
                )
            )

    async def _forward(
        self,
        routed: router.Routed,
        handle: slots.Handle,
        endpoint: str,
        receive: Receive,
        send: Send,
        *,
        outcome: _Outcome,
        t0: float,
    ) -> None:
        """Ask the backend and pass its answer on; a client that leaves closes the backend's
        connection, which stops mlx_lm at its next write (so whole answers are asked for as a
        stream and assembled here: see `answers`)."""
        body = routed.body
        router.limit_tokens(body, handle.spec)
        body["model"] = handle.pinned
        assemble = not routed.stream and not answers.wants_logprobs(body)
        client_usage = False
        if routed.stream:
            client_usage = telemetry.ask_for_usage(body)
        elif assemble:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        served = handle.spec.served_name
        rewrite = answers.rewriter(
            pinned=handle.pinned, served=served, original_fingerprint=handle.fingerprint
        )
        headers = [(BACKEND_HEADER, f"{handle.backend.port}".encode())]
        try:
            reply = await call_backend(
                handle.backend.port, BACKEND_PATHS[endpoint], json.dumps(body).encode()
            )
        except BackendError as exc:
            outcome.error = "backend_unreachable"
            raise router.RouteError(
                502,
                f"backend unreachable: {exc}",
                type_="server_error",
                code="backend_unreachable",
            ) from exc
        gone = asyncio.Event()
        watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, gone, reply))
        try:
            if reply.status != 200:
                await self._error(reply, send, headers=headers, outcome=outcome, handle=handle)
            elif routed.stream:
                await self._stream(
                    reply,
                    send,
                    headers=headers,
                    rewrite=rewrite,
                    outcome=outcome,
                    t0=t0,
                    counter=telemetry.StreamCounter(forward_usage=client_usage),
                    gone=gone,
                )
            elif assemble:
                await self._assembled(
                    reply,
                    send,
                    answers.Assembler(chat=endpoint == "chat.completions"),
                    headers=headers,
                    served=served,
                    fingerprint=answers.fingerprint(handle.fingerprint or ""),
                    outcome=outcome,
                    t0=t0,
                    gone=gone,
                )
            else:
                await self._whole(
                    reply, send, headers=headers, rewrite=rewrite, outcome=outcome, t0=t0, gone=gone
                )
        finally:
            watcher.cancel()
            reply.close()

    async def _error(
        self,
        resp: BackendReply,
        send: Send,
        *,
        headers: list[tuple[bytes, bytes]],
        outcome: _Outcome,
        handle: slots.Handle,
    ) -> None:
        """A backend's refusal, OpenAI-shaped, with its status."""
        outcome.error = "backend_5xx" if resp.status >= 500 else "backend_4xx"
        try:
            raw = await resp.read_all(limit=ERROR_BODY_LIMIT)
        except BackendError:
            raw = b""
        body = answers.backend_error(
            resp.status, raw, pinned=handle.pinned, served=handle.spec.served_name
        )
        await _send_whole(send, resp.status, body, headers)

    async def _assembled(
        self,
        resp: BackendReply,
        send: Send,
        builder: answers.Assembler,
        *,
        headers: list[tuple[bytes, bytes]],
        served: str,
        fingerprint: str,
        outcome: _Outcome,
        t0: float,
        gone: asyncio.Event,
    ) -> None:
        """A whole answer, built from the backend's stream."""
        try:
            async with contextlib.aclosing(resp.chunks()) as chunks:
                async for raw in chunks:
                    builder.feed(raw)
                    if outcome.ttft_s is None and builder.events:
                        outcome.ttft_s = time.monotonic() - t0
        except BackendError as exc:
            if not gone.is_set():
                log.warning("backend stream broke", extra={"error": str(exc)})
        outcome.prompt_tokens = builder.prompt_tokens
        outcome.completion_tokens = builder.completion_tokens
        if gone.is_set():
            outcome.error = "client_gone"
            return
        if not builder.done:
            outcome.error = "backend_died"
            raise router.RouteError(
                502, "backend failed while answering", type_="server_error", code="backend_died"
            )
        body = builder.result(served=served, fingerprint=fingerprint)
        outcome.started = True
        await _send_whole(send, 200, body, headers)

    async def _whole(
        self,
        resp: BackendReply,
        send: Send,
        *,
        headers: list[tuple[bytes, bytes]],
        rewrite: answers.Rewrite,
        outcome: _Outcome,
        t0: float,
        gone: asyncio.Event,
    ) -> None:
        """A whole answer generated whole by the backend (requests that ask for logprobs)."""
        try:
            body = await resp.read_all()
        except BackendError:
            if gone.is_set():
                outcome.error = "client_gone"
                return
            outcome.error = "backend_died"
            raise router.RouteError(
                502, "backend failed while answering", type_="server_error", code="backend_died"
            ) from None
        outcome.ttft_s = time.monotonic() - t0
        body = rewrite(body)
        outcome.count_usage(body)
        outcome.started = True
        await _send_whole(send, 200, body, headers, content_type=resp.content_type)

    async def _stream(
        self,
        resp: BackendReply,
        send: Send,
        *,
        headers: list[tuple[bytes, bytes]],
        rewrite: answers.Rewrite,
        outcome: _Outcome,
        t0: float,
        counter: telemetry.StreamCounter,
        gone: asyncio.Event,
    ) -> None:
        outcome.started = outcome.streaming = True
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                    *headers,
                ],
            }
        )
        tail = b""
        try:
            async with contextlib.aclosing(resp.chunks()) as chunks:
                async for raw in chunks:
                    chunk = counter.feed(raw)  # whole SSE events; counts tokens from usage
                    if outcome.ttft_s is None and b"data: {" in chunk:
                        outcome.ttft_s = time.monotonic() - t0
                    tail = (tail + raw)[-32:]
                    if chunk:
                        await send(
                            {
                                "type": "http.response.body",
                                "body": rewrite(chunk),
                                "more_body": True,
                            }
                        )
                    if gone.is_set():
                        break
        except BackendError as exc:
            if not gone.is_set() and DONE not in tail:
                log.warning("backend stream broke", extra={"error": str(exc)})
        outcome.prompt_tokens = counter.prompt_tokens
        outcome.completion_tokens = counter.completion_tokens
        if DONE not in tail:  # a client that leaves after [DONE] got everything
            outcome.error = "client_gone" if gone.is_set() else "backend_died"
        if outcome.error == "client_gone":
            return
        rest = counter.flush()
        if rest and outcome.error is None:
            await send({"type": "http.response.body", "body": rewrite(rest), "more_body": True})
        if outcome.error == "backend_died":
            err = router.RouteError(
                502,
                "the backend stopped in the middle of this stream",
                type_="server_error",
                code="backend_died",
            )
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + err.body() + b"\n\n",
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class BackendError(Exception):
    """The backend could not be reached, or broke (or fell silent) while answering."""


class BackendReply:
    """A backend's answer read straight off its socket.

    mlx_lm.server speaks HTTP/1.0: one connection per request, closed after the answer; the body
    of a stream ends at EOF, a non-streamed body has a Content-Length. There is nothing to pool
    or keep alive, so a plain asyncio stream is both the simplest and the cheapest client: each
    chunk is forwarded as the socket hands it over (coalesced when the agent runs behind).
    """

    __slots__ = ("_length", "_reader", "_writer", "content_type", "status")

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        status: int,
        content_type: bytes | None,
        length: int | None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._length = length
        self.status = status
        self.content_type = content_type

    async def chunks(self, *, idle_timeout_s: float = READ_TIMEOUT_S) -> AsyncGenerator[bytes]:
        """The body as it arrives; a backend silent for `idle_timeout_s` is cut off (an error).

        The idle check is a timer that looks at the time of the last chunk now and then, not a
        timeout per read: per-chunk cost stays an attribute store.
        """
        loop = asyncio.get_running_loop()
        read = self._reader.read
        last = [loop.time()]
        idle = [False]

        def check() -> None:
            if loop.time() - last[0] > idle_timeout_s:
                idle[0] = True
                self._writer.transport.abort()
            else:
                timer[0] = loop.call_later(idle_timeout_s / 4, check)

        timer = [loop.call_later(idle_timeout_s / 4, check)]
        try:
            while True:
                try:
                    chunk = await read(CHUNK)
                except OSError as exc:
                    raise BackendError(f"{type(exc).__name__}: {exc}") from exc
                if idle[0]:
                    raise BackendError(f"backend silent for {idle_timeout_s:.0f}s")
                if not chunk:
                    return
                last[0] = loop.time()
                yield chunk
        finally:
            timer[0].cancel()

    async def read_all(self, *, limit: int | None = None) -> bytes:
        """The whole body (at most `limit` bytes of it when given)."""
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                if self._length is not None and (limit is None or self._length <= limit):
                    return await self._reader.readexactly(self._length)
                if limit is None:
                    return await self._reader.read()
                data = b""
                while len(data) < limit and (chunk := await self._reader.read(limit - len(data))):
                    data += chunk
                return data
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        self._writer.close()

    def abort(self) -> None:
        """Drop the connection now (the client left): a pending read ends, mlx_lm's next write
        fails and it stops generating."""
        self._writer.transport.abort()


async def call_backend(port: int, path: str, body: bytes) -> BackendReply:
    """POST `body` (JSON) to the backend on 127.0.0.1:`port`; return once its headers arrived."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=LIMIT)
    except (OSError, TimeoutError) as exc:
        raise BackendError(f"{type(exc).__name__}: {exc}") from exc
    try:
        writer.write(head + body)
        async with asyncio.timeout(READ_TIMEOUT_S):
            raw = await reader.readuntil(b"\r\n\r\n")
        status_line, *lines = raw.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        content_type = None
        length = None
        for line in lines:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            if key == "content-type":
                content_type = value.strip().encode("latin-1")
            elif key == "content-length":
                length = int(value.strip())
    except (
        OSError,
        TimeoutError,
        ValueError,
        IndexError,
        asyncio.IncompleteReadError,
        asyncio.LimitOverrunError,
    ) as exc:
        writer.close()
        raise BackendError(f"{type(exc).__name__}: {exc}") from exc
    except asyncio.CancelledError:  # shutdown while waiting for the head: stop the backend too
        writer.transport.abort()
        raise
    return BackendReply(reader, writer, status=status, content_type=content_type, length=length)


class _Outcome:
    __slots__ = ("completion_tokens", "error", "prompt_tokens", "started", "streaming", "ttft_s")

    def __init__(self) -> None:
        self.error: str | None = None
        self.ttft_s: float | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.started = False  # the response head went out
        self.streaming = False

    def count_usage(self, body: bytes) -> None:
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            usage = json.loads(body).get("usage") or {}
            self.prompt_tokens = int(usage.get("prompt_tokens", 0))
            self.completion_tokens = int(usage.get("completion_tokens", 0))


async def _watch_disconnect(receive: Receive, gone: asyncio.Event, reply: BackendReply) -> None:
    """The client hung up: say so and drop the backend connection (that stops generation)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            reply.abort()
            return


async def _cut_by_shutdown(send: Send, outcome: _Outcome) -> None:
    """The shutdown drain ran out: end this request with an OpenAI-style error (503, or an
    `error` event when the stream is under way) instead of uvicorn's plain-text 500."""
    err = router.RouteError(
        503,
        "the agent is shutting down and this request did not finish in time; retry it",
        type_="server_error",
        code="shutting_down",
    )
    with contextlib.suppress(Exception):
        if not outcome.started:
            await _send_json(send, 503, err.body(), RETRY_AFTER)
        elif outcome.streaming:
            event = b"data: " + err.body() + b"\n\n"
            await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _send_json(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    length = (b"content-length", str(len(body)).encode())
    headers = [*JSON_HEADERS, length, *(extra or ())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_whole(
    send: Send,
    status: int,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
    *,
    content_type: bytes | None = None,
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type or b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
