"""Streams pass through counted (usage event held back unless asked), and request traits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlxfleet_common.wire import openai_proxy as sse
from mlxfleet_gateway.core import errors, traits, usage


def event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


CONTENT = [event({"choices": [{"delta": {"content": f"t{i}"}}]}) for i in range(5)]
USAGE = event({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 5}})
DONE = b"data: [DONE]\n\n"
STREAM = b"".join([*CONTENT, USAGE, DONE])


@pytest.mark.parametrize("size", [1, 3, 7, 50, len(STREAM)])
@pytest.mark.parametrize("forward", [True, False])
def test_any_chunking_forwards_whole_events_and_counts(size: int, forward: bool) -> None:
    scan = sse.StreamScanner(forward_usage=forward)
    out = b"".join(scan.feed(STREAM[i : i + size]) for i in range(0, len(STREAM), size))
    out += scan.flush()
    expected = b"".join([*CONTENT, *([USAGE] if forward else []), DONE])
    assert out == expected
    assert (scan.prompt_tokens, scan.completion_tokens, scan.done) == (11, 5, True)


def test_chunks_of_whole_events_without_usage_pass_untouched() -> None:
    scan = sse.StreamScanner(forward_usage=False)
    for chunk in CONTENT:
        assert scan.feed(chunk) is chunk  # the same object: no copy, no split


def test_openai_style_usage_null_events_are_kept_and_counted_without_usage() -> None:
    scan = sse.StreamScanner(forward_usage=False)
    chunk = event({"choices": [{"delta": {"content": "a"}}], "usage": None})
    assert scan.feed(chunk) == chunk
    assert scan.feed(chunk + DONE) == chunk + DONE
    # no usage object: content events minus the last one (it carries the finish reason)
    assert scan.completion_tokens == 1
    assert sse.usage_of(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 4}}') == (3, 4)
    assert sse.usage_of(b"not json") is None


def _usage_parsed(raw: bytes) -> tuple[int, int] | None:
    """usage_of as a full parse reads it (the reference for the tail read)."""
    try:
        found = json.loads(raw).get("usage")
        return int(found.get("prompt_tokens") or 0), int(found.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return None


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id": "x", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}',
        b'{"id":"x","usage":{"prompt_tokens":3,"completion_tokens":4}}\n',
        b'{"usage" :  {"prompt_tokens": 5}  }  ',
        b'{"usage": {"prompt_tokens": 3, "completion_tokens": 4}, "id": "last"}',  # not last
        b'{"x": {"usage": {"prompt_tokens": 9, "completion_tokens": 9}}}',  # nested, not top
        b'{"usage": {"prompt_tokens": 1, "completion_tokens": 2}, '
        b'"x": {"usage": {"prompt_tokens": 9, "completion_tokens": 9}}}',
        b'[{"usage": {"prompt_tokens": 9, "completion_tokens": 9}}]',  # not an object
        b'{"say \\"usage": {"prompt_tokens": 9, "completion_tokens": 9}}',  # a key that ends so
        b'{"content": "\\"usage\\": {\\"prompt_tokens\\": 9}", '
        b'"usage": {"prompt_tokens": 2, "completion_tokens": 1}}',
        b'{"content": "a \\"usage\\": 7}"}',  # only inside a string: no usage
        b'{"usage": null}',
        b'{"usage": 7}',
        b'{"usage": {"prompt_tokens": "x"}}',
        b'{"usage": {"prompt_tokens": 3, "completion_tokens": 4}',  # cut short
        b'{"choices": [{"message": {"content": "\xc3\xa9t\xc3\xa9"}}], '
        b'"usage": {"prompt_tokens": 6, "completion_tokens": 1}}',
        b"\xff\xfe",
        b"",
    ],
)
def test_usage_of_reads_the_tail_as_a_full_parse_would(raw: bytes) -> None:
    """A whole answer's usage is read from its last member when that is the top-level
    `usage` (no parse of the answer before it); in every other shape the answer is parsed
    whole: the result is always that of a full parse."""
    assert sse.usage_of(raw) == _usage_parsed(raw)


def test_usage_of_a_usual_answer_is_read_from_its_tail_alone() -> None:
    usual = b'{"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}'
    assert sse._last_usage(usual) == {"prompt_tokens": 3, "completion_tokens": 4}
    assert sse._last_usage(b'{"x": {"usage": {"prompt_tokens": 9}}}') is None  # nested
    assert sse._last_usage(b'{"usage": {"prompt_tokens": 9}, "id": "x"}') is None  # not last


def body(**kw: Any) -> dict[str, Any]:
    return {"model": "chat", "messages": [{"role": "user", "content": "hello"}], **kw}


def test_traits_of_a_chat_request() -> None:
    t = traits.traits(
        body(
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=9,
            tools=[{"type": "function"}],
        ),
        {"x-mlxfleet-task": "code"},
    )
    assert (t.model, t.stream, t.include_usage, t.max_tokens, t.has_tools) == (
        "chat",
        True,
        True,
        9,
        True,
    )
    assert t.headers["x-mlxfleet-task"] == "code"
    assert t.prompt_chars == len("user:") + len("hello") + 1 + len('[{"type":"function"}]')
    assert t.affinity is None  # short prompts have no affinity key


def test_affinity_keys_follow_the_prompt_prefix() -> None:
    system = {"role": "system", "content": "You are a careful assistant. " * 60}
    one = traits.traits(body(messages=[system, {"role": "user", "content": "first"}]), {})
    two = traits.traits(body(messages=[system, {"role": "user", "content": "second"}]), {})
    other = traits.traits(
        body(
            messages=[
                {**system, "content": "Be brief. " * 200},
                {"role": "user", "content": "first"},
            ]
        ),
        {},
    )
    assert one.affinity is not None
    assert one.affinity == two.affinity
    assert other.affinity not in (None, one.affinity)
    parts = traits.traits({"model": "m", "prompt": ["x" * 700, "y" * 700]}, {})
    assert parts.prompt_chars == 1400
    assert parts.affinity is not None


@pytest.mark.parametrize(
    ("fields", "cap"),
    [
        pytest.param({}, None, id="none"),
        pytest.param({"max_tokens": 9}, 9, id="max_tokens"),
        pytest.param({"max_tokens": 9, "max_completion_tokens": 7}, 7, id="completion-wins"),
        pytest.param({"max_tokens": None}, None, id="null"),
        pytest.param(
            {"max_completion_tokens": None, "max_tokens": 5000}, 5000, id="null-is-not-given"
        ),
    ],
)
def test_the_token_cap_is_the_one_the_backend_honours(
    fields: dict[str, Any], cap: int | None
) -> None:
    """mlx_lm (and the agent) take `max_completion_tokens` unless null, else `max_tokens`."""
    assert traits.traits(body(**fields), {}).max_tokens == cap


TEXT = "x" * 400


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"tools": [{"type": "function", "description": TEXT}]}, id="tools"),
        pytest.param({"functions": [{"name": "f", "description": TEXT}]}, id="functions"),
        pytest.param(
            {
                "messages": [
                    {"role": "user", "content": "hello"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"function": {"name": "f", "arguments": TEXT}}],
                    },
                ]
            },
            id="tool-calls",
        ),
        pytest.param(
            {"messages": [{"role": "tool", "content": "hello", "tool_call_id": TEXT}]},
            id="other-message-fields",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": [{"type": "custom", "data": TEXT}]}]},
            id="parts-without-text",
        ),
        pytest.param({"messages": [{"role": "user", "content": {"text": TEXT}}]}, id="object"),
        pytest.param({"messages": [{"role": "user", "content": "hello"}, TEXT]}, id="not-object"),
        pytest.param({"messages": None, "prompt": [[7] * 100]}, id="token-ids"),
        pytest.param({"messages": None, "prompt": [7] * 100}, id="one-prompt-of-token-ids"),
        pytest.param({"messages": None, "documents": [{"text": TEXT}]}, id="rerank-documents"),
    ],
)
def test_the_prompt_estimate_counts_all_the_prompt_carries(fields: dict[str, Any]) -> None:
    """Text outside `content` strings reaches the model too: each piece of it counts (as JSON)."""
    t = traits.traits(body(**fields), {})
    assert t.prompt_tokens_estimate >= len(TEXT) // traits.CHARS_PER_TOKEN


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        pytest.param(b"{nope", None, id="json"),
        pytest.param(b"[1]", None, id="not-object"),
        pytest.param(b'{"messages": []}', "model", id="no-model"),
        pytest.param(b'{"model": "m", "stream": "yes"}', "stream", id="stream"),
        pytest.param(b'{"model": "m", "max_tokens": "9"}', "max_tokens", id="max-tokens"),
        pytest.param(
            b'{"model": "m", "max_tokens": -1000000000000}', "max_tokens", id="max-tokens-negative"
        ),
        pytest.param(b'{"model": "m", "max_tokens": 0}', "max_tokens", id="max-tokens-zero"),
        pytest.param(b'{"model": "m", "max_tokens": true}', "max_tokens", id="max-tokens-bool"),
        pytest.param(b'{"model": "m", "max_tokens": 9.5}', "max_tokens", id="max-tokens-float"),
        pytest.param(
            b'{"model": "m", "max_tokens": 9, "max_completion_tokens": -1}',
            "max_completion_tokens",
            id="max-completion-tokens-negative",
        ),
        pytest.param(
            b'{"model": "m", "max_completion_tokens": 9, "max_tokens": -1}',
            "max_tokens",
            id="max-tokens-negative-beside-a-good-max-completion-tokens",
        ),
    ],
)
def test_malformed_requests_are_400_naming_the_field(raw: bytes, param: str | None) -> None:
    with pytest.raises(errors.GatewayError) as info:
        traits.traits(traits.parse_body(raw), {})
    assert info.value.status == 400
    assert info.value.param == param


@pytest.mark.parametrize(
    ("endpoint", "body", "param"),
    [
        pytest.param("chat/completions", {"stop": 5}, "stop", id="stop-int"),
        pytest.param(
            "chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages[0].content[0].text",
            id="text-part-without-text",
        ),
        pytest.param("completions", {"prompt": {"a": 1}}, "prompt", id="prompt-object"),
    ],
)
def test_bodies_an_engine_would_choke_on_are_refused_early(
    endpoint: str, body: dict[str, Any], param: str
) -> None:
    """The agent's own check (`mlxfleet_common.wire.openai_body`), shared: the same 400."""
    good = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "prompt": "hi"}
    traits.traits({**good, "stop": ["x"]}, {}, endpoint=endpoint)
    with pytest.raises(errors.GatewayError) as info:
        traits.traits({**good, **body}, {}, endpoint=endpoint)
    assert (info.value.status, info.value.param) == (400, param)
    assert info.value.type == "invalid_request_error"


def test_usage_book_rolls_intervals_by_key_and_model() -> None:
    book = usage.UsageBook.open(node="gateway-x", interval_s=60, now=125.0)
    assert book.start == 120.0
    use = usage.Use("app", "al", "search", "team-a", "chat", "team-a/chat", False, 10, 5)
    book.record(use)
    book.record(use)
    book.record(
        usage.Use("app", "al", "search", "team-a", "chat", "team-a/chat", False, error="failed")
    )
    book.record(usage.Use("app", "al", "search", "team-a", "chat", "", False, rate_limited=True))
    same, closed = book.roll(170.0)
    assert closed is None
    assert same is book
    fresh, closed = book.roll(181.0)
    assert closed is not None
    assert fresh.start == 180.0
    assert not fresh.rows
    assert closed.component == "gateway"
    assert closed.slots == []
    rows = {r.backend: r for r in closed.keys}
    assert rows["team-a/chat"].requests == 3
    assert (rows["team-a/chat"].prompt_tokens, rows["team-a/chat"].completion_tokens) == (20, 10)
    assert rows["team-a/chat"].errors == {"failed": 1}
    assert rows[""].rate_limited == 1
    assert rows[""].requests == 0


def test_an_unknown_chat_role_is_refused_naming_it() -> None:
    """An unknown chat role got 200 (issue 28 item 9): the gateway refuses it as the agent does
    (one `openai_body`), before any backend sees it."""
    body = {"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "robot"}]}
    with pytest.raises(errors.GatewayError) as refused:
        traits.traits(body, {}, endpoint="chat/completions", min_affinity_chars=0)
    assert (refused.value.status, refused.value.param) == (400, "messages[1].role")
