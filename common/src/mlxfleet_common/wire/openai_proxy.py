"""What the product's two OpenAI-compatible reverse proxies share besides their HTTP client
(`httpclient`): the OpenAI error shape, the server-sent-event scanner that counts tokens while a
stream passes through, and the raw-ASGI plumbing (types, whole JSON answers, bounded body reads,
client hang-ups, the lifespan protocol).

The scanner is on the hot path (one call per streamed chunk): `feed(chunk)` does the least work
that counting needs. A chunk that ends on an event boundary and holds no usage object is
returned as it is (a few `bytes` searches, no copy); only the rare chunk with a usage event is
split into events, and a usage-only event is held back when the client did not ask for one
(`stream_options.include_usage`: both proxies always ask upstream, so they can count). A chunk
that ends inside an event keeps the partial event until the rest arrives. Events are counted
exactly: an event starts at the stream's start or after a blank line, and JSON never carries a
raw newline, so `\\ndata:` cannot occur inside one.

Pure: the standard library only; the ASGI helpers only await the callables the server hands
over. Called by: the agent's data plane (dataplane.app, relay, errors, answers) and the gateway
(core.errors, proxy, relay, calls, listing, dialects, admin, console).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = Sequence[tuple[bytes, bytes]]
JSON = b"application/json"

# ---- errors -----------------------------------------------------------------------------------


class OpenAIError(Exception):
    """A refusal or failure answered as `{"error": {"message", "type", "param", "code"}}`, with
    its HTTP status and extra headers (e.g. `retry-after`)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: Headers = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.code = code
        self.param = param
        self.headers: tuple[tuple[bytes, bytes], ...] = tuple(headers)

    def body(self) -> bytes:
        err = {"message": str(self), "type": self.type, "param": self.param, "code": self.code}
        return json.dumps({"error": err}).encode()

    def event(self) -> bytes:
        """The error as a server-sent event (a stream cut after it started)."""
        return b"data: " + self.body() + b"\n\n"


# ---- token counting ---------------------------------------------------------------------------

EVENT_END = b"\n\n"
DATA = b"data:"
NEXT_DATA = b"\ndata:"
DONE = b"data: [DONE]"
_USAGE_OBJECT = re.compile(rb'"usage"\s*:\s*\{')
_OBJECT_FIELD = re.compile(rb'"object"\s*:\s*"[^"]*"')


_USAGE_KEY = b'"usage"'
_DECODER = json.JSONDecoder()
_BLANK = b" \t\r\n"  # JSON's whitespace
_OPENS = b"{,"  # what a key follows


def usage_of(body: bytes) -> tuple[int, int] | None:
    """(prompt, completion) tokens of a whole JSON answer, if it says. The answer's last member
    is read alone when it is the top-level `usage` (where OpenAI-style servers put it), else
    the whole answer is parsed."""
    try:
        usage = _last_usage(body)
        if usage is None:
            usage = json.loads(body).get("usage")
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return None


def _last_usage(body: bytes) -> Any:
    """The value of `"usage"` when it is the top-level object's last member, parsed alone; None
    when it is not (or cannot be told). Sound without parsing the rest: inside a JSON string a
    quote is escaped, so `"usage"` followed by a colon is a key; its value followed by one `}`
    and the end of the text closes the outermost object."""
    at = body.rfind(_USAGE_KEY)
    if at < 0:
        return None
    try:
        text = body[at + len(_USAGE_KEY) :].decode()
    except UnicodeDecodeError:
        return None
    colon = len(text) - len(text.lstrip())
    if text[colon : colon + 1] != ":":
        return None
    start = colon + 1
    start += len(text) - start - len(text[start:].lstrip())
    try:
        value, end = _DECODER.raw_decode(text, start)
    except ValueError:
        return None
    if text[end:].strip() != "}":
        return None
    before = at - 1
    while before >= 0 and body[before] in _BLANK:
        before -= 1
    if before < 0 or body[before] not in _OPENS:  # a key opens an object or follows a member
        return None
    return value


def _event_usage(event: bytes) -> dict[str, Any] | None:
    """The usage object of one `data: {...}` event, if it carries one."""
    start = event.find(b"{")
    if start < 0:
        return None
    try:
        obj = json.loads(event[start:])
    except ValueError:
        return None
    usage = obj.get("usage") if isinstance(obj, dict) else None
    return usage if isinstance(usage, dict) else None


class StreamScanner:
    """Counts a stream's tokens while it passes through; holds back a usage-only event unless
    `forward_usage`. `feed(chunk)` returns the bytes to forward now (whole events only),
    `flush()` what is left at the end. Completion tokens come from the usage event, else from
    the number of content events (minus the last, which carries the finish reason).
    `usage_object`: the `object` a forwarded usage-only event is given (mlx_lm writes
    `chat.completion` there; a stream's events are `chat.completion.chunk` in OpenAI's API),
    rewritten only in that one event."""

    __slots__ = (
        "_at_start",
        "_pending",
        "data_events",
        "done",
        "forward_usage",
        "prompt_tokens",
        "usage_completion",
        "usage_object",
    )

    def __init__(self, *, forward_usage: bool, usage_object: str | None = None) -> None:
        self.forward_usage = forward_usage
        self.usage_object = (
            None if usage_object is None else b'"object": ' + json.dumps(usage_object).encode()
        )
        self.prompt_tokens = 0
        self.usage_completion: int | None = None
        self.data_events = 0  # `data:` events seen (content, usage and [DONE] alike)
        self.done = False  # saw `data: [DONE]`
        self._pending = b""
        self._at_start = True  # the next byte starts an event

    def feed(self, chunk: bytes) -> bytes:
        """Bytes to forward now (whole events)."""
        if self._pending:
            chunk = self._pending + chunk
            self._pending = b""
        if not chunk.endswith(EVENT_END):
            cut = chunk.rfind(EVENT_END)
            if cut < 0:
                self._pending = chunk
                return b""
            chunk, self._pending = chunk[: cut + 2], chunk[cut + 2 :]
        # whole events from here: each starts at the chunk's start or after a newline
        self.data_events += chunk.count(NEXT_DATA) + chunk.startswith(DATA)
        if not self.done and DONE in chunk:
            self.done = True
        if _USAGE_OBJECT.search(chunk) is None:
            return chunk
        return self._usage(chunk)

    def _usage(self, chunk: bytes) -> bytes:
        out = []
        for event in chunk.split(EVENT_END)[:-1]:
            usage = _event_usage(event) if _USAGE_OBJECT.search(event) else None
            if usage is not None:
                try:
                    self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                    self.usage_completion = int(usage.get("completion_tokens") or 0)
                except (TypeError, ValueError):
                    usage = None
            is_usage_only = usage is not None and b'"choices": []' in event.replace(
                b'"choices":[]', b'"choices": []'
            )
            if is_usage_only and not self.forward_usage:
                continue
            if is_usage_only and self.usage_object is not None:
                event = _OBJECT_FIELD.sub(self.usage_object, event, count=1)
            out.append(event + EVENT_END)
        return b"".join(out)

    def flush(self) -> bytes:
        """What is left at the end (an unterminated last event)."""
        rest, self._pending = self._pending, b""
        return rest

    @property
    def completion_tokens(self) -> int:
        if self.usage_completion is not None:
            return self.usage_completion
        return max(0, self.data_events - (2 if self.done else 1))


def ask_for_usage(body: dict[str, Any]) -> bool:
    """Make a streamed request ask its upstream for a usage event; return whether the client
    did (the event is then forwarded; otherwise it is counted and held back)."""
    options = body.get("stream_options")
    asked = isinstance(options, dict) and bool(options.get("include_usage"))
    body["stream_options"] = {
        **(options if isinstance(options, dict) else {}),
        "include_usage": True,
    }
    return asked


# ---- ASGI -------------------------------------------------------------------------------------


class BodyTooLarge(Exception):
    """The request body exceeds the limit."""


class ClientGone(Exception):
    """The client disconnected before it sent its whole request."""


async def read_body(scope: Scope, receive: Receive, *, limit: int) -> bytes:
    """The whole request body; BodyTooLarge past `limit` bytes (a declared length is checked
    before anything is read), ClientGone when the client leaves first."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def until_disconnect(receive: Receive) -> None:
    """Return when the client hangs up (run it as a task beside the answer)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def send_whole(
    send: Send,
    status: int,
    body: bytes,
    headers: Headers = (),
    *,
    content_type: bytes | None = JSON,
) -> None:
    """A whole answer with its length; `content_type` None leaves it to `headers`."""
    head = [(b"content-length", str(len(body)).encode()), *headers]
    if content_type is not None:
        head.insert(0, (b"content-type", content_type))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, body: bytes, extra: Headers = ()) -> None:
    await send_whole(send, status, body, extra)


async def send_error(send: Send, error: OpenAIError, extra: Headers = ()) -> None:
    await send_whole(send, error.status, error.body(), (*error.headers, *extra))


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
