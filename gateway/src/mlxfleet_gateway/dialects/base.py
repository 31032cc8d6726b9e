"""What both translated APIs share: the `send` wrapper, reading chat chunks, checks of the body.

`Translation` is one request. `request(body, key=...)` turns the client's body into a chat
completion body (or raises a 400 naming the client's field); `send` is handed to the proxy in
place of the client's ASGI `send`, and translates what the chat path writes:

- a whole answer (a start message held until its body): `answer(chat)` for a 2xx chat
  completion, `error(status, err)` for an OpenAI-shaped error (the gateway's own refusals, an
  upstream's 4xx/5xx);
- a stream (a 200 start to a streamed request): each body chunk holds whole SSE events (the chat
  path's scanner forwards nothing else); every `data:` event is parsed once and handed to
  `text`, `tool_call` (OpenAI's incremental `tool_calls` deltas), the finish reason and usage
  (the translated body always asks for the usage event), or `failed` (the event the gateway
  writes when a stream is cut); `opening()` goes before the first event, `closing()` after the
  last. Keep-alive comments are dropped.

Subclasses write the events of their API; nothing here runs for a chat-completions request.
May import: the standard library, pydantic_core (JSON parsing), core (errors, keys,
conversations), mlxfleet_common.wire.openai_proxy.
Called by: dialects.responses, dialects.responses_request, dialects.messages, the proxy (through
`dialects`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json

from mlxfleet_common.wire import openai_proxy as asgi
from mlxfleet_gateway.core import conversations as conv
from mlxfleet_gateway.core import errors, keys

JSON = b"application/json"
quoted = json.encoder.encode_basestring_ascii  # C: a string as JSON (json.dumps, less)
EVENT_STREAM = b"text/event-stream"
CHAT_STREAM_OPTIONS = {"include_usage": True}  # the translation needs the usage event


@dataclass(frozen=True, slots=True)
class Context:
    """What a translation may need beyond its request: the Responses conversations and clocks."""

    conversations: conv.Conversations = field(default_factory=conv.Conversations)
    clock: Callable[[], float] = time.monotonic  # ages of stored conversations
    wall: Callable[[], float] = time.time  # `created_at` of answers


def unsupported(param: str, message: str) -> errors.GatewayError:
    """400 for a parameter the gateway does not serve (never accepted and ignored)."""
    return errors.GatewayError(400, message, param=param, code="unsupported_parameter")


def invalid(param: str, message: str) -> errors.GatewayError:
    return errors.GatewayError(400, message, param=param, code="invalid_value")


def known_fields(
    body: Mapping[str, Any],
    *,
    served: frozenset[str],
    neutral: Mapping[str, Callable[[Any], bool]],
    api: str,
) -> None:
    """Refuse any field that is neither served nor at a value that asks for nothing (`neutral`:
    field -> test of the value). null is "not given" for every field."""
    for name, value in body.items():
        if value is None or name in served:
            continue
        test = neutral.get(name)
        if test is not None and test(value):
            continue
        if test is not None:
            raise unsupported(
                name, f"`{name}` with value {_short(value)} is not supported by the gateway's {api}"
            )
        raise unsupported(name, f"`{name}` is not a parameter the gateway's {api} supports")


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def string(value: Any, param: str, *, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise invalid(param, f"`{param}` must be a string")
    return value


def obj(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(param, f"`{param}` must be an object")
    return value


def array(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise invalid(param, f"`{param}` must be a list")
    return value


def each(value: Any, param: str, convert: Callable[[Any, str], Any]) -> list[Any]:
    """`convert(entry, "param[i]")` for each entry of the list `value`."""
    return [convert(entry, f"{param}[{i}]") for i, entry in enumerate(array(value, param))]


def put_tools(chat: dict[str, Any], tools: Any, convert: Callable[[Any, str], Any]) -> None:
    """The client's `tools` (when given) as the chat body's, each by `convert(tool, "tools[i]")`;
    an empty list puts none."""
    if tools is not None:
        chat_tools = each(tools, "tools", convert)
        if chat_tools:
            chat["tools"] = chat_tools


def chat_function(tool: dict[str, Any], where: str, *, schema: str) -> dict[str, Any]:
    """A chat completion's `function` of a client-run tool: its name, description and the JSON
    schema of its arguments, read from the field `schema`."""
    fn: dict[str, Any] = {"name": string(tool.get("name"), f"{where}.name", required=True)}
    if tool.get("description") is not None:
        fn["description"] = string(tool["description"], f"{where}.description")
    if tool.get(schema) is not None:
        fn["parameters"] = obj(tool[schema], f"{where}.{schema}")
    return fn


def sse(name: str, payload: dict[str, Any]) -> bytes:
    """One server-sent event with its `event:` line (the Anthropic SDK reads only those)."""
    return b"event: %s\ndata: %s\n\n" % (name.encode(), json.dumps(payload).encode())


def _data(event: bytes) -> bytes | None:
    """The `data:` payload of one SSE event, None for a comment or an event without data."""
    if event.startswith(b"data:"):
        if b"\n" not in event:
            return event[5:].lstrip(b" ")
    elif b"\ndata:" not in event:
        return None
    lines = [ln[5:].lstrip(b" ") for ln in event.split(b"\n") if ln.startswith(b"data:")]
    return b"\n".join(lines)


class Translation:
    """One request in another API's shape; `send` wraps the client's ASGI send."""

    api = ""  # the API's name in the access log
    api_key_header = False  # `x-api-key` is a credential too

    def __init__(self, send: asgi.Send, context: Context) -> None:
        self._send = send
        self.context = context
        self.model = ""
        self.stream = False
        self.key = keys.ANONYMOUS
        self.finish_reason: str | None = None
        self.stop_reason: str | None = None  # the stop string that ended it, when upstream says
        self.usage: dict[str, Any] | None = None
        self.failure: dict[str, Any] | None = None
        self._start: asgi.Message | None = None
        self._calls: dict[Any, int] = {}  # a stream's tool calls: upstream index -> position
        self._parts: list[bytes] = []
        self._streaming = False
        self._opened = False

    # ---- to be written by each API -----------------------------------------------------------

    def translate(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat completion body for the client's `body` (400 naming the client's field)."""
        raise NotImplementedError

    def answer(self, chat: dict[str, Any]) -> dict[str, Any]:
        """The API's whole answer for a chat completion."""
        raise NotImplementedError

    def error(self, status: int, err: dict[str, Any]) -> bytes:
        """The API's error body for an OpenAI-shaped error object."""
        raise NotImplementedError

    def opening(self) -> bytes:
        return b""

    def text(self, text: str) -> bytes:
        raise NotImplementedError

    def call_started(self, call_id: str | None, name: str) -> tuple[int, bytes]:
        """A new tool call in a stream: (its position in the API's answer, the events)."""
        raise NotImplementedError

    def call_arguments(self, at: int, arguments: str) -> bytes:
        """More of the arguments of the call at `at`."""
        raise NotImplementedError

    def failed(self, err: dict[str, Any]) -> bytes:
        raise NotImplementedError

    def closing(self) -> bytes:
        raise NotImplementedError

    # ---- the request -------------------------------------------------------------------------

    def request(self, body: dict[str, Any], *, key: keys.ApiKey) -> dict[str, Any]:
        self.key = key.name
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise invalid("model", "`model` is required and must be a string")
        stream = body.get("stream")
        if stream is not None and not isinstance(stream, bool):
            raise invalid("stream", "`stream` must be a boolean")
        self.model, self.stream = model, bool(stream)
        chat = self.translate(body)
        chat["model"] = model
        if self.stream:
            chat["stream"] = True
            chat["stream_options"] = dict(CHAT_STREAM_OPTIONS)
        return chat

    # ---- the answer --------------------------------------------------------------------------

    def tool_call(self, call: dict[str, Any]) -> bytes:
        """One of OpenAI's incremental `tool_calls` deltas: the first of a call (by its `index`)
        names it, the others add to its arguments."""
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        index = call.get("index")
        if not isinstance(index, int):
            index = call.get("id") or len(self._calls)
        out = b""
        at = self._calls.get(index)
        if at is None:
            call_id, name = call.get("id"), fn.get("name")
            at, out = self.call_started(
                call_id if isinstance(call_id, str) else None,
                name if isinstance(name, str) else "",
            )
            self._calls[index] = at
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            out += self.call_arguments(at, args)
        return out

    def whole_message(self, chat: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """(text, tool calls) of a whole chat completion; its finish reason, stop string and
        usage are kept as a stream's are."""
        choices = chat["choices"]
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        self.finish_reason = choice.get("finish_reason")
        stop = choice.get("stop_reason")
        self.stop_reason = stop if isinstance(stop, str) else None
        usage = chat.get("usage")
        self.usage = usage if isinstance(usage, dict) else None
        content = message.get("content")
        return (content if isinstance(content, str) else ""), chat_tool_calls(message)

    async def send(self, message: asgi.Message) -> None:
        if message["type"] == "http.response.start":
            if self.stream and message["status"] == 200:
                self._streaming = True
                headers = [(k, v) for k, v in message["headers"] if k != b"content-type"]
                headers.insert(0, (b"content-type", EVENT_STREAM))
                await self._send({**message, "headers": headers})
            else:
                self._start = message
            return
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if self._streaming:
            out = self.events(body) if body else b""
            if not more:
                out += self.closing()
            if out or not more:
                await self._send({"type": "http.response.body", "body": out, "more_body": more})
            return
        self._parts.append(body)
        if more:
            return
        assert self._start is not None
        status, out = self.whole(self._start["status"], b"".join(self._parts))
        drop = (b"content-length", b"content-type")
        headers = [(k, v) for k, v in self._start["headers"] if k not in drop]
        head = [(b"content-type", JSON), (b"content-length", str(len(out)).encode()), *headers]
        await self._send({"type": "http.response.start", "status": status, "headers": head})
        await self._send({"type": "http.response.body", "body": out})

    def whole(self, status: int, body: bytes) -> tuple[int, bytes]:
        try:
            parsed = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            parsed = None
        if status >= 400:
            err = parsed.get("error") if isinstance(parsed, dict) else None
            if not isinstance(err, dict):
                text = body[:500].decode("utf-8", "replace")
                err = {"message": text or f"upstream answered {status}", "type": "server_error"}
            return status, self.error(status, err)
        if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list):
            err = {
                "message": "the backend's answer is not a chat completion",
                "type": "server_error",
                "code": "upstream_error",
            }
            return 502, self.error(502, err)
        return status, json.dumps(self.answer(parsed)).encode()

    def events(self, chunk: bytes) -> bytes:
        """The API's events for whole chat SSE events (the translated stream's per-event work:
        one parse, a few lookups, the API's event written)."""
        out: list[bytes] = []
        if not self._opened:
            self._opened = True
            out.append(self.opening())
        for event in chunk.split(b"\n\n"):
            if event.startswith(b"data: {") and b"\n" not in event:  # one event, one line
                data = event[6:]
            else:
                found = _data(event) if event else None
                if not found or found[:1] != b"{":
                    continue  # comments, [DONE]
                data = found
            try:
                item = from_json(data)  # pydantic's (Rust) parser: a third of json.loads' time
                self._chat_event(item, out)
            except (ValueError, AttributeError, TypeError, IndexError, KeyError):
                continue  # not a chat chunk: nothing a client could be given
        return b"".join(out)

    def _chat_event(self, item: dict[str, Any], out: list[bytes]) -> None:
        choices = item.get("choices")
        if choices:
            choice = choices[0]
            delta = choice.get("delta")
            if delta:
                content = delta.get("content")
                if content and type(content) is str:
                    out.append(self.text(content))
                calls = delta.get("tool_calls")
                if calls:
                    out.extend(self.tool_call(c) for c in calls if isinstance(c, dict))
            reason = choice.get("finish_reason")
            if reason is not None:
                self.finish_reason = str(reason)
                stop = choice.get("stop_reason")
                self.stop_reason = stop if isinstance(stop, str) else None
        if "usage" in item and isinstance(item["usage"], dict):
            self.usage = item["usage"]
        elif "error" in item and self.failure is None:
            err = item["error"]
            self.failure = err if isinstance(err, dict) else {"message": str(err)}
            out.append(self.failed(self.failure))


def chat_tool_calls(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The whole tool calls of a chat completion's message."""
    calls = message.get("tool_calls")
    out = []
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            args = fn.get("arguments")
            out.append(
                {
                    "id": call.get("id") if isinstance(call.get("id"), str) else None,
                    "name": fn.get("name") if isinstance(fn.get("name"), str) else "",
                    "arguments": args if isinstance(args, str) else json.dumps(args or {}),
                }
            )
    return out


def usage_numbers(usage: Mapping[str, Any] | None) -> tuple[int, int, int]:
    """(prompt, completion, cached prompt) tokens of a chat usage object."""
    if not usage:
        return 0, 0, 0
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    return (
        _int(usage.get("prompt_tokens")),
        _int(usage.get("completion_tokens")),
        _int(cached),
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
