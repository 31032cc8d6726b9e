"""The completion body's shape (`openai_body`): what would kill mlx_lm's generation thread, or
fail inside it, is refused with a 400 naming the field; what OpenAI clients send passes."""

from __future__ import annotations

from typing import Any

import pytest

from mlxfleet_agent.engines import mlxlm
from mlxfleet_common.wire import openai_body

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
TEXT = {"model": "m", "prompt": "hi"}


@pytest.mark.parametrize(
    ("endpoint", "body"),
    [
        pytest.param("chat.completions", CHAT, id="plain-chat"),
        pytest.param("chat/completions", CHAT, id="gateway-spelling"),
        pytest.param("completions", TEXT, id="plain-text"),
        pytest.param("chat.completions", {**CHAT, "stop": "\n"}, id="stop-string"),
        pytest.param("chat.completions", {**CHAT, "stop": ["a", "bc"]}, id="stop-list"),
        pytest.param("chat.completions", {**CHAT, "stop": None}, id="stop-null"),
        pytest.param(
            "chat.completions",
            {
                "model": "m",
                "messages": [
                    {"role": "system", "content": None},
                    {"role": "user", "content": [{"type": "text", "text": "a"}]},
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{}"}}],
                    },
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                ],
            },
            id="parts-tools-images",
        ),
        pytest.param(
            "chat.completions",
            {
                **CHAT,
                "temperature": 0,
                "top_p": 0.9,
                "max_tokens": None,
                "n": 1,
                "seed": 7,
                "logprobs": True,
                "top_logprobs": 3,
                "logit_bias": {"50256": -100, "11": 2.5},
                "stream_options": {"include_usage": True},
                "tools": [{"type": "function", "function": {"name": "f"}}],
            },
            id="openai-sdk-fields",
        ),
        pytest.param("embeddings", {"model": "m", "input": 5}, id="embeddings-not-looked-at"),
    ],
)
def test_good_bodies_pass(endpoint: str, body: dict[str, Any]) -> None:
    openai_body.check(body, endpoint=endpoint)


@pytest.mark.parametrize(
    ("endpoint", "body", "param"),
    [
        pytest.param("chat.completions", {**CHAT, "stop": 5}, "stop", id="stop-int"),
        pytest.param("chat.completions", {**CHAT, "stop": [1]}, "stop[0]", id="stop-list-of-int"),
        pytest.param("chat.completions", {**CHAT, "stop": [{}]}, "stop[0]", id="stop-unhashable"),
        pytest.param("chat.completions", {**CHAT, "stop": ""}, "stop", id="stop-empty"),
        pytest.param("completions", {**TEXT, "stop": ["x"] * 17}, "stop", id="stop-too-many"),
        pytest.param("completions", {**TEXT, "stop": "x" * 1001}, "stop", id="stop-too-long"),
        pytest.param("chat.completions", {"model": "m"}, "messages", id="messages-missing"),
        pytest.param("chat.completions", {**CHAT, "messages": []}, "messages", id="messages-empty"),
        pytest.param("chat.completions", {**CHAT, "messages": "hi"}, "messages", id="messages-str"),
        pytest.param(
            "chat.completions", {**CHAT, "messages": ["hi"]}, "messages[0]", id="message-not-object"
        ),
        pytest.param(
            "chat.completions",
            {**CHAT, "messages": [{"content": "hi"}]},
            "messages[0].role",
            id="role-missing",
        ),
        pytest.param(
            "chat.completions",
            {**CHAT, "messages": [{"role": "user", "content": 5}]},
            "messages[0].content",
            id="content-int",
        ),
        pytest.param(
            "chat.completions",
            {**CHAT, "messages": [{"role": "user", "content": ["hi"]}]},
            "messages[0].content[0]",
            id="part-not-object",
        ),
        pytest.param(
            "chat.completions",
            {**CHAT, "messages": [{"role": "user", "content": [{"text": "hi"}]}]},
            "messages[0].content[0]",
            id="part-without-type",
        ),
        pytest.param(
            "chat.completions",
            {**CHAT, "messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages[0].content[0].text",
            id="text-part-without-text",
        ),
        pytest.param(
            "chat.completions",
            {**CHAT, "messages": [{"role": "assistant", "tool_calls": "x"}]},
            "messages[0].tool_calls",
            id="tool-calls-not-list",
        ),
        pytest.param(  # the common shape's quick pass still sees the tool calls
            "chat/completions",
            {**CHAT, "messages": [{"role": "assistant", "content": "a", "tool_calls": [1]}]},
            "messages[0].tool_calls",
            id="tool-calls-beside-text",
        ),
        pytest.param(  # the gateway's spelling of the endpoint; the second message named
            "chat/completions",
            {**CHAT, "messages": [{"role": "user", "content": "a"}, {"role": "", "content": "b"}]},
            "messages[1].role",
            id="second-role-empty",
        ),
        pytest.param(
            "chat/completions",
            {**CHAT, "top_k": -1, "temperature": "x"},
            "temperature",
            id="first-bad-field-in-order",
        ),
        pytest.param("completions", {"model": "m"}, "prompt", id="prompt-missing"),
        pytest.param("completions", {**TEXT, "prompt": 5}, "prompt", id="prompt-int"),
        pytest.param("completions", {**TEXT, "prompt": [None]}, "prompt", id="prompt-list-null"),
        pytest.param("completions", {**TEXT, "temperature": "hot"}, "temperature", id="temp-str"),
        pytest.param("completions", {**TEXT, "temperature": None}, "temperature", id="temp-null"),
        pytest.param("completions", {**TEXT, "top_p": 2}, "top_p", id="top-p-range"),
        pytest.param("completions", {**TEXT, "top_k": 1.5}, "top_k", id="top-k-float"),
        pytest.param("completions", {**TEXT, "max_tokens": True}, "max_tokens", id="max-bool"),
        pytest.param("completions", {**TEXT, "max_tokens": 0}, "max_tokens", id="max-zero"),
        pytest.param("completions", {**TEXT, "n": "2"}, "n", id="n-str"),
        pytest.param("completions", {**TEXT, "seed": 1.5}, "seed", id="seed-float"),
        pytest.param("completions", {**TEXT, "logprobs": 1}, "logprobs", id="logprobs-int"),
        pytest.param("completions", {**TEXT, "top_logprobs": 99}, "top_logprobs", id="top-lp"),
        pytest.param("completions", {**TEXT, "logit_bias": []}, "logit_bias", id="bias-list"),
        pytest.param(
            "completions", {**TEXT, "logit_bias": {"a": 1}}, "logit_bias", id="bias-key-not-id"
        ),
        pytest.param(
            "completions", {**TEXT, "logit_bias": {"-3": 1}}, "logit_bias", id="bias-negative-id"
        ),
        pytest.param(
            "completions", {**TEXT, "logit_bias": {"3": None}}, "logit_bias.3", id="bias-null"
        ),
        pytest.param(
            "completions", {**TEXT, "logit_bias": {"3": 500}}, "logit_bias.3", id="bias-range"
        ),
        pytest.param(
            "chat.completions",
            {**CHAT, "chat_template_kwargs": "x"},
            "chat_template_kwargs",
            id="template-kwargs-str",
        ),
        pytest.param("chat.completions", {**CHAT, "tools": {}}, "tools", id="tools-object"),
        pytest.param(
            "chat.completions", {**CHAT, "stream_options": 1}, "stream_options", id="stream-opts"
        ),
    ],
)
def test_malformed_bodies_are_400_naming_the_field(
    endpoint: str, body: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai_body.BodyError) as caught:
        openai_body.check(body, endpoint=endpoint)
    assert caught.value.status == 400
    assert caught.value.param == param
    assert caught.value.type == "invalid_request_error"
    assert "must" in str(caught.value) or "required" in str(caught.value)


@pytest.mark.parametrize(
    ("endpoint", "body", "param"),
    [
        pytest.param("completions", {**TEXT, "prompt": ["a", "b"]}, "prompt", id="prompt-list"),
        pytest.param("completions", {**TEXT, "prompt": [1, 2]}, "prompt", id="prompt-token-ids"),
        pytest.param("chat.completions", {**CHAT, "n": 2}, "n", id="n-2"),
    ],
)
def test_mlx_lm_serves_one_string_prompt_and_one_choice(
    endpoint: str, body: dict[str, Any], param: str
) -> None:
    openai_body.check(body, endpoint=endpoint)  # the OpenAI shape: fine
    with pytest.raises(openai_body.BodyError) as caught:
        openai_body.check_mlx_lm(body, endpoint=endpoint)
    assert caught.value.param == param
    assert "mlx-lm" in str(caught.value)


def test_mlx_lm_takes_what_it_serves() -> None:
    openai_body.check_mlx_lm({**CHAT, "n": 1}, endpoint="chat.completions")
    openai_body.check_mlx_lm(TEXT, endpoint="completions")
    openai_body.check_mlx_lm({"input": [1]}, endpoint="embeddings")


def test_logit_bias_token_ids_stay_inside_the_vocabulary() -> None:
    """mlx_lm indexes the logits with these ids unchecked: one beyond the vocabulary kills it."""
    openai_body.check_token_ids({**TEXT, "logit_bias": {"0": 1, "99": -1}}, vocab_size=100)
    openai_body.check_token_ids(TEXT, vocab_size=100)
    with pytest.raises(openai_body.BodyError) as caught:
        openai_body.check_token_ids({**TEXT, "logit_bias": {"5": 1, "100": 1}}, vocab_size=100)
    assert caught.value.param == "logit_bias.100"
    assert "100" in str(caught.value)


@pytest.mark.parametrize(
    ("config", "size"),
    [
        pytest.param({"vocab_size": 256}, 256, id="top-level"),
        pytest.param({"text_config": {"vocab_size": 9}}, 9, id="vision-language"),
        pytest.param({"vocab_size": "x"}, None, id="unusable"),
        pytest.param({}, None, id="absent"),
    ],
)
def test_vocab_size_from_config(config: dict[str, object], size: int | None) -> None:
    assert mlxlm.vocab_size(config) == size


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param(
            {**CHAT, "messages": [{"role": "wizard", "content": "hi"}]},
            "messages[0].role",
            id="unknown-role",
        ),
        pytest.param(
            {**CHAT, "response_format": {"type": "yaml"}}, "response_format.type", id="rf"
        ),
        pytest.param(
            {**CHAT, "response_format": {"type": "json_schema"}},
            "response_format.json_schema",
            id="rf-schema-missing",
        ),
    ],
)
def test_issue_28_shapes_are_refused_for_every_engine(body: dict[str, Any], param: str) -> None:
    """An unknown chat role got 200 (issue 28 item 9); a malformed `response_format` too."""
    with pytest.raises(openai_body.BodyError) as refused:
        openai_body.check(body, endpoint="chat.completions")
    assert refused.value.param == param
    assert refused.value.status == 400


@pytest.mark.parametrize("kind", ["json_object", "json_schema"])
def test_mlx_lm_refuses_a_response_format_it_would_not_enforce(kind: str) -> None:
    """mlx_lm ignores `response_format`: accepted, the client got unconstrained text (issue 28
    item 7). Refused with 400 naming the parameter; `text` (no constraint) passes."""
    schema = {"name": "x", "schema": {"type": "object"}}
    body = {**CHAT, "response_format": {"type": kind, "json_schema": schema}}
    openai_body.check(body, endpoint="chat.completions")  # the OpenAI shape: fine
    with pytest.raises(openai_body.BodyError) as refused:
        openai_body.check_mlx_lm(body, endpoint="chat.completions")
    assert (refused.value.param, refused.value.code) == ("response_format", "unsupported_parameter")
    assert "mlx-lm" in str(refused.value)
    openai_body.check_mlx_lm(
        {**CHAT, "response_format": {"type": "text"}}, endpoint="chat.completions"
    )
