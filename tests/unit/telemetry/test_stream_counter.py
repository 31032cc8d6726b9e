"""Token counting of streamed answers (agent and gateway): usage event parsed, hidden unless the
client asked."""

from __future__ import annotations

import json

import pytest

from mlxfleet_common.wire import openai_proxy

CONTENT = b'data: {"id": "x", "choices": [{"delta": {"content": "hi"}}]}\n\n'
FINISH = b'data: {"id": "x", "choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n'
USAGE = (
    b'data: {"id": "x", "object": "chat.completion", "choices": [], '
    b'"usage": {"prompt_tokens": 17, "completion_tokens": 3, "total_tokens": 20}}\n\n'
)
DONE = b"data: [DONE]\n\n"
STREAM = CONTENT * 3 + FINISH + USAGE + DONE


def run(counter: openai_proxy.StreamScanner, stream: bytes, size: int) -> bytes:
    out = b"".join(counter.feed(stream[i : i + size]) for i in range(0, len(stream), size))
    return out + counter.flush()


@pytest.mark.parametrize("size", [1, 7, 64, len(STREAM)])
def test_usage_event_is_counted_and_hidden_from_a_client_that_did_not_ask(size: int) -> None:
    counter = openai_proxy.StreamScanner(forward_usage=False)
    assert run(counter, STREAM, size) == CONTENT * 3 + FINISH + DONE
    assert (counter.prompt_tokens, counter.completion_tokens) == (17, 3)


def test_usage_event_is_forwarded_when_the_client_asked() -> None:
    counter = openai_proxy.StreamScanner(forward_usage=True)
    assert run(counter, STREAM, 10) == STREAM


def test_without_usage_completion_tokens_are_counted_from_events() -> None:
    counter = openai_proxy.StreamScanner(forward_usage=False)
    assert run(counter, CONTENT * 4 + FINISH + DONE, 5) == CONTENT * 4 + FINISH + DONE
    assert (counter.prompt_tokens, counter.completion_tokens) == (0, 4)


@pytest.mark.parametrize(
    ("body", "asked"),
    [
        pytest.param({"stream": True}, False, id="no-options"),
        pytest.param({"stream_options": {"include_usage": False}}, False, id="declined"),
        pytest.param({"stream_options": {"include_usage": True}}, True, id="asked"),
    ],
)
def test_ask_for_usage_always_asks_the_backend(body: dict[str, object], asked: bool) -> None:
    assert openai_proxy.ask_for_usage(body) is asked
    assert json.loads(json.dumps(body))["stream_options"]["include_usage"] is True


def test_events_are_counted_exactly_when_content_says_data() -> None:
    """A token whose text is `data:` (or that contains a blank line, escaped in JSON) is one
    event, not two: events start only at the stream's start or after a newline."""
    tricky = b'data: {"id": "x", "choices": [{"delta": {"content": "data: \\n\\ndata:"}}]}\n\n'
    counter = openai_proxy.StreamScanner(forward_usage=False)
    stream = tricky * 3 + FINISH + DONE
    assert run(counter, stream, 9) == stream
    assert counter.data_events == 5  # 3 content + finish + [DONE]
    assert counter.completion_tokens == 3
