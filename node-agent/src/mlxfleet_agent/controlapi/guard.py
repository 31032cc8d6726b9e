"""The control API's guard (raw ASGI, in front of FastAPI): the bearer token on every /v1 route,
compared in constant time, and a bound on the request body, both before anything is parsed.
`/metrics` names every tenant's slots and served names: when `metrics_tokens` is given (an agent
that listens beyond loopback, or one given a scrape token) it needs one of them (the control
token, or the scrape token of `--metrics-token-file`, which opens nothing else).

May import: starlette (types), the standard library, contract, mlxfleet_common.wire.headers. Called
by: runtime (wraps the control app with it).
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlxfleet_agent import contract
from mlxfleet_common.wire import headers as header

CONTROL_MAX_BODY = 1024 * 1024
METRICS_PATH = "/metrics"


class Guard:
    """ASGI wrapper of the control app: bearer token on /v1 (constant time), body size bound."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        max_body: int = CONTROL_MAX_BODY,
        metrics_tokens: tuple[str, ...] | None = None,
    ) -> None:
        self.app = app
        self.token = token.encode()
        self.max_body = max_body
        self.metrics_tokens = (
            None if metrics_tokens is None else tuple(t.encode() for t in metrics_tokens)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if self.metrics_tokens is not None and path.rstrip("/") == METRICS_PATH:
            await self._metrics(scope, receive, send, self.metrics_tokens)
            return
        if not path.startswith(contract.API_PREFIX + "/"):
            await self.app(scope, receive, send)
            return
        given = b""
        length = None
        for name, value in scope["headers"]:
            if name == header.AUTHORIZATION:
                given = value
            elif name == b"content-length":
                length = value
        if not hmac.compare_digest(bearer_token(given), self.token):
            await _asgi_error(
                send,
                401,
                "missing or wrong bearer token",
                field="authorization",
                extra=[(b"www-authenticate", b"Bearer")],
            )
            return
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await _asgi_error(send, 413, f"body larger than {self.max_body} bytes", field="body")
            return
        chunks: list[bytes] = []
        seen = 0
        while True:  # control bodies are small: read them whole (bounded), then replay
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_body:
                await _asgi_error(
                    send, 413, f"body larger than {self.max_body} bytes", field="body"
                )
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _metrics(
        self, scope: Scope, receive: Receive, send: Send, tokens: tuple[bytes, ...]
    ) -> None:
        given = bearer_token(
            next((v for k, v in scope["headers"] if k == header.AUTHORIZATION), b"")
        )
        # every token compared, in constant time each, whichever matches
        matched = [hmac.compare_digest(given, t) for t in tokens]
        if not any(matched):
            await _asgi_error(
                send,
                401,
                "missing or wrong bearer token (the scrape token of --metrics-token-file, or "
                "the control token)",
                field="authorization",
                extra=[(b"www-authenticate", b"Bearer")],
            )
            return
        await self.app(scope, receive, send)


def bearer_token(header: bytes) -> bytes:
    """The credentials of an `Authorization: Bearer <token>` header; the scheme is matched
    case-insensitively (RFC 7235). Anything else gives b"" (never equal to a token)."""
    scheme, _, credentials = header.partition(b" ")
    if scheme.lower() != b"bearer":
        return b""
    return credentials.strip(b" \t")


async def _asgi_error(
    send: Send,
    status: int,
    message: str,
    *,
    field: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = contract.ErrorBody(error=contract.ErrorDetail(field=field, message=message))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(extra or [])],
        }
    )
    await send(
        {"type": "http.response.body", "body": body.model_dump_json(exclude_none=True).encode()}
    )
