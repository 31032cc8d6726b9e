"""What clients receive from an mlx-lm slot has OpenAI's shape (issue 28 item 5), through a real
agent and a real mlx_lm backend, with the `openai` SDK:

- the usage event of a stream is a `chat.completion.chunk` (`text_completion` for completions),
  not mlx_lm's `chat.completion`;
- a `stop` string ends the generation at its first occurrence, as OpenAI's API does, with
  `finish_reason: "stop"` and the usage of what was generated; mlx_lm, given one, cuts it out
  of the text and generates on when its tokens do not spell it the way the tokenizer encodes it
  alone (checked below against the backend itself, so the test shows the quirk it covers).
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionStreamOptionsParam

from mlxfleet_common.wire import endpoints
from tests.integration.agent.conftest import Agent

pytestmark = pytest.mark.mlx
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Tell me a story"}]


def _pieces(
    client: openai.OpenAI,
    *,
    max_tokens: int,
    stop: list[str] | openai.Omit = openai.omit,
    stream_options: ChatCompletionStreamOptionsParam | openai.Omit = openai.omit,
) -> tuple[list[str], Any, Any, Any]:
    """(content of each event, the last finish_reason, the usage chunk, the last stop_reason:
    the stop string that ended it, vLLM's field)."""
    pieces, finish, usage, stop_reason = [], None, None, None
    for chunk in client.chat.completions.create(
        model="tiny-a",
        messages=ASK,
        stream=True,
        temperature=0,
        max_tokens=max_tokens,
        stop=stop,
        stream_options=stream_options,
    ):
        if chunk.usage is not None:
            usage = chunk
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
            stop_reason = getattr(choice, "stop_reason", None) or stop_reason
    return pieces, finish, usage, stop_reason


def test_the_usage_event_of_a_stream_is_a_chunk(serving_agent: Agent) -> None:
    client = serving_agent.openai()
    _, _, usage, _ = _pieces(client, max_tokens=8, stream_options={"include_usage": True})
    assert usage is not None
    assert usage.object == "chat.completion.chunk"
    assert usage.usage.completion_tokens == 8
    text = client.completions.create(
        model="tiny-a", prompt="Once", max_tokens=4, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    last = list(text)[-1]
    assert last.usage is not None
    assert last.object == "text_completion"


@pytest.mark.parametrize(
    "path",
    [p for p, c in endpoints.ENDPOINTS.items() if c in (endpoints.CHAT, endpoints.COMPLETIONS)],
)
def test_every_generating_path_of_the_contract_is_served(serving_agent: Agent, path: str) -> None:
    """Issue 27: the data plane's paths are the contract's table (it had no `/completions`)."""
    body: dict[str, Any] = {"model": "tiny-a", "max_tokens": 2}
    body |= {"messages": ASK} if "chat" in path else {"prompt": "Once"}
    answer = httpx.post(serving_agent.data_url + path, json=body, timeout=60)
    assert answer.status_code == 200, answer.text


def test_a_stop_string_stops_generation_as_openai_does(serving_agent: Agent) -> None:
    client = serving_agent.openai()
    pieces, finish, usage, _ = _pieces(
        client, max_tokens=40, stream_options={"include_usage": True}
    )
    assert finish == "length"
    assert usage is not None
    full = "".join(pieces)
    # a stop string across two generated tokens: mlx_lm's token-level stop never sees it
    k = next(i for i in range(3, len(pieces) - 3) if min(len(pieces[i]), len(pieces[i + 1])) > 1)
    stop = pieces[k][-1] + pieces[k + 1][0]
    expected = full[: full.find(stop)]

    backend = serving_agent.slot("a")["backendPort"]
    direct = httpx.post(
        f"http://127.0.0.1:{backend}/v1/chat/completions",
        json={"messages": ASK, "max_tokens": 40, "temperature": 0, "stop": stop},
        timeout=60,
    ).json()["choices"][0]
    assert direct["finish_reason"] == "length", "mlx_lm no longer blanks: the quirk is gone"
    assert stop not in direct["message"]["content"]  # cut out, generation went on

    s_pieces, s_finish, s_usage, s_stop = _pieces(
        client, max_tokens=40, stop=[stop, "never-generated"],
        stream_options={"include_usage": True},
    )  # fmt: skip
    assert "".join(s_pieces) == expected
    assert s_finish == "stop"
    assert s_stop == stop  # which one (vLLM's field)
    assert s_usage is not None
    assert s_usage.object == "chat.completion.chunk"
    assert s_usage.usage.prompt_tokens == usage.usage.prompt_tokens
    assert 0 < s_usage.usage.completion_tokens < 40

    whole = client.chat.completions.create(
        model="tiny-a", messages=ASK, temperature=0, max_tokens=40, stop=stop
    )
    assert whole.choices[0].message.content == (expected or None)
    assert whole.choices[0].finish_reason == "stop"
    assert getattr(whole.choices[0], "stop_reason", None) == stop
    assert whole.usage is not None
    assert whole.usage.prompt_tokens == usage.usage.prompt_tokens

    logprobs = client.chat.completions.create(
        model="tiny-a", messages=ASK, temperature=0, max_tokens=40, stop=stop, logprobs=True
    )  # generated whole by the backend: cut here
    assert logprobs.choices[0].message.content == (expected or None)
    assert logprobs.choices[0].finish_reason == "stop"

    # the agent still serves afterwards (the cut-off generation left nothing behind)
    again, again_finish, _, _ = _pieces(client, max_tokens=40)
    assert "".join(again) == full
    assert again_finish == "length"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        pytest.param(
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {}},
                }
            },
            "response_format",
            id="json-schema",
        ),
        pytest.param({"response_format": {"type": "json_object"}}, "response_format", id="json"),
        pytest.param(
            {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role", id="role"
        ),
    ],
)
def test_what_mlx_lm_would_ignore_is_refused_naming_the_parameter(
    serving_agent: Agent, extra: dict[str, Any], param: str
) -> None:
    """Issue 28 items 7 and 9: a `response_format` mlx_lm does not enforce, and a chat role
    that is not one, were answered 200 (unconstrained text; the role rendered as written)."""
    client = serving_agent.openai()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            **{"model": "tiny-a", "messages": ASK, "max_tokens": 4, **extra}
        )
    assert refused.value.body["param"] == param  # type: ignore[index]
    text = client.chat.completions.create(
        model="tiny-a", messages=ASK, max_tokens=4, response_format={"type": "text"}
    )
    assert text.choices[0].finish_reason == "length"
