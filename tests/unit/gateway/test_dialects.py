"""The translations of /v1/responses and /v1/messages (gateway dialects), as pure logic: bodies in,
chat bodies out; chat answers and chat SSE chunks in, the other API's answers and events out,
each event validated against the `openai` / `anthropic` SDK's own models (strict pydantic
validation: a missing or mistyped field fails here). Through the real gateway:
tests/e2e/test_gateway_dialects.py."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import MutableMapping
from typing import Any, Generic, TypeVar, cast

import pytest
from pydantic import TypeAdapter

from mlxfleet_gateway import dialects
from mlxfleet_gateway.core import conversations as conv
from mlxfleet_gateway.core import errors, keys
from mlxfleet_gateway.dialects import base, messages, responses

T = TypeVar("T", bound=base.Translation)


@functools.cache
def sdk(name: str) -> TypeAdapter[Any]:
    """The SDKs' models, imported and built when a test first needs them (seconds: not at the
    unit suite's collection)."""
    from anthropic import types as anthropic_types
    from openai.types import responses as openai_types

    kinds: dict[str, Any] = {
        "response_event": openai_types.ResponseStreamEvent,
        "response": openai_types.Response,
        "message_event": anthropic_types.RawMessageStreamEvent,
        "message": anthropic_types.Message,
    }
    return TypeAdapter(kinds[name])


def strict(name: str, value: Any) -> Any:
    return sdk(name).validate_python(value, strict=True)


KEY = keys.ApiKey("team-a", keys.KeySpec(key_hash="0" * 64, namespaces=("a",)))
OTHER = keys.ApiKey("team-b", keys.KeySpec(key_hash="1" * 64, namespaces=("a",)))


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish, **extra}
    return (
        b"data: "
        + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}).encode()
        + b"\n\n"
    )


USAGE = (
    b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4, '
    b'"total_tokens": 11}}\n\ndata: [DONE]\n\n'
)
TEXT_STREAM = [
    b": keepalive 3/10\n\n" + chunk({"role": "assistant", "content": "Hel"}),
    chunk({"content": 'lo "you"'}) + chunk({"content": "!"}),
    chunk(finish="length") + USAGE,
]
CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
TOOL_STREAM = [
    chunk({"role": "assistant", "content": "Let me see."}),
    chunk({"tool_calls": [CALL]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
    chunk(finish="tool_calls") + USAGE,
]
CUT = errors.upstream_failed("n1 stopped in the middle of this stream").event()


class Wire(Generic[T]):
    """Drives one translation the way the relay drives the client's send."""

    def __init__(self, cls: type[T], context: base.Context | None = None) -> None:
        self.sent: list[dict[str, Any]] = []

        async def send(message: MutableMapping[str, Any]) -> None:
            self.sent.append(cast(dict[str, Any], message))

        self.t = cls(send, context or base.Context())

    def request(self, body: dict[str, Any], key: keys.ApiKey = KEY) -> dict[str, Any]:
        return self.t.request(body, key=key)

    def stream(self, chunks: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
        async def run() -> None:
            head = [(b"content-type", b"text/event-stream"), (b"x-mlxfleet-backend", b"ns/d@n1")]
            await self.t.send({"type": "http.response.start", "status": 200, "headers": head})
            for c in chunks:
                await self.t.send({"type": "http.response.body", "body": c, "more_body": True})
            await self.t.send({"type": "http.response.body", "body": b"", "more_body": False})

        asyncio.run(run())
        assert self.sent[0]["headers"][0] == (b"content-type", b"text/event-stream")
        assert (b"x-mlxfleet-backend", b"ns/d@n1") in self.sent[0]["headers"]
        assert self.sent[-1]["more_body"] is False
        wire = b"".join(m["body"] for m in self.sent[1:])
        out = []
        for event in wire.split(b"\n\n")[:-1]:
            name, data = event.split(b"\n")
            assert name.startswith(b"event: ")
            assert data.startswith(b"data: ")
            out.append((name[7:].decode(), json.loads(data[6:])))
        return out

    def whole(self, status: int, body: dict[str, Any]) -> tuple[int, dict[str, Any], list[Any]]:
        async def run() -> None:
            head = [(b"content-type", b"application/json"), (b"content-length", b"9")]
            await self.t.send({"type": "http.response.start", "status": status, "headers": head})
            await self.t.send({"type": "http.response.body", "body": json.dumps(body).encode()})

        asyncio.run(run())
        start, sent = self.sent
        length = dict(start["headers"])[b"content-length"]
        assert int(length) == len(sent["body"])
        return start["status"], json.loads(sent["body"]), start["headers"]


def chat_answer(
    content: str | None, *, calls: list[Any] | None = None, finish: str = "stop"
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11},
    }


# ---- Responses ---------------------------------------------------------------------------------


def test_responses_input_items_become_chat_messages() -> None:
    chat = Wire(responses.Responses).request(
        {
            "model": "m",
            "instructions": "be brief",
            "input": [
                {"role": "developer", "content": "house rules"},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "a"},
                        {"type": "input_text", "text": "b"},
                    ],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "c"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "one"},
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": [{"type": "input_text", "text": "two"}],
                },
            ],
            "tools": [
                {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}
            ],
            "tool_choice": {"type": "function", "name": "f"},
            "parallel_tool_calls": False,
            "max_output_tokens": 9,
            "temperature": 0.2,
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            "stream": True,
        }
    )
    assert chat["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "house rules"},
        {"role": "user", "content": "ab"},
        {
            "role": "assistant",
            "content": "c",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"type": "object"}, "strict": True},
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["parallel_tool_calls"] is False
    assert chat["max_tokens"] == 9
    assert chat["temperature"] == 0.2
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "object"}},
    }
    assert chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}  # the translation needs usage
    assert chat["model"] == "m"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        pytest.param(
            {"tools": [{"type": "file_search"}]},
            "tools[0].type",
            "unsupported_parameter",
            id="builtin-tool",
        ),
        pytest.param({"background": True}, "background", "unsupported_parameter", id="background"),
        pytest.param({"prompt": {"id": "p"}}, "prompt", "unsupported_parameter", id="prompt"),
        pytest.param(
            {"stream_options": {"include_obfuscation": True}},
            "stream_options",
            "unsupported_parameter",
            id="obfuscation",
        ),
        pytest.param(
            {"frequency_penalty": 1}, "frequency_penalty", "unsupported_parameter", id="unknown"
        ),
        pytest.param(
            {"input": [{"type": "item_reference", "id": "x"}]},
            "input[0].type",
            "unsupported_parameter",
            id="reference",
        ),
        pytest.param(
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
            "unsupported_parameter",
            id="file",
        ),
        pytest.param(
            {"input": [{"role": "critic", "content": "x"}]},
            "input[0].role",
            "invalid_value",
            id="role",
        ),
        pytest.param(
            {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input[0].call_id",
            "invalid_value",
            id="call-id",
        ),
        pytest.param(
            {"tool_choice": {"type": "web_search"}},
            "tool_choice",
            "unsupported_parameter",
            id="tool-choice",
        ),
        pytest.param(
            {"text": {"verbosity": "low"}},
            "text.verbosity",
            "unsupported_parameter",
            id="verbosity",
        ),
        pytest.param(
            {"max_output_tokens": True}, "max_output_tokens", "invalid_value", id="cap-bool"
        ),
        pytest.param({"metadata": {"k": 1}}, "metadata", "invalid_value", id="metadata"),
        pytest.param({"store": "yes"}, "store", "invalid_value", id="store"),
        pytest.param({"input": None}, "input", "invalid_value", id="no-input"),
        pytest.param({"model": 3}, "model", "invalid_value", id="model"),
    ],
)
def test_responses_refuse_with_400_naming_the_field(
    body: dict[str, Any], param: str, code: str
) -> None:
    with pytest.raises(errors.GatewayError) as info:
        Wire(responses.Responses).request({"model": "m", "input": "hi", **body})
    assert info.value.status == 400
    assert info.value.param == param
    assert info.value.code == code


def test_responses_accept_values_that_ask_for_nothing() -> None:
    chat = Wire(responses.Responses).request(
        {
            "model": "m",
            "input": "hi",
            "background": False,
            "truncation": "disabled",
            "include": [],
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "auto",
            "top_logprobs": 0,
            "max_tool_calls": None,
            "user": "u1",
            "prompt_cache_key": "c",
            "text": {"format": {"type": "text"}},
        }
    )
    assert set(chat) == {"messages", "model"}


def test_responses_stream_has_the_sdks_events_in_order() -> None:
    wire = Wire(responses.Responses)
    wire.request({"model": "m", "input": "hi", "stream": True, "max_output_tokens": 3})
    events = wire.stream(TEXT_STREAM)
    parsed = [strict("response_event", e) for _, e in events]
    assert [name for name, _ in events] == [e.type for e in parsed]
    assert [e.type for e in parsed] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    final = parsed[-1].response
    assert final.output_text == 'Hello "you"!'
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage.model_dump() == {
        "input_tokens": 7,
        "input_tokens_details": {
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            "cache_write_tokens_details": None,
        },
        "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 11,
    }
    assert parsed[0].response.id == final.id
    assert final.max_output_tokens == 3


def test_responses_stream_tool_calls_as_function_call_items() -> None:
    wire = Wire(responses.Responses)
    wire.request(
        {"model": "m", "input": "hi", "stream": True, "tools": [{"type": "function", "name": "f"}]}
    )
    parsed = [strict("response_event", e) for _, e in wire.stream(TOOL_STREAM)]
    types = [e.type for e in parsed]
    assert types[-6:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = parsed[-1].response
    assert [i.type for i in final.output] == ["message", "function_call"]
    call = final.output[1]
    assert (call.call_id, call.name, call.arguments, call.status) == (
        "call_1",
        "f",
        '{"a": 1}',
        "completed",
    )
    assert parsed[types.index("response.output_item.added", 5)].output_index == 1


def test_responses_stream_cut_ends_failed() -> None:
    wire = Wire(responses.Responses)
    wire.request({"model": "m", "input": "hi", "stream": True})
    events = wire.stream([TEXT_STREAM[0], CUT])
    parsed = [strict("response_event", e) for _, e in events]
    assert parsed[-1].type == "response.failed"
    assert parsed[-1].response.status == "failed"
    assert "stopped in the middle" in parsed[-1].response.error.message
    assert parsed[-2].type == "response.output_item.done"  # what came is closed


def test_responses_whole_answer_and_errors() -> None:
    wire = Wire(responses.Responses)
    wire.request({"model": "m", "input": "hi"})
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    status, body, _ = wire.whole(200, chat_answer("hey", calls=calls, finish="tool_calls"))
    parsed = strict("response", body)
    assert status == 200
    assert parsed.status == "completed"
    assert parsed.output_text == "hey"
    assert [i.type for i in parsed.output] == ["message", "function_call"]
    assert parsed.usage.total_tokens == 11
    refused = Wire(responses.Responses)
    refused.request({"model": "m", "input": "hi"})
    err = {
        "message": "too long",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    status, body, _ = refused.whole(400, {"error": err})
    assert status == 400
    assert body == {"error": {**err, "param": "input"}}  # the client's field


def test_responses_keep_the_conversation_per_key_unless_store_false() -> None:
    context = base.Context(conversations=conv.Conversations(tag="00000000"), clock=lambda: 0.0)
    first = Wire(responses.Responses, context)
    first.request({"model": "m", "input": "one", "instructions": "sys"})
    first.whole(200, chat_answer("two"))
    second = Wire(responses.Responses, context)
    chat = second.request({"model": "m", "input": "three", "previous_response_id": first.t.id})
    assert chat["messages"] == [
        {"role": "user", "content": "one"},  # the instructions are not carried over, as OpenAI
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
    ]
    with pytest.raises(errors.GatewayError) as other:
        Wire(responses.Responses, context).request(
            {"model": "m", "input": "x", "previous_response_id": first.t.id},
            key=OTHER,
        )
    assert (other.value.status, other.value.code) == (400, "previous_response_not_found")
    unkept = Wire(responses.Responses, context)
    unkept.request({"model": "m", "input": "x", "store": False})
    unkept.whole(200, chat_answer("y"))
    assert len(context.conversations) == 1


# ---- Anthropic Messages ------------------------------------------------------------------------


def test_messages_become_chat_messages() -> None:
    wire = Wire(messages.Messages)
    chat = wire.request(
        {
            "model": "m",
            "max_tokens": 50,
            "system": [
                {"type": "text", "text": "be ", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "kind"},
            ],
            "messages": [
                {"role": "user", "content": "weather?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "checking"},
                        {"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Paris"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "sunny"}],
                        },
                        {"type": "text", "text": "and tomorrow?"},
                    ],
                },
            ],
            "tools": [{"name": "w", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "stop_sequences": ["END"],
            "top_k": 5,
            "metadata": {"user_id": "u"},
        }
    )
    assert chat["messages"] == [
        {"role": "system", "content": "be kind"},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "checking",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "w", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
        {"role": "user", "content": "and tomorrow?"},
    ]
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {"name": "w", "description": "d", "parameters": {"type": "object"}},
        }
    ]
    assert chat["tool_choice"] == "required"
    assert chat["parallel_tool_calls"] is False
    assert chat["stop"] == ["END"]
    assert chat["max_tokens"] == 50
    assert chat["top_k"] == 5
    assert "metadata" not in chat


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"max_tokens": None}, "max_tokens", id="max-tokens-required"),
        pytest.param({"max_tokens": 0}, "max_tokens", id="max-tokens-zero"),
        pytest.param({"messages": []}, "messages", id="no-messages"),
        pytest.param(
            {"messages": [{"role": "system", "content": "x"}]}, "messages[0].role", id="role"
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "messages[0].content[0].type",
            id="image",
        ),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "thinking", "thinking": "", "signature": ""}],
                    }
                ]
            },
            "messages[0].content[0].type",
            id="thinking-block",
        ),
        pytest.param(
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "tools[0].type",
            id="server-tool",
        ),
        pytest.param({"tools": [{"name": "f"}]}, "tools[0].input_schema", id="schema"),
        pytest.param(
            {"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking", id="thinking"
        ),
        pytest.param({"mcp_servers": [{}]}, "mcp_servers", id="mcp"),
        pytest.param({"stop_sequences": "END"}, "stop_sequences", id="stop"),
        pytest.param({"system": [{"type": "image"}]}, "system[0].type", id="system-image"),
    ],
)
def test_messages_refuse_with_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    full = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], **body}
    full = {k: v for k, v in full.items() if v is not None}
    with pytest.raises(errors.GatewayError) as info:
        Wire(messages.Messages).request(full)
    assert (info.value.status, info.value.param) == (400, param)


def test_messages_stream_has_the_sdks_events_in_order() -> None:
    wire = Wire(messages.Messages)
    wire.request(
        {
            "model": "m",
            "max_tokens": 5,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    events = wire.stream(TOOL_STREAM)
    assert events[1] == ("ping", {"type": "ping"})
    parsed = [strict("message_event", e) for name, e in events if name != "ping"]
    assert [name for name, _ in events if name != "ping"] == [e.type for e in parsed]
    assert [(e.type, getattr(e, "index", None)) for e in parsed] == [
        ("message_start", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert parsed[4].content_block.model_dump(exclude_none=True) == {
        "type": "tool_use",
        "id": "call_1",
        "name": "f",
        "input": {},
    }
    assert "".join(e.delta.partial_json for e in parsed[5:7]) == '{"a": 1}'
    delta = parsed[-2]
    assert delta.delta.stop_reason == "tool_use"
    assert (delta.usage.input_tokens, delta.usage.output_tokens) == (7, 4)


def test_messages_stop_sequence_is_named_when_the_backend_says_which() -> None:
    wire = Wire(messages.Messages)
    wire.request(
        {
            "model": "m",
            "max_tokens": 5,
            "stream": True,
            "stop_sequences": ["END", "x"],
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    events = wire.stream([chunk({"content": "a"}), chunk(finish="stop", stop_reason="END") + USAGE])
    delta = dict(events)["message_delta"]["delta"]
    assert delta == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    plain = Wire(messages.Messages)
    plain.request({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    _, body, _ = plain.whole(200, chat_answer("done"))
    assert (body["stop_reason"], body["stop_sequence"]) == ("end_turn", None)


def test_messages_whole_answer_and_errors_in_anthropics_shape() -> None:
    wire = Wire(messages.Messages)
    wire.request({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    status, body, _ = wire.whole(200, chat_answer("hey", calls=calls, finish="tool_calls"))
    parsed = strict("message", body)
    assert [b.type for b in parsed.content] == ["text", "tool_use"]
    assert parsed.content[1].input == {"a": 1}
    assert parsed.stop_reason == "tool_use"
    assert (parsed.usage.input_tokens, parsed.usage.output_tokens) == (7, 4)
    for status, kind in [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
    ]:
        w = Wire(messages.Messages)
        got_status, got, headers = w.whole(
            status, {"error": {"message": "no", "type": "x", "param": None, "code": "c"}}
        )
        assert got_status == status
        assert got == {"type": "error", "error": {"type": kind, "message": "no", "code": "c"}}
        assert (b"content-type", b"application/json") in headers


def test_messages_stream_cut_ends_with_an_error_event() -> None:
    wire = Wire(messages.Messages)
    wire.request(
        {
            "model": "m",
            "max_tokens": 5,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    events = wire.stream([TEXT_STREAM[0], CUT])
    assert events[-1][0] == "error"
    assert events[-1][1]["type"] == "error"
    assert events[-1][1]["error"]["type"] == "api_error"
    assert "message_stop" not in [name for name, _ in events]


def test_every_translated_path_is_served() -> None:
    assert set(dialects.PATHS) == {"/v1/responses", "/responses", "/v1/messages"}
