"""Anthropic's Messages API (`POST /v1/messages`) served over chat-completion backends.

In: `messages` (user and assistant turns; content a string or text, `tool_use` and
`tool_result` blocks), `system` (a string or text blocks), `max_tokens` (required, as Anthropic
requires it), `stop_sequences`, `temperature`, `top_p`, `top_k`, custom `tools` (name,
description, input_schema), `tool_choice` (auto, any, tool, none; `disable_parallel_tool_use`),
`stream`, `metadata` (accepted; its `user_id` is an identifier, not sent on). `cache_control` (on
the request or its blocks) is accepted: prompt caching is the engine's own (prefix affinity sends
a conversation to the replica that holds its prefix). Anything else (images, documents,
thinking, server tools, `container`, `mcp_servers`...) is refused with 400 naming it.

Out: a `message` (text and `tool_use` blocks, `stop_reason` end_turn / max_tokens /
stop_sequence / tool_use, usage input/output tokens), or its stream: `message_start`, `ping`,
per block `content_block_start`, `content_block_delta` (`text_delta`, `input_json_delta`),
`content_block_stop`, then `message_delta` (stop reason, usage: output tokens and, since the
backend reports them at the end, input tokens) and `message_stop`; a stream cut after it
started ends with an `error` event. Errors have Anthropic's shape:
`{"type": "error", "error": {"type", "message"}}` (the type follows the status, as Anthropic's).
The credential may come as `x-api-key` (what the Anthropic SDK sends) or `Authorization: Bearer`.
May import: the standard library, base, mlxfleet_common.wire.openai_proxy. Called by: the proxy
(through `dialects.PATHS`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

from mlxfleet_common.wire import openai_proxy as asgi
from mlxfleet_gateway.dialects import base

API = "Messages API (/v1/messages)"
SERVED = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "metadata",
        "cache_control",
    }
)
NEUTRAL: dict[str, Callable[[Any], bool]] = {
    "thinking": lambda v: isinstance(v, dict) and v.get("type") == "disabled",
    "service_tier": lambda v: v in ("auto", "standard_only"),
}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
CHAT_PARAMS = {"stop": "stop_sequences", "max_completion_tokens": "max_tokens"}


def _id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


class Messages(base.Translation):
    api = "messages"
    api_key_header = True

    def __init__(self, send: asgi.Send, context: base.Context) -> None:
        super().__init__(send, context)
        self.id = _id("msg_")
        self.stops: tuple[str, ...] = ()
        self._block: int | None = None  # index of the open content block
        self._kind = ""  # its type: text or tool_use
        self._blocks = 0
        self._text_head = b""
        self._last_start = b""

    # ---- the request -------------------------------------------------------------------------

    def translate(self, body: dict[str, Any]) -> dict[str, Any]:
        base.known_fields(body, served=SERVED, neutral=NEUTRAL, api=API)
        cap = body.get("max_tokens")
        if cap is None:
            raise base.invalid("max_tokens", "max_tokens: Field required")
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise base.invalid("max_tokens", "`max_tokens` must be an integer of at least 1")
        chat: dict[str, Any] = {"max_tokens": cap}
        messages: list[dict[str, Any]] = []
        system = body.get("system")
        if system is not None:
            text = system if isinstance(system, str) else _texts(system, "system")
            if text:
                messages.append({"role": "system", "content": text})
        turns = body.get("messages")
        if not isinstance(turns, list) or not turns:
            raise base.invalid("messages", "`messages` is required: a non-empty list of messages")
        for i, turn in enumerate(turns):
            _turn(turn, f"messages[{i}]", messages)
        chat["messages"] = messages
        stops = body.get("stop_sequences")
        if stops is not None:
            if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
                raise base.invalid("stop_sequences", "`stop_sequences` must be a list of strings")
            if stops:
                chat["stop"] = stops
                self.stops = tuple(stops)
        for name in ("temperature", "top_p", "top_k"):  # checked by the chat path (openai_body)
            if body.get(name) is not None:
                chat[name] = body[name]
        base.put_tools(chat, body.get("tools"), _tool)
        if body.get("tool_choice") is not None:
            _tool_choice(base.obj(body["tool_choice"], "tool_choice"), chat)
        if body.get("metadata") is not None:
            base.obj(body["metadata"], "metadata")
        return chat

    # ---- whole answers -----------------------------------------------------------------------

    def answer(self, chat: dict[str, Any]) -> dict[str, Any]:
        text, calls = self.whole_message(chat)
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for call in calls:
            tool_id = call["id"] or _id("toolu_")
            block = {"type": "tool_use", "id": tool_id, "name": call["name"]}
            content.append({**block, "input": _input(call["arguments"])})
        prompt, completion, _ = base.usage_numbers(self.usage)
        reason, sequence = self._stop()
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }

    def error(self, status: int, err: dict[str, Any]) -> bytes:
        return json.dumps(_error(status, err)).encode()

    # ---- streams -----------------------------------------------------------------------------

    def opening(self) -> bytes:
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        start = base.sse("message_start", {"type": "message_start", "message": message})
        return start + base.sse("ping", {"type": "ping"})

    def text(self, text: str) -> bytes:
        out = b""
        if self._kind != "text":
            out = self._stop_block()
            at = self._start_block({"type": "text", "text": ""})
            self._kind = "text"
            self._text_head = (
                b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
                b'"delta":{"type":"text_delta","text":' % at
            )
            out += self._last_start
        return b"%s%s%s}}\n\n" % (out, self._text_head, base.quoted(text).encode())

    def call_started(self, call_id: str | None, name: str) -> tuple[int, bytes]:
        out = self._stop_block()
        block = {"type": "tool_use", "id": call_id or _id("toolu_"), "name": name, "input": {}}
        at = self._start_block(block)
        self._kind = "tool_use"
        return at, out + self._last_start

    def call_arguments(self, at: int, arguments: str) -> bytes:
        delta = {
            "type": "content_block_delta",
            "index": at,
            "delta": {"type": "input_json_delta", "partial_json": arguments},
        }
        return base.sse("content_block_delta", delta)

    def failed(self, err: dict[str, Any]) -> bytes:
        return base.sse("error", _error(500, err))

    def closing(self) -> bytes:
        if self.failure is not None:
            return b""
        out = self._stop_block()
        prompt, completion, _ = base.usage_numbers(self.usage)
        reason, sequence = self._stop()
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }
        return (
            out
            + base.sse("message_delta", delta)
            + base.sse("message_stop", {"type": "message_stop"})
        )

    def _start_block(self, block: dict[str, Any]) -> int:
        at = self._block = self._blocks
        self._blocks += 1
        start = {"type": "content_block_start", "index": at, "content_block": block}
        self._last_start = base.sse("content_block_start", start)
        return at

    def _stop_block(self) -> bytes:
        at, self._block, self._kind = self._block, None, ""
        if at is None:
            return b""
        return base.sse("content_block_stop", {"type": "content_block_stop", "index": at})

    def _stop(self) -> tuple[str, str | None]:
        """(stop_reason, stop_sequence) for the chat finish reason."""
        if self.finish_reason == "stop" and self.stop_reason in self.stops:
            return "stop_sequence", self.stop_reason
        return STOP_REASONS.get(self.finish_reason or "stop", "end_turn"), None


# ---- translating the request ----------------------------------------------------------------


def _error(status: int, err: dict[str, Any]) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = str(err.get("message") or f"error {status}")
    param = err.get("param")
    if isinstance(param, str) and param.split("[", 1)[0] in CHAT_PARAMS:
        param = CHAT_PARAMS[param.split("[", 1)[0]]
    out: dict[str, Any] = {"type": kind, "message": message}
    if err.get("code") is not None:
        out["code"] = err["code"]  # the gateway's code (docs/gateway.md, "Errors")
    if param is not None:
        out["param"] = param
    return {"type": "error", "error": out}


def _texts(blocks: Any, where: str) -> str:
    """The text of a list of text blocks."""
    texts = []
    for j, block in enumerate(base.array(blocks, where)):
        at = f"{where}[{j}]"
        block = base.obj(block, at)
        if block.get("type") != "text":
            raise base.unsupported(
                f"{at}.type",
                f"`{at}.type` {block.get('type')!r} is not supported here: text blocks only",
            )
        texts.append(base.string(block.get("text"), f"{at}.text", required=True) or "")
    return "".join(texts)


def _turn(turn: Any, where: str, out: list[dict[str, Any]]) -> None:
    turn = base.obj(turn, where)
    role = turn.get("role")
    if role not in ("user", "assistant"):
        raise base.invalid(f"{where}.role", f"`{where}.role` must be user or assistant")
    content = turn.get("content")
    if isinstance(content, str):
        out.append({"role": role, "content": content})
        return
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(base.array(content, f"{where}.content")):
        at = f"{where}.content[{j}]"
        block = base.obj(block, at)
        kind = block.get("type")
        if kind == "text":
            texts.append(base.string(block.get("text"), f"{at}.text", required=True) or "")
        elif kind == "tool_use" and role == "assistant":
            tool_id = base.string(block.get("id"), f"{at}.id", required=True)
            name = base.string(block.get("name"), f"{at}.name", required=True)
            args = json.dumps(block.get("input") or {})
            fn = {"name": name, "arguments": args}
            calls.append({"id": tool_id, "type": "function", "function": fn})
        elif kind == "tool_result" and role == "user":
            tool_id = base.string(block.get("tool_use_id"), f"{at}.tool_use_id", required=True)
            result = block.get("content")
            text = "" if result is None else result
            if not isinstance(text, str):
                text = _texts(text, f"{at}.content")
            if block.get("is_error") is True:
                text = "Error: " + text
            out.append({"role": "tool", "tool_call_id": tool_id, "content": text})
        else:
            raise base.unsupported(
                f"{at}.type",
                f"`{at}.type` {kind!r} is not supported by the gateway's {API}: text, tool_use "
                "(assistant) and tool_result (user) blocks only",
            )
    if role == "assistant":
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    elif texts:
        out.append({"role": "user", "content": "".join(texts)})


def _tool(tool: Any, where: str) -> dict[str, Any]:
    tool = base.obj(tool, where)
    kind = tool.get("type")
    if kind not in (None, "custom"):
        raise base.unsupported(
            f"{where}.type",
            f"`{where}.type` {kind!r} is a server tool the gateway does not run: only custom "
            "tools (name, description, input_schema), which the client runs itself",
        )
    fn = base.chat_function(tool, where, schema="input_schema")
    if "parameters" not in fn:
        raise base.invalid(f"{where}.input_schema", f"{where}.input_schema: Field required")
    return {"type": "function", "function": fn}


def _tool_choice(choice: dict[str, Any], chat: dict[str, Any]) -> None:
    kind = choice.get("type")
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool":
        name = base.string(choice.get("name"), "tool_choice.name", required=True)
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise base.invalid("tool_choice.type", "`tool_choice.type` must be auto, any, tool or none")
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False


def _input(arguments: str) -> Any:
    """A tool call's arguments as the `input` object (kept as a string when not JSON)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}
