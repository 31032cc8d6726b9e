"""The OpenAI Responses API (`POST /v1/responses`) served over chat-completion backends.

In: `input` (a string, or items: messages with text content, `function_call` and
`function_call_output`), `instructions` (a system message first, not carried to the next turn,
as OpenAI does), function `tools`, `tool_choice`, `parallel_tool_calls`, `max_output_tokens`,
`temperature`, `top_p`, `text.format` (as chat's `response_format`: engines that cannot enforce
it refuse it, as on chat), `stream`, `store`, `previous_response_id`, `metadata` (echoed);
`user`, `safety_identifier` and `prompt_cache_key` are identifiers, echoed, not sent on. Anything
else (built-in tools, `background`, reasoning items, images, `include`, `truncation: auto`...)
is refused with 400 `unsupported_parameter` naming it, unless its value asks for nothing (null,
`background: false`, `include: []`...).

Out: a `response` object (message and `function_call` output items, usage as
input/output/total tokens, `incomplete` with `max_output_tokens` when the length cap ended it), or
its stream: `response.created`, `response.in_progress`, then per output item
`response.output_item.added`, `response.content_part.added`, `response.output_text.delta`...
`response.output_text.done`, `response.content_part.done`, `response.output_item.done` (function
calls: `response.function_call_arguments.delta` / `.done`), then `response.completed` (or
`response.incomplete`, or `response.failed` when the stream was cut), each with its
`sequence_number`. Errors keep the OpenAI shape; `param` names the Responses field.

Conversations (`previous_response_id`) are kept per API key in this replica's memory
(core.conversations): what a response added (its input items and its answer) is stored when it
completes, unless `store: false`.
May import: the standard library, base, core (errors, conversations),
mlxfleet_common.wire.openai_proxy. Called by: the proxy (through `dialects.PATHS`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from mlxfleet_common.wire import openai_proxy as asgi
from mlxfleet_gateway.core import conversations as conv
from mlxfleet_gateway.core import errors
from mlxfleet_gateway.dialects import base

API = "Responses API (/v1/responses)"
SERVED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "stream",
        "store",
        "previous_response_id",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_output_tokens",
        "temperature",
        "top_p",
        "metadata",
        "text",
        "user",
        "safety_identifier",
        "prompt_cache_key",
    }
)
NEUTRAL: dict[str, Callable[[Any], bool]] = {
    "background": lambda v: v is False,
    "truncation": lambda v: v == "disabled",
    "include": lambda v: v == [],
    "reasoning": lambda v: isinstance(v, dict) and all(x is None for x in v.values()),
    "service_tier": lambda v: v in ("auto", "default"),
    "top_logprobs": lambda v: v == 0,
    "stream_options": lambda v: (
        isinstance(v, dict) and v.get("include_obfuscation") in (None, False)
    ),
}
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
# chat fields named in an error (the agent's, an engine's) -> the Responses field the client sent
CHAT_PARAMS = {
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "messages": "input",
}
MAX_METADATA = 16


def _token() -> str:
    return secrets.token_hex(12)


class Responses(base.Translation):
    api = "responses"

    def __init__(self, send: asgi.Send, context: base.Context) -> None:
        super().__init__(send, context)
        self.id = context.conversations.new_id()
        self.created_at = int(context.wall())
        self.echo: dict[str, Any] = {}
        self.store = True
        self.previous: str | None = None
        self.turn: list[dict[str, Any]] = []  # this turn's chat messages, kept when it completes
        self.seq = 0
        self.items: list[dict[str, Any]] = []
        self._open: int | None = None  # the output item being streamed
        self._text: list[str] = []  # of the open message
        self._delta_head = b""
        self._args: dict[int, list[str]] = {}

    # ---- the request -------------------------------------------------------------------------

    def translate(self, body: dict[str, Any]) -> dict[str, Any]:
        base.known_fields(body, served=SERVED, neutral=NEUTRAL, api=API)
        chat: dict[str, Any] = {}
        instructions = base.string(body.get("instructions"), "instructions")
        store = body.get("store")
        if store is not None and not isinstance(store, bool):
            raise base.invalid("store", "`store` must be a boolean")
        self.store = store is not False
        self.previous = base.string(body.get("previous_response_id"), "previous_response_id")
        messages: list[dict[str, Any]] = []
        if instructions:
            messages.append({"role": "system", "content": instructions})
        if self.previous is not None:
            now = self.context.clock()
            try:
                history = self.context.conversations.history(
                    key=self.key, id=self.previous, now=now
                )
            except conv.NotKept as exc:
                raise errors.GatewayError(
                    400, str(exc), param="previous_response_id", code="previous_response_not_found"
                ) from None
            messages.extend(history)
        self.turn = input_messages(body.get("input"))
        messages.extend(self.turn)
        if not messages:
            raise base.invalid("input", "`input` is required: a string or a list of input items")
        chat["messages"] = messages
        tools = body.get("tools")
        if tools is not None:
            chat_tools = base.each(tools, "tools", _tool)
            if chat_tools:
                chat["tools"] = chat_tools
        if body.get("tool_choice") is not None:
            chat["tool_choice"] = _tool_choice(body["tool_choice"])
        parallel = body.get("parallel_tool_calls")
        if parallel is not None:
            if not isinstance(parallel, bool):
                raise base.invalid("parallel_tool_calls", "`parallel_tool_calls` must be a boolean")
            chat["parallel_tool_calls"] = parallel
        cap = body.get("max_output_tokens")
        if cap is not None:
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
                raise base.invalid(
                    "max_output_tokens", "`max_output_tokens` must be an integer of at least 1"
                )
            chat["max_tokens"] = cap
        for name in ("temperature", "top_p"):  # checked by the chat path (openai_body)
            if body.get(name) is not None:
                chat[name] = body[name]
        text = body.get("text")
        if text is not None:
            fmt = _text_format(base.obj(text, "text"))
            if fmt is not None:
                chat["response_format"] = fmt
        metadata = body.get("metadata")
        if metadata is not None:
            _metadata(metadata)
        self.echo = {
            "instructions": instructions,
            "max_output_tokens": cap,
            "metadata": metadata or {},
            "parallel_tool_calls": parallel is not False,
            "previous_response_id": self.previous,
            "store": self.store,
            "temperature": body.get("temperature"),
            "text": text if text is not None else {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice") or "auto",
            "tools": tools or [],
            "top_p": body.get("top_p"),
            "user": body.get("user"),
            "safety_identifier": body.get("safety_identifier"),
            "prompt_cache_key": body.get("prompt_cache_key"),
        }
        return chat

    # ---- whole answers -----------------------------------------------------------------------

    def answer(self, chat: dict[str, Any]) -> dict[str, Any]:
        text, calls = self.whole_message(chat)
        if text or not calls:
            self.items.append(_message_item(_output_id("msg"), text))
        for call in calls:
            item = _call_item(call.get("id") or "call_" + _token(), call["name"])
            item["arguments"], item["status"] = call["arguments"], "completed"
            self.items.append(item)
        status, incomplete = self._status()
        self._keep()
        return self._response(status, incomplete=incomplete)

    def error(self, status: int, err: dict[str, Any]) -> bytes:
        param = err.get("param")
        if isinstance(param, str):
            head = param.split(".", 1)[0].split("[", 1)[0]
            if head in CHAT_PARAMS:
                err = {**err, "param": CHAT_PARAMS[head]}
        return json.dumps({"error": err}).encode()

    # ---- streams -----------------------------------------------------------------------------

    def _event(self, name: str, payload: dict[str, Any]) -> bytes:
        payload = {"type": name, "sequence_number": self.seq, **payload}
        self.seq += 1
        return base.sse(name, payload)

    def opening(self) -> bytes:
        response = self._response("in_progress")
        return self._event("response.created", {"response": response}) + self._event(
            "response.in_progress", {"response": response}
        )

    def text(self, text: str) -> bytes:
        out = b""
        if self._open is None or self.items[self._open]["type"] != "message":
            out = self._close_item() + self._open_message()
        self._text.append(text)
        seq = self.seq
        self.seq += 1
        return b'%s%s,"logprobs":[],"sequence_number":%d}\n\n' % (
            out + self._delta_head,
            base.quoted(text).encode(),
            seq,
        )

    def call_started(self, call_id: str | None, name: str) -> tuple[int, bytes]:
        out = self._close_item()
        self.items.append(_call_item(call_id or "call_" + _token(), name))
        at = self._open = len(self.items) - 1
        self._args[at] = []
        added = {"output_index": at, "item": self.items[at]}
        return at, out + self._event("response.output_item.added", added)

    def call_arguments(self, at: int, arguments: str) -> bytes:
        self._args[at].append(arguments)
        delta = {"item_id": self.items[at]["id"], "output_index": at, "delta": arguments}
        return self._event("response.function_call_arguments.delta", delta)

    def failed(self, err: dict[str, Any]) -> bytes:
        out = self._close_item()
        error = {"code": "server_error", "message": str(err.get("message") or "stream failed")}
        response = self._response("failed", error=error)
        return out + self._event("response.failed", {"response": response})

    def closing(self) -> bytes:
        if self.failure is not None:
            return b""
        out = self._close_item()
        if not self.items:
            out += self._open_message() + self._close_item()
        status, incomplete = self._status()
        self._keep()
        response = self._response(status, incomplete=incomplete)
        name = "response.completed" if status == "completed" else "response.incomplete"
        return out + self._event(name, {"response": response})

    def _open_message(self) -> bytes:
        item = {
            "type": "message",
            "id": _output_id("msg"),
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        self.items.append(item)
        at = self._open = len(self.items) - 1
        self._text = []
        head = {
            "type": "response.output_text.delta",
            "item_id": item["id"],
            "output_index": at,
            "content_index": 0,
        }
        self._delta_head = (
            b"event: response.output_text.delta\ndata: "
            + json.dumps(head)[:-1].encode()
            + b',"delta":'
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item["id"], "output_index": at, "content_index": 0}
        return self._event(
            "response.output_item.added", {"output_index": at, "item": dict(item)}
        ) + self._event("response.content_part.added", {**where, "part": part})

    def _close_item(self) -> bytes:
        at, self._open = self._open, None
        if at is None:
            return b""
        item = self.items[at]
        if item["type"] == "message":
            text = "".join(self._text)
            done = _message_item(item["id"], text)
            self.items[at] = done
            where = {"item_id": item["id"], "output_index": at, "content_index": 0}
            return (
                self._event("response.output_text.done", {**where, "text": text, "logprobs": []})
                + self._event("response.content_part.done", {**where, "part": done["content"][0]})
                + self._event("response.output_item.done", {"output_index": at, "item": done})
            )
        item["arguments"] = "".join(self._args[at])
        item["status"] = "completed"
        args = {
            "item_id": item["id"],
            "output_index": at,
            "name": item["name"],
            "arguments": item["arguments"],
        }
        return self._event("response.function_call_arguments.done", args) + self._event(
            "response.output_item.done", {"output_index": at, "item": item}
        )

    # ---- the response object -----------------------------------------------------------------

    def _status(self) -> tuple[str, dict[str, Any] | None]:
        if self.finish_reason == "length":
            return "incomplete", {"reason": "max_output_tokens"}
        if self.finish_reason == "content_filter":
            return "incomplete", {"reason": "content_filter"}
        return "completed", None

    def _response(
        self,
        status: str,
        *,
        incomplete: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        usage = None
        if status != "in_progress" and self.usage is not None:
            prompt, completion, cached = base.usage_numbers(self.usage)
            usage = {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + completion,
            }
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": incomplete,
            "model": self.model,
            "output": list(self.items) if status != "in_progress" else [],
            "reasoning": {"effort": None, "summary": None},
            "truncation": "disabled",
            "usage": usage,
            **self.echo,
        }

    def _keep(self) -> None:
        """Store this turn (its input items and its answer) for `previous_response_id`."""
        if not self.store:
            return
        answer: dict[str, Any] = {"role": "assistant", "content": ""}
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for item in self.items:
            if item["type"] == "message":
                texts.extend(p["text"] for p in item["content"])
            else:
                fn = {"name": item["name"], "arguments": item["arguments"]}
                calls.append({"id": item["call_id"], "type": "function", "function": fn})
        answer["content"] = "".join(texts)
        if calls:
            answer["tool_calls"] = calls
        self.context.conversations.put(
            key=self.key,
            id=self.id,
            parent=self.previous,
            messages=[*self.turn, answer],
            now=self.context.clock(),
        )


# ---- translating the request ----------------------------------------------------------------


def input_messages(value: Any) -> list[dict[str, Any]]:
    """Chat messages for the Responses `input` (a string or a list of items)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(base.array(value, "input")):
        where = f"input[{i}]"
        item = base.obj(item, where)
        kind = item.get("type")
        if kind is None or kind == "message":
            _message(item, where, out)
        elif kind == "function_call":
            call_id = base.string(item.get("call_id"), f"{where}.call_id", required=True)
            name = base.string(item.get("name"), f"{where}.name", required=True)
            args = base.string(item.get("arguments"), f"{where}.arguments", required=True)
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": args},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)  # parallel calls: one assistant message
            elif last is not None and last["role"] == "assistant":
                last["tool_calls"] = [call]
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = base.string(item.get("call_id"), f"{where}.call_id", required=True)
            output = _text_of(item.get("output"), f"{where}.output")
            out.append({"role": "tool", "tool_call_id": call_id, "content": output})
        else:
            raise base.unsupported(
                f"{where}.type",
                f"`{where}.type` {kind!r} is not supported by the gateway's {API}: messages "
                "with text, function_call and function_call_output items only",
            )
    return out


def _message(item: dict[str, Any], where: str, out: list[dict[str, Any]]) -> None:
    role = item.get("role")
    if role not in ROLES:
        raise base.invalid(
            f"{where}.role",
            f"`{where}.role` must be one of {', '.join(ROLES)}",
        )
    content = _text_of(item.get("content"), f"{where}.content")
    out.append({"role": ROLES[role], "content": content})


def _text_of(value: Any, where: str) -> str:
    """The text of a content string or list of text parts (anything else is refused)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise base.invalid(where, f"`{where}` must be a string or a list of text parts")
    texts: list[str] = []
    for j, part in enumerate(value):
        at = f"{where}[{j}]"
        part = base.obj(part, at)
        kind = part.get("type")
        if kind == "refusal":
            texts.append(base.string(part.get("refusal"), f"{at}.refusal", required=True) or "")
            continue
        if kind not in TEXT_PARTS:
            raise base.unsupported(
                f"{at}.type",
                f"`{at}.type` {kind!r} is not supported by the gateway's {API}: text parts only "
                "(input_text, output_text)",
            )
        texts.append(base.string(part.get("text"), f"{at}.text", required=True) or "")
    return "".join(texts)


def _tool(tool: Any, where: str) -> dict[str, Any]:
    tool = base.obj(tool, where)
    kind = tool.get("type")
    if kind != "function":
        raise base.unsupported(
            f"{where}.type",
            f"`{where}.type` {kind!r} is a tool the gateway does not run: only function tools "
            "(type function), which the client runs itself",
        )
    fn = base.chat_function(tool, where, schema="parameters")
    if tool.get("strict") is not None:
        fn["strict"] = tool["strict"]
    return {"type": "function", "function": fn}


def _tool_choice(value: Any) -> Any:
    if value in ("none", "auto", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function":
        name = base.string(value.get("name"), "tool_choice.name", required=True)
        return {"type": "function", "function": {"name": name}}
    raise base.unsupported(
        "tool_choice",
        "`tool_choice` must be none, auto, required or {type: function, name}: the gateway runs "
        "no built-in tools",
    )


def _text_format(text: Mapping[str, Any]) -> dict[str, Any] | None:
    """Chat's `response_format` for `text.format`."""
    if text.get("verbosity") is not None:
        raise base.unsupported("text.verbosity", f"`text.verbosity` is not supported by the {API}")
    fmt = text.get("format")
    if fmt is None:
        return None
    fmt = base.obj(fmt, "text.format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise base.invalid(
        "text.format.type", "`text.format.type` must be text, json_object or json_schema"
    )


def _metadata(value: Any) -> None:
    ok = (
        isinstance(value, dict)
        and len(value) <= MAX_METADATA
        and all(
            isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
            for k, v in value.items()
        )
    )
    if not ok:
        raise base.invalid(
            "metadata",
            f"`metadata` must be an object of at most {MAX_METADATA} string values (keys up to "
            "64 characters, values up to 512)",
        )


# ---- output items ---------------------------------------------------------------------------


def _output_id(prefix: str) -> str:
    return f"{prefix}_{_token()}"


def _message_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def _call_item(call_id: str, name: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": _output_id("fc"),
        "call_id": call_id,
        "name": name,
        "arguments": "",
        "status": "in_progress",
    }
