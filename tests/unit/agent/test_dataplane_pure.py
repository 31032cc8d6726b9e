"""Pure pieces of the data plane: the max_tokens cap, the image URL policy, backend errors turned
OpenAI-shaped, the scrubbed system_fingerprint, whole answers assembled from a backend stream,
and per-slot admission (maxConcurrency + bounded queue)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest

from mlxfleet_agent import contract
from mlxfleet_agent.dataplane import answers, errors, relay, routing
from mlxfleet_agent.models import source
from mlxfleet_agent.slots import deps as deps_
from mlxfleet_agent.slots import handle as handle_
from mlxfleet_agent.slots import lease, slot, swap
from mlxfleet_agent.telemetry import recorder

FP = "0.32.2-0.32.4-Linux-6.8.0-1-x86_64-with-glibc2.36-cpu"


def _spec(**extra: Any) -> contract.SlotSpec:
    return contract.SlotSpec.model_validate({"source": "file:///m/a", "servedName": "a", **extra})


# ---- max_tokens -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "context", "body", "expected"),
    [
        pytest.param({"maxTokens": 16}, 8192, {}, {"max_tokens": 16}, id="absent-gets-cap"),
        pytest.param({"maxTokens": 16}, 8192, {"max_tokens": 200}, {"max_tokens": 16}, id="clamp"),
        pytest.param({"maxTokens": 16}, 8192, {"max_tokens": 5}, {"max_tokens": 5}, id="below"),
        pytest.param({"maxTokens": 16}, 8192, {"max_tokens": None}, {"max_tokens": 16}, id="null"),
        pytest.param(
            {"maxTokens": 16},
            8192,
            {"max_completion_tokens": 200},
            {"max_tokens": 16},
            id="completion-tokens-clamped",
        ),
        pytest.param(
            {"maxTokens": 16},
            8192,
            {"max_completion_tokens": 5, "max_tokens": 100},
            {"max_tokens": 5},
            id="completion-tokens-win-as-in-mlx",
        ),
        pytest.param({}, 1024, {"max_tokens": 10**9}, {"max_tokens": 1024}, id="context-is-cap"),
        pytest.param({}, 8192, {}, {"max_tokens": 512}, id="absent-mlx-default"),
        pytest.param({}, 256, {}, {"max_tokens": 256}, id="absent-small-context"),
        pytest.param(
            {"maxTokens": 16}, 8192, {"max_tokens": "x"}, {"max_tokens": "x"}, id="wrong-type-kept"
        ),
        pytest.param(
            {"maxTokens": 16}, 8192, {"max_tokens": True}, {"max_tokens": True}, id="bool-kept"
        ),
    ],
)
def test_max_tokens_cap(
    server: dict[str, Any], context: int, body: dict[str, Any], expected: dict[str, Any]
) -> None:
    routing.limit_tokens(body, _spec(server=server, contextLength=context))
    assert body == expected


# ---- images --------------------------------------------------------------------------------


def _chat(*parts: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, *parts]}]}


@pytest.mark.parametrize(
    ("part", "param"),
    [
        pytest.param(
            {"type": "image_url", "image_url": {"url": "http://10.0.0.1/x"}},
            "messages[0].content[1].image_url.url",
            id="image-url-object",
        ),
        pytest.param(
            {"type": "image_url", "image_url": "https://x/y"},
            "messages[0].content[1].image_url",
            id="image-url-string",
        ),
        pytest.param(
            {"type": "input_image", "image_url": "http://x/y"},
            "messages[0].content[1].image_url",
            id="input-image",
        ),
        pytest.param(
            {"type": "image", "image": "http://x/y"}, "messages[0].content[1].image", id="image"
        ),
        pytest.param(
            {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}},
            "messages[0].content[1].image_url.url",
            id="file-url",
        ),
        pytest.param(
            {"type": "image_url", "image_url": {"url": 42}},
            "messages[0].content[1].image_url.url",
            id="not-a-string",
        ),
    ],
)
def test_remote_images_are_refused_by_default(part: dict[str, Any], param: str) -> None:
    with pytest.raises(errors.RouteError) as caught:
        routing.check_images(_chat(part), allowed=[])
    assert caught.value.status == 400
    assert caught.value.param == param
    assert caught.value.code == "image_url_not_allowed"


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        pytest.param("https://img.example.com/pub/cat.png", True, id="under-prefix"),
        pytest.param("https://img.example.com/pub", False, id="prefix-without-slash"),
        pytest.param("https://img.example.com/private/x", False, id="other-path"),
        pytest.param("https://img.example.com.evil.org/pub/x", False, id="host-suffix"),
        pytest.param("https://img.example.com/pub/../private/x", False, id="dot-dot"),
        pytest.param("https://img.example.com/pub/%2e%2e/private", False, id="encoded-dot-dot"),
        pytest.param("https://img.example.com/pub/a\nb", False, id="control-character"),
        pytest.param("http://img.example.com/pub/x", False, id="other-scheme"),
    ],
)
def test_allowed_image_prefixes(url: str, ok: bool) -> None:
    body = _chat({"type": "image_url", "image_url": {"url": url}})
    allowed = ["https://img.example.com/pub/"]
    if ok:
        routing.check_images(body, allowed=allowed)
    else:
        with pytest.raises(errors.RouteError):
            routing.check_images(body, allowed=allowed)


def test_data_urls_and_text_pass() -> None:
    routing.check_images(
        _chat({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}), allowed=[]
    )
    routing.check_images({"messages": [{"role": "user", "content": "hi"}]}, allowed=[])
    routing.check_images({"messages": "not a list"}, allowed=[])
    routing.check_images({"prompt": "x"}, allowed=[])


@pytest.mark.parametrize(
    "prefix",
    [
        "ftp://x/",
        "https://x.org",
        "https://u@x.org/",
        "https://x.org/a?b",
        "relative/",
        "https:///a/",
    ],
)
def test_allowed_image_url_prefixes_are_validated(prefix: str) -> None:
    with pytest.raises(ValueError, match="allowedImageUrls"):
        contract.ServerOptions.model_validate({"allowedImageUrls": [prefix]})


def test_image_allow_list_does_not_restart_the_backend() -> None:
    before = _spec()
    after = _spec(server={"allowedImageUrls": ["https://img.example.com/pub/"]})
    assert swap.same_runtime(before, after)


# ---- backend errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "raw", "message", "type_"),
    [
        pytest.param(
            400,
            b'{"error": "temperature must be at least 0"}',
            "temperature must be at least 0",
            "invalid_request_error",
            id="mlx-400",
        ),
        pytest.param(404, b"Not Found", "Not Found", "invalid_request_error", id="plain-text"),
        pytest.param(
            500, b'{"error": "boom /m/a"}', "boom a", "server_error", id="5xx-and-path-hidden"
        ),
        pytest.param(
            400,
            b'{"error": {"message": "m", "type": "t", "code": "c"}}',
            "m",
            "t",
            id="already-openai",
        ),
        pytest.param(503, b"", "backend answered 503", "server_error", id="empty"),
    ],
)
def test_backend_errors_become_openai_shaped(
    status: int, raw: bytes, message: str, type_: str
) -> None:
    body = json.loads(answers.backend_error(status, raw, pinned="/m/a", served="a").body())
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"] == message
    assert body["error"]["type"] == type_


def test_backend_error_messages_are_bounded() -> None:
    body = json.loads(answers.backend_error(400, b"x" * 100_000, pinned="/m", served="a").body())
    assert len(body["error"]["message"]) <= 2000


@pytest.mark.parametrize(
    ("raw", "status", "type_", "code", "message"),
    [
        pytest.param(
            b'{"error": "Cannot apply chat template to an empty conversation"}',
            400,
            "invalid_request_error",
            "invalid_request",
            "Cannot apply chat template to an empty conversation",
            id="bad-body-is-400-with-mlx-text",
        ),
        pytest.param(
            b'{"error": "\'text\'"}',
            400,
            "invalid_request_error",
            "invalid_request",
            "'text'",
            id="key-error-text",
        ),
        pytest.param(
            b'{"error": "generation thread died"}',
            503,
            "server_error",
            "backend_unhealthy",
            "restarted",
            id="dead-generation-thread-is-503",
        ),
    ],
)
def test_mlx_lm_404s_are_the_clients_400_or_a_retryable_503(
    raw: bytes, status: int, type_: str, code: str, message: str
) -> None:
    err = answers.backend_error(404, raw, pinned="/m/a", served="a", mlx_lm=True)
    assert (err.status, err.type, err.code) == (status, type_, code)
    assert message in str(err)
    assert (b"retry-after", b"1") in err.headers if status == 503 else not err.headers


def test_other_engines_keep_their_404() -> None:
    assert answers.backend_error(404, b"Not Found", pinned="/m", served="a").status == 404


# ---- system_fingerprint -------------------------------------------------------------------


def test_fingerprint_is_opaque_and_stable() -> None:
    one = answers.fingerprint(FP)
    assert one == answers.fingerprint(FP)
    assert one != answers.fingerprint(FP + "x")
    assert "Linux" not in one
    assert "glibc" not in one
    old, new = answers.fingerprint_swap(FP)
    assert old == b'"system_fingerprint": "' + FP.encode() + b'"'
    assert new == b'"system_fingerprint": "' + one.encode() + b'"'


def test_unknown_fingerprint_is_scrubbed_by_pattern() -> None:
    chunk = b'data: {"id": "x", "system_fingerprint": "a-Linux-1", "object": "t"}\n\n'
    assert b"Linux" not in answers.scrub_fingerprint(chunk)


# ---- whole answers from a stream ---------------------------------------------------------


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(delta: dict[str, Any] | None, finish: str | None, *, obj: str) -> bytes:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if obj == "chat.completion.chunk":
        choice["delta"] = {"role": "assistant", **(delta or {})}
    else:
        choice["text"] = (delta or {}).get("content", "")
    return _event(
        {
            "id": "chatcmpl-1",
            "system_fingerprint": FP,
            "object": obj,
            "model": "/m/a",
            "created": 7,
            "choices": [choice],
        }
    )


USAGE = {
    "prompt_tokens": 3,
    "completion_tokens": 4,
    "total_tokens": 7,
    "prompt_tokens_details": {"cached_tokens": 0},
}


def _usage() -> bytes:
    return _event(
        {
            "id": "chatcmpl-1",
            "system_fingerprint": FP,
            "object": "chat.completion",
            "model": "/m/a",
            "created": 7,
            "choices": [],
            "usage": USAGE,
        }
    )


def test_assembled_chat_answer() -> None:
    obj = "chat.completion.chunk"
    stream = (
        b": keepalive 1/3\n\n"
        + _chunk({"content": "Hel"}, None, obj=obj)
        + _chunk({"content": "lo", "reasoning": "hm"}, None, obj=obj)
        + _chunk(
            {
                "tool_calls": [
                    {
                        "function": {"name": "f", "arguments": "{}"},
                        "type": "function",
                        "id": "t1",
                        "index": 0,
                    }
                ]
            },
            None,
            obj=obj,
        )
        + _chunk({}, "tool_calls", obj=obj)
        + _usage()
        + b"data: [DONE]\n\n"
    )
    builder = answers.Assembler(chat=True)
    for i in range(0, len(stream), 7):  # any split of the bytes
        builder.feed(stream[i : i + 7])
    assert builder.done
    answer = json.loads(builder.result(served="a", fingerprint="fp_x"))
    assert list(answer) == [
        "id",
        "system_fingerprint",
        "object",
        "model",
        "created",
        "choices",
        "usage",
    ]
    assert answer["object"] == "chat.completion"
    assert answer["model"] == "a"
    assert answer["system_fingerprint"] == "fp_x"
    assert answer["usage"] == USAGE
    [choice] = answer["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": "Hello",
        "reasoning": "hm",
        "tool_calls": [
            {"function": {"name": "f", "arguments": "{}"}, "type": "function", "id": "t1"}
        ],
    }
    assert (builder.prompt_tokens, builder.completion_tokens) == (3, 4)


def test_assembled_text_answer_and_empty_content() -> None:
    obj = "text_completion"
    builder = answers.Assembler(chat=False)
    builder.feed(
        _chunk({"content": "a"}, None, obj=obj)
        + _chunk({"content": "b"}, "length", obj=obj)
        + _usage()
        + b"data: [DONE]\n\n"
    )
    answer = json.loads(builder.result(served="a", fingerprint="fp"))
    assert answer["object"] == "text_completion"
    assert answer["choices"] == [{"index": 0, "finish_reason": "length", "text": "ab"}]
    empty = answers.Assembler(chat=True)
    empty.feed(_chunk({}, "stop", obj="chat.completion.chunk") + _usage() + b"data: [DONE]\n\n")
    message = json.loads(empty.result(served="a", fingerprint="fp"))["choices"][0]["message"]
    assert message == {"role": "assistant", "content": None}


def test_a_stream_without_done_is_not_done() -> None:
    builder = answers.Assembler(chat=True)
    builder.feed(_chunk({"content": "a"}, None, obj="chat.completion.chunk"))
    assert not builder.done


def test_garbage_events_do_not_crash_the_assembler() -> None:
    builder = answers.Assembler(chat=True)
    builder.feed(b"data: {nope\n\ndata: [1]\n\ndata: {}\n\ndata: [DONE]\n\n")
    assert builder.done
    json.loads(builder.result(served="a", fingerprint="fp"))


# ---- whole answers asked for whole ---------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "mlx_lm", "size", "whole"),
    [
        pytest.param({"max_tokens": 1}, True, 200, True, id="one-token-small"),
        pytest.param({"max_tokens": 0}, True, 200, True, id="no-token-small"),
        pytest.param({"max_tokens": 2}, True, 200, False, id="two-tokens-streamed"),
        pytest.param({"max_tokens": 1}, True, 64 * 1024, False, id="long-prompt-streamed"),
        pytest.param({"max_tokens": 1}, True, None, False, id="size-unknown-streamed"),
        pytest.param({"max_tokens": 1}, False, 64 * 1024, True, id="other-engine-any-prompt"),
        pytest.param({"max_tokens": 5}, False, 200, False, id="other-engine-five-streamed"),
        pytest.param({"max_tokens": True}, True, 200, False, id="bool-is-not-a-cap"),
        pytest.param({"max_tokens": "1"}, True, 200, False, id="string-is-not-a-cap"),
        pytest.param({}, True, 200, False, id="no-cap"),
    ],
)
def test_a_one_token_answer_is_asked_for_whole(
    body: dict[str, Any], mlx_lm: bool, size: int | None, whole: bool
) -> None:
    """Issue 27 (CPU per request): a whole answer that ends at its first token has nothing to
    stop, so it is asked for whole (one backend read, no assembly) unless mlx_lm would then be
    kept on its prompt (a long body) for a client that left."""
    assert relay.nothing_to_stop(body, mlx_lm=mlx_lm, size=size) is whole


# ---- admission of a Ready slot --------------------------------------------------------------


def test_a_ready_slot_admits_max_concurrency_then_queues_then_refuses() -> None:
    async def scenario() -> None:
        spec = _spec(maxConcurrency=2)
        src = source.of(spec)
        deps = deps_.Deps(
            catalog=cast(Any, None),
            launcher=cast(Any, None),
            telemetry=recorder.Telemetry(),
            owner=cast(Any, None),
            restart_backoff_max_s=1.0,
        )
        one = slot.Slot("s", spec, src, deps=deps, queue_limit=1)
        handle = handle_.Handle(
            backend=cast(Any, None), spec=spec, source=src, model_dir=Path("/m/a"), estimate=1
        )
        one.switch(handle)  # ready: the gate opens on this backend
        first = await one.lease(timeout_s=1)
        await one.lease(timeout_s=1)
        waiter = asyncio.get_running_loop().create_task(one.lease(timeout_s=5))
        await asyncio.sleep(0.01)
        assert one.queued == 1
        assert handle.in_flight == 2
        with pytest.raises(lease.QueueFull):
            await one.lease(timeout_s=1)
        first.release(ok=True)
        third = await asyncio.wait_for(waiter, timeout=1)
        assert third.upstream is handle
        assert handle.in_flight == 2
        assert one.queued == 0
        with pytest.raises(lease.QueueTimeout):
            await one.lease(timeout_s=0.05)
        assert one.queued == 0
        assert handle.in_flight == 2

    asyncio.run(scenario())
