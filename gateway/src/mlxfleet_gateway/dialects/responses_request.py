"""A Responses API request read and turned into a chat-completion body (`translate`).

In: `input` (a string, or items: messages with text content, `function_call` and
`function_call_output`), `instructions` (a system message first, not carried to the next turn,
as OpenAI does), function `tools`, `tool_choice`, `parallel_tool_calls`, `max_output_tokens`,
`temperature`, `top_p`, `text.format` (as chat's `response_format`: engines that cannot enforce
it refuse it, as on chat), `stream`, `store`, `previous_response_id`, `metadata` (echoed);
`user`, `safety_identifier` and `prompt_cache_key` are identifiers, echoed, not sent on. Anything
else (built-in tools, `background`, reasoning items, images, `include`, `truncation: auto`...)
is refused with 400 `unsupported_parameter` naming it, unless its value asks for nothing (null,
`background: false`, `include: []`...). A `previous_response_id` puts the conversation it
continues (core.conversations) before this turn's messages; one not kept is a 400
`previous_response_not_found`.
May import: the standard library, dialects.base, core (errors, conversations).
Called by: dialects.responses (`Responses.translate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

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
MAX_METADATA = 16


@dataclass(frozen=True, slots=True)
class Request:
    """A Responses request as the chat path gets it, and what its answer needs of it."""

    chat: dict[str, Any]  # the chat-completion body (no model or stream yet: base adds them)
    echo: dict[str, Any]  # the request's fields the response object repeats
    store: bool
    previous: str | None  # previous_response_id
    turn: list[dict[str, Any]]  # this turn's chat messages, kept when it completes


def translate(body: dict[str, Any], *, key: str, context: base.Context) -> Request:
    """The chat-completion body for the Responses `body` of the API key named `key` (400
    naming the client's field), with what the answer needs of the request."""
    base.known_fields(body, served=SERVED, neutral=NEUTRAL, api=API)
    chat: dict[str, Any] = {}
    instructions = base.string(body.get("instructions"), "instructions")
    store = body.get("store")
    if store is not None and not isinstance(store, bool):
        raise base.invalid("store", "`store` must be a boolean")
    kept = store is not False
    previous = base.string(body.get("previous_response_id"), "previous_response_id")
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if previous is not None:
        now = context.clock()
        try:
            history = context.conversations.history(key=key, id=previous, now=now)
        except conv.NotKept as exc:
            raise errors.GatewayError(
                400, str(exc), param="previous_response_id", code="previous_response_not_found"
            ) from None
        messages.extend(history)
    turn = input_messages(body.get("input"))
    messages.extend(turn)
    if not messages:
        raise base.invalid("input", "`input` is required: a string or a list of input items")
    chat["messages"] = messages
    tools = body.get("tools")
    base.put_tools(chat, tools, _tool)
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
    echo: dict[str, Any] = {
        "instructions": instructions,
        "max_output_tokens": cap,
        "metadata": metadata or {},
        "parallel_tool_calls": parallel is not False,
        "previous_response_id": previous,
        "store": kept,
        "temperature": body.get("temperature"),
        "text": text if text is not None else {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": tools or [],
        "top_p": body.get("top_p"),
        "user": body.get("user"),
        "safety_identifier": body.get("safety_identifier"),
        "prompt_cache_key": body.get("prompt_cache_key"),
    }
    return Request(chat=chat, echo=echo, store=kept, previous=previous, turn=turn)


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
