"""The Responses API (`/v1/responses`) and Anthropic Messages (`/v1/messages`) through the real
gateway: control plane, operator, an agent with mlx-lm, the gateway as its own ServiceAccount,
the `openai` and `anthropic` SDKs (issue 28 items 11 and 12).

`chat` is a deployment (a tiny model: gibberish, so shapes, usage and event order are asserted,
never text). The tiny models never call a tool, so `tooly` routes to an external backend that
does (tests/support/toolprovider.py: an OpenAI-compatible provider on loopback); `fallback`
tries a backend nobody listens to, then falls back to `chat`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anthropic
import httpx
import openai
import pytest
from anthropic.types import ContentBlockParam, MessageParam, TextBlockParam, ToolParam
from openai.types.responses import FunctionToolParam, ResponseInputParam

from mlxfleet_operator.dev import controlplane
from tests.e2e import gwfleet
from tests.support import gateway as gws
from tests.support import toolprovider

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]
# without `strict`, which the SDK's type requires and the API (and the gateway) leave optional
WEATHER = cast(
    FunctionToolParam,
    {
        "type": "function",
        "name": "weather",
        "description": "The forecast of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
)
ANTHROPIC_WEATHER: ToolParam = {
    "name": "weather",
    "description": "The forecast of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
GREEDY = {"temperature": 0}  # the anthropic SDK (2.x) no longer offers it; the API still takes it
RESPONSE_ORDER = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


@dataclass
class Setup:
    fleet: gwfleet.Fleet
    gateway: gws.Gateway
    keys: dict[str, str]
    provider: toolprovider.ToolProvider
    clients: list[Any] = field(default_factory=list)  # closed at the end

    def openai(self, key: str = "a") -> openai.OpenAI:
        client = self.gateway.openai(api_key=self.keys[key])
        self.clients.append(client)
        return client

    def anthropic(self, key: str = "a", **kwargs: Any) -> anthropic.Anthropic:
        if "auth_token" not in kwargs:
            kwargs.setdefault("api_key", self.keys[key])
        client = anthropic.Anthropic(
            base_url=self.gateway.url, max_retries=0, timeout=120, **kwargs
        )
        self.clients.append(client)
        return client

    def key_name(self, key: str) -> str:
        return f"{self.fleet.ws.label}-{key}"


@pytest.fixture(scope="module")
def setup(
    cluster: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory, model_a: Path
) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("gateway-dialects")
    provider = toolprovider.ToolProvider()
    try:
        with gwfleet.fleet(cluster, root, model_a.parent, agents=("n1",)) as fl:
            fl.deploy("chat", model_a, replicas=1)
            scripted = {"name": "scripted", "external": {"url": provider.url, "model": "scripted"}}
            fl.route("tooly", {"rules": [{"name": "all", "backends": [scripted]}]})
            dead = {"name": "dead", "external": {"url": "http://127.0.0.1:9/v1", "model": "x"}}
            fl.route(
                "fallback",
                {
                    "rules": [{"name": "all", "backends": [dead]}],
                    "fallback": {
                        "when": ["Unavailable", "Failed"],
                        "backends": [{"deployment": "chat"}],
                    },
                },
            )
            fl.wait_ready("chat")
            label = fl.ws.label
            fields_of: dict[str, dict[str, Any]] = {
                "a": {},
                "b": {},
                "usage": {},
                "rpm": {"requestsPerMinute": 2},
                "narrow": {"models": "tooly"},
            }
            keys = {name: fl.key(f"{label}-{name}", **fields) for name, fields in fields_of.items()}
            fl.gateway = gws.start_gateway(cluster.gateway_kubeconfig, root / "gateway")
            gw = fl.gateway

            def ready() -> bool:
                names: list[set[str]] = []
                for name, key in keys.items():
                    with gw.openai(api_key=key) as client:
                        try:
                            names.append({m.id for m in client.models.list()})
                        except openai.AuthenticationError:
                            return False
                    if name != "narrow" and not {"chat", "tooly", "fallback"} <= names[-1]:
                        return False
                return True

            gw.wait_for("the gateway knows every key and name", ready)
            done = Setup(fl, gw, keys, provider)
            try:
                yield done
            finally:
                for client in done.clients:
                    client.close()
    finally:
        provider.close()


def events_of(stream: Any) -> list[Any]:
    with stream as events:
        return list(events)


def sse_names(response: httpx.Response) -> list[str]:
    return [
        line.removeprefix("event: ")
        for line in response.text.splitlines()
        if line.startswith("event: ")
    ]


# ---- the Responses API ------------------------------------------------------------------------


def test_responses_answer_text_with_instructions_and_usage(setup: Setup) -> None:
    client = setup.openai()
    raw = client.responses.with_raw_response.create(
        model="chat", input="hello there", max_output_tokens=6
    )
    plain = raw.parse()
    assert raw.headers["x-mlxfleet-backend"].startswith(f"{setup.fleet.ws.namespace}/chat@")
    assert plain.object == "response"
    assert plain.id.startswith("resp_")
    assert plain.status == "incomplete"  # the test model never ends on its own: the cap ends it
    assert plain.incomplete_details is not None
    assert plain.incomplete_details.reason == "max_output_tokens"
    assert plain.model == "chat"
    [message] = plain.output
    assert message.type == "message"
    assert message.role == "assistant"
    assert [c.type for c in message.content] == ["output_text"]
    part = message.content[0]
    assert part.type == "output_text"  # as just asserted: it narrows the type
    assert plain.output_text == part.text
    usage = plain.usage
    assert usage is not None
    assert usage.input_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.output_tokens == 6
    told = client.responses.create(
        model="chat",
        instructions="You answer in French, briefly.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "hello there"}]}],
        max_output_tokens=4,
        temperature=0.5,
        top_p=0.9,
    )
    assert told.instructions == "You answer in French, briefly."
    assert told.temperature == 0.5
    assert told.max_output_tokens == 4
    assert told.usage is not None
    assert told.usage.input_tokens > usage.input_tokens  # the instructions reached the model
    assert told.usage.output_tokens == 4
    finished = client.responses.create(model="tooly", input="hello there")  # a model that ends
    assert finished.status == "completed"
    assert finished.incomplete_details is None
    assert finished.output_text == "ok"


def test_responses_stream_events_in_order_with_sequence_numbers(setup: Setup) -> None:
    client = setup.openai()
    events = events_of(
        client.responses.create(
            model="chat", input="Tell me a story", max_output_tokens=12, stream=True
        )
    )
    types = [e.type for e in events]
    deltas = types.count("response.output_text.delta")
    assert deltas >= 1
    expected = RESPONSE_ORDER[:4] + ["response.output_text.delta"] * deltas + RESPONSE_ORDER[5:]
    assert types == [*expected, "response.incomplete"], types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    created, final = events[0].response, events[-1].response
    assert created.status == "in_progress"
    assert created.id == final.id
    assert final.status == "incomplete"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == text == final.output_text
    item_ids = {e.item_id for e in events if hasattr(e, "item_id")}
    assert item_ids == {final.output[0].id}
    assert final.usage is not None
    assert final.usage.output_tokens == 12
    assert final.usage.total_tokens == final.usage.input_tokens + 12
    # the SDK's own stream helper assembles the same response
    with client.responses.stream(model="chat", input="Tell me a story", max_output_tokens=6) as s:
        for _ in s:
            pass
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            s.get_final_response()  # incomplete (the cap), which the helper reports so
    ended = events_of(client.responses.create(model="tooly", input="Hi", stream=True))
    assert [e.type for e in ended] == [*RESPONSE_ORDER, "response.completed"]
    assert ended[-1].response.status == "completed"
    assert ended[-1].response.output_text == "ok"


def test_responses_previous_response_id_continues_the_conversation_of_its_key(
    setup: Setup,
) -> None:
    client = setup.openai()
    first = client.responses.create(model="chat", input="My name is Ada.", max_output_tokens=8)
    assert first.usage is not None
    second = client.responses.create(
        model="chat", previous_response_id=first.id, input="What is my name?", max_output_tokens=8
    )
    assert second.previous_response_id == first.id
    alone = client.responses.create(model="chat", input="What is my name?", max_output_tokens=8)
    assert second.usage is not None
    assert alone.usage is not None
    # the first turn (its input and its answer) came before the new input
    assert second.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens
    streamed = events_of(
        client.responses.create(
            model="chat",
            previous_response_id=second.id,
            input="And again?",
            max_output_tokens=8,
            stream=True,
        )
    )
    third = streamed[-1].response
    assert third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens
    fourth = client.responses.create(
        model="chat", previous_response_id=third.id, input="Last one", max_output_tokens=2
    )  # a streamed turn was kept too
    assert fourth.usage is not None
    assert fourth.usage.input_tokens > third.usage.input_tokens

    # another key (another tenant) cannot read it: the same answer as an unknown id
    with pytest.raises(openai.BadRequestError) as other:
        setup.openai("b").responses.create(
            model="chat", previous_response_id=first.id, input="hi", max_output_tokens=2
        )
    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.create(
            model="chat", previous_response_id=first.id[:-4] + "0000", input="hi"
        )
    for info in (other, unknown):
        err = info.value.response.json()["error"]
        assert err["code"] == "previous_response_not_found"
        assert err["param"] == "previous_response_id"
        assert "no longer kept" in err["message"]
    with pytest.raises(openai.BadRequestError) as elsewhere:  # an id another replica issued
        client.responses.create(
            model="chat", previous_response_id="resp_ffffffff" + "0" * 24, input="hi"
        )
    assert (
        "not answered by this gateway replica"
        in elsewhere.value.response.json()["error"]["message"]
    )
    unkept = client.responses.create(model="chat", input="hi", store=False, max_output_tokens=2)
    assert unkept.store is False  # type: ignore[attr-defined]  # an extra: not in the SDK's model
    with pytest.raises(openai.BadRequestError, match="not found"):
        client.responses.create(model="chat", previous_response_id=unkept.id, input="hi")


def test_responses_function_tools_and_call_outputs_reach_the_model(setup: Setup) -> None:
    client = setup.openai()
    turn: ResponseInputParam = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 24 C"},
    ]
    answered = client.responses.create(
        model="chat",
        input=turn,
        tools=[WEATHER],
        max_output_tokens=6,
    )
    plain = client.responses.create(model="chat", input=turn[:1], max_output_tokens=6)
    assert answered.usage is not None
    assert plain.usage is not None
    assert answered.usage.input_tokens > plain.usage.input_tokens  # the call and its output
    assert answered.tools[0].name == "weather"  # type: ignore[union-attr]
    # what a backend receives: the chat shapes of the same turn
    setup.provider.bodies.clear()
    client.responses.create(
        model="tooly",
        input=turn,
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=9,
    )
    [sent] = setup.provider.bodies
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {k: v for k, v in WEATHER.items() if k != "type"},
        }
    ]
    assert sent["tool_choice"] == "required"
    assert sent["max_tokens"] == 9
    assert sent["model"] == "scripted"
    assert sent["messages"] == [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 C"},
    ]


def test_responses_tool_calls_come_back_as_function_call_items(setup: Setup) -> None:
    client = setup.openai()
    whole = client.responses.create(model="tooly", input="Weather in Paris?", tools=[WEATHER])
    assert [item.type for item in whole.output] == ["message", "function_call"]
    call = whole.output[1]
    assert call.type == "function_call"
    assert (call.name, call.call_id, call.arguments) == (
        "weather",
        "call_scripted1",
        toolprovider.ARGUMENTS,
    )
    assert whole.output_text == toolprovider.TEXT
    assert whole.usage is not None
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (
        toolprovider.PROMPT_TOKENS,
        toolprovider.COMPLETION_TOKENS,
    )
    events = events_of(
        client.responses.create(model="tooly", input="Weather?", tools=[WEATHER], stream=True)
    )
    types = [e.type for e in events]
    assert types == [
        *RESPONSE_ORDER[:5],
        *RESPONSE_ORDER[5:],
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ], types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = events[types.index("response.output_item.added", 3)]
    assert added.output_index == 1
    assert added.item.type == "function_call"
    assert added.item.name == "weather"
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == toolprovider.ARGUMENTS
    final = events[-1].response
    assert [i.type for i in final.output] == ["message", "function_call"]
    assert final.output[1].arguments == toolprovider.ARGUMENTS
    # the SDK's helper accumulates the arguments from the deltas
    with client.responses.stream(model="tooly", input="Weather?", tools=[WEATHER]) as s:
        for _ in s:
            pass
        helper = s.get_final_response()
    assert helper.output[1].arguments == toolprovider.ARGUMENTS  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        pytest.param({"tools": [{"type": "web_search"}]}, "tools[0].type", id="web-search"),
        pytest.param({"background": True}, "background", id="background"),
        pytest.param({"reasoning": {"effort": "high"}}, "reasoning", id="reasoning"),
        pytest.param({"include": ["reasoning.encrypted_content"]}, "include", id="include"),
        pytest.param({"truncation": "auto"}, "truncation", id="truncation"),
        pytest.param({"conversation": "conv_1"}, "conversation", id="conversation"),
        pytest.param(
            {"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]},
            "input[0].type",
            id="reasoning-item",
        ),
        pytest.param(
            {
                "input": [
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": "https://x/y.png"}],
                    }
                ]
            },
            "input[0].content[0].type",
            id="image",
        ),
        pytest.param({"max_output_tokens": 0}, "max_output_tokens", id="cap"),
    ],
)
def test_responses_refuse_what_the_gateway_does_not_serve(
    setup: Setup, extra: dict[str, Any], param: str
) -> None:
    body = {"model": "chat", "input": "hi", **extra}
    with pytest.raises(openai.BadRequestError) as info:
        setup.openai().responses.create(**body)
    err = info.value.response.json()["error"]
    assert err["param"] == param
    assert err["code"] in ("unsupported_parameter", "invalid_value")
    assert param.split("[")[0].split(".")[0] in err["message"]
    # neutral values ask for nothing and are accepted
    ok = setup.openai().responses.create(
        model="chat",
        input="hi",
        max_output_tokens=2,
        background=False,
        truncation="disabled",
        include=[],
        reasoning={"effort": None},
        metadata={"team": "search"},
    )
    assert ok.metadata == {"team": "search"}


def test_responses_and_messages_fall_back_as_chat_completions_do(setup: Setup) -> None:
    raw = setup.openai().responses.with_raw_response.create(
        model="fallback", input="hi", max_output_tokens=3
    )
    # the first attempt fails (nobody listens) and ejects it; later ones find it Unavailable
    assert raw.headers["x-mlxfleet-fallback"] in ("Failed", "Unavailable")
    assert raw.headers["x-mlxfleet-backend"].startswith(f"{setup.fleet.ws.namespace}/chat@")
    assert raw.parse().usage.output_tokens == 3  # type: ignore[union-attr]
    with setup.anthropic().messages.with_streaming_response.create(
        model="fallback",
        max_tokens=3,
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
    ) as streamed:
        assert streamed.headers["x-mlxfleet-fallback"] in ("Failed", "Unavailable")
        names = [e.type for e in streamed.parse()]
    assert names[0] == "message_start"
    assert names[-1] == "message_stop"


# ---- Anthropic Messages ----------------------------------------------------------------------


def test_messages_text_with_a_system_prompt(setup: Setup) -> None:
    client = setup.anthropic()
    reply = client.messages.create(
        model="chat", max_tokens=5, messages=[{"role": "user", "content": "hello there"}]
    )
    assert reply.type == "message"
    assert reply.role == "assistant"
    assert reply.model == "chat"
    assert reply.id.startswith("msg_")
    assert [b.type for b in reply.content] == ["text"]
    assert reply.stop_reason == "max_tokens"
    assert reply.usage.output_tokens == 5
    assert reply.usage.input_tokens > 0
    cached: list[TextBlockParam] = [
        {
            "type": "text",
            "text": "You are terse and kind.",
            "cache_control": {"type": "ephemeral"},
        }
    ]
    for system in ("You are terse and kind.", cached):
        told = client.messages.create(
            model="chat",
            max_tokens=5,
            system=system,
            messages=[{"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
        )
        assert told.usage.input_tokens > reply.usage.input_tokens  # the system prompt came


def test_messages_stream_events_in_order(setup: Setup) -> None:
    client = setup.anthropic()
    with client.messages.stream(
        model="chat", max_tokens=10, messages=[{"role": "user", "content": "Tell me a story"}]
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    types = [e.type for e in events if e.type != "text"]
    deltas = types.count("content_block_delta")
    assert deltas >= 1
    assert types == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ], types
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")  # type: ignore[union-attr]
    assert final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 10
    assert final.usage.input_tokens > 0  # reported at the end (message_delta), as the backend knows
    # on the wire: a ping after message_start, as Anthropic sends, and `event:` lines throughout
    raw = httpx.post(
        setup.gateway.url + "/v1/messages",
        headers={"x-api-key": setup.keys["a"], "anthropic-version": "2023-06-01"},
        json={
            "model": "chat",
            "max_tokens": 3,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        },
        timeout=60,
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    names = sse_names(raw)
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-2:] == ["message_delta", "message_stop"]


def test_messages_tools_tool_use_and_tool_result(setup: Setup) -> None:
    client = setup.anthropic()
    ask: list[MessageParam] = [{"role": "user", "content": "Weather in Paris?"}]
    reply = client.messages.create(
        model="tooly",
        max_tokens=50,
        messages=ask,
        tools=[ANTHROPIC_WEATHER],
    )
    assert [b.type for b in reply.content] == ["text", "tool_use"]
    use = reply.content[1]
    assert use.type == "tool_use"
    assert (use.name, use.id, use.input) == (
        "weather",
        "call_scripted1",
        json.loads(toolprovider.ARGUMENTS),
    )
    assert reply.stop_reason == "tool_use"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (
        toolprovider.PROMPT_TOKENS,
        toolprovider.COMPLETION_TOKENS,
    )
    sent = setup.provider.bodies[-1]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": ANTHROPIC_WEATHER["description"],
                "parameters": ANTHROPIC_WEATHER["input_schema"],
            },
        }
    ]
    with client.messages.stream(
        model="tooly",
        max_tokens=50,
        messages=ask,
        tools=[ANTHROPIC_WEATHER],
        tool_choice={"type": "tool", "name": "weather", "disable_parallel_tool_use": True},
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    json_deltas = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert "".join(json_deltas) == toolprovider.ARGUMENTS
    assert final.content[1].input == json.loads(toolprovider.ARGUMENTS)  # type: ignore[union-attr]
    assert final.stop_reason == "tool_use"
    assert setup.provider.bodies[-1]["tool_choice"] == {
        "type": "function",
        "function": {"name": "weather"},
    }
    assert setup.provider.bodies[-1]["parallel_tool_calls"] is False
    # the result goes back to a real model: the call and its result are in its prompt
    # the answer's blocks as sent back: the dump of each has its param's shape
    said = cast(list[ContentBlockParam], [b.model_dump(exclude_none=True) for b in reply.content])
    turns: list[MessageParam] = [
        *ask,
        {"role": "assistant", "content": said},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 24 C"}],
        },
    ]
    answered = client.messages.create(
        model="chat", max_tokens=4, messages=turns, tools=[ANTHROPIC_WEATHER]
    )
    alone = client.messages.create(model="chat", max_tokens=4, messages=ask)
    assert answered.usage.input_tokens > alone.usage.input_tokens
    setup.provider.bodies.clear()
    client.messages.create(model="tooly", max_tokens=4, messages=turns, tools=[ANTHROPIC_WEATHER])
    assert [m["role"] for m in setup.provider.bodies[0]["messages"]] == [
        "user",
        "assistant",
        "tool",
    ]
    assert setup.provider.bodies[0]["messages"][2] == {
        "role": "tool",
        "tool_call_id": "call_scripted1",
        "content": "Sunny, 24 C",
    }


def test_messages_stop_sequences_stop_and_say_which(setup: Setup) -> None:
    client = setup.anthropic()
    ask: list[MessageParam] = [{"role": "user", "content": "Tell me a story"}]
    full = client.messages.create(model="chat", max_tokens=30, extra_body=GREEDY, messages=ask)
    text = full.content[0].text  # type: ignore[union-attr]
    stop = text[10:12]
    stopped = client.messages.create(
        model="chat",
        max_tokens=30,
        extra_body=GREEDY,
        messages=ask,
        stop_sequences=[stop, "never"],
    )
    assert stopped.stop_reason == "stop_sequence"
    assert stopped.stop_sequence == stop
    assert stopped.content[0].text == text[: text.find(stop)]  # type: ignore[union-attr]
    with client.messages.stream(
        model="chat",
        max_tokens=30,
        extra_body=GREEDY,
        messages=ask,
        stop_sequences=[stop],
    ) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)


def test_messages_errors_have_anthropics_shape(setup: Setup) -> None:
    client = setup.anthropic()
    hi: list[MessageParam] = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.BadRequestError) as missing:
        client.post("/v1/messages", cast_to=object, body={"model": "chat", "messages": hi})
    assert missing.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "max_tokens: Field required",
            "code": "invalid_value",
            "param": "max_tokens",
        },
    }
    cases: list[tuple[type[Exception], str, anthropic.Anthropic, dict[str, Any]]] = [
        (anthropic.NotFoundError, "not_found_error", client, {"model": "no-such"}),
        (anthropic.PermissionDeniedError, "permission_error", setup.anthropic("narrow"), {}),
        (
            anthropic.AuthenticationError,
            "authentication_error",
            setup.anthropic(api_key="mfk-not-a-key"),
            {},
        ),
        (
            anthropic.BadRequestError,
            "invalid_request_error",
            client,
            {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        ),
        (
            anthropic.BadRequestError,
            "invalid_request_error",
            client,
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
        ),
    ]
    for error, kind, who, extra in cases:
        body = {"model": "chat", "max_tokens": 2, "messages": hi, **extra}
        with pytest.raises(error) as info:
            who.messages.create(**body)
        got = info.value.body  # type: ignore[attr-defined]
        assert got["type"] == "error", got
        assert got["error"]["type"] == kind, got
        assert got["error"]["message"]
    limited = setup.anthropic("rpm")
    for _ in range(2):
        limited.messages.create(model="chat", max_tokens=1, messages=hi)
    with pytest.raises(anthropic.RateLimitError) as limit:
        limited.messages.create(model="chat", max_tokens=1, messages=hi)
    assert limit.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert limit.value.response.headers["retry-after"]
    wrong_method = httpx.get(
        setup.gateway.url + "/v1/messages", headers={"x-api-key": setup.keys["a"]}
    )
    assert wrong_method.status_code == 405
    assert wrong_method.json()["type"] == "error"


def test_messages_take_the_key_as_x_api_key_or_bearer(setup: Setup) -> None:
    hi: list[MessageParam] = [{"role": "user", "content": "hi"}]
    by_bearer = setup.anthropic(auth_token=setup.keys["a"])
    assert (
        by_bearer.messages.create(model="chat", max_tokens=1, messages=hi).usage.output_tokens == 1
    )
    # both headers naming different keys (the SDK itself sends one: a hand-made client)
    both = httpx.post(
        setup.gateway.url + "/v1/messages",
        headers={"x-api-key": setup.keys["a"], "Authorization": f"Bearer {setup.keys['b']}"},
        json={"model": "chat", "max_tokens": 1, "messages": hi},
    )
    assert both.status_code == 400, both.text
    assert both.json()["type"] == "error"
    assert both.json()["error"]["type"] == "invalid_request_error"
    assert "x-api-key" in both.json()["error"]["message"]
    # x-api-key is Anthropic's header: the OpenAI endpoints still take only Authorization
    chat = httpx.post(
        setup.gateway.url + "/v1/chat/completions",
        headers={"x-api-key": setup.keys["a"]},
        json={"model": "chat", "messages": hi, "max_tokens": 1},
    )
    assert chat.status_code == 401


# ---- the same keys, limits, metering and access log --------------------------------------------


def test_usage_per_key_equals_what_the_sdks_reported_and_no_text_is_logged(setup: Setup) -> None:
    oa, an = setup.openai("usage"), setup.anthropic("usage")
    prompt = completion = 0
    canaries = []
    for i in range(4):
        canary = f"CANARY-{uuid.uuid4().hex}"
        canaries.append(canary)
        ask = f"repeat {canary} please {i}"
        if i == 0:
            r = oa.responses.create(model="chat", input=ask, max_output_tokens=5)
            assert r.usage is not None
            prompt, completion = prompt + r.usage.input_tokens, completion + r.usage.output_tokens
        elif i == 1:
            final = events_of(
                oa.responses.create(model="chat", input=ask, max_output_tokens=5, stream=True)
            )[-1].response
            prompt += final.usage.input_tokens
            completion += final.usage.output_tokens
        elif i == 2:
            m = an.messages.create(
                model="chat", max_tokens=5, messages=[{"role": "user", "content": ask}]
            )
            prompt, completion = prompt + m.usage.input_tokens, completion + m.usage.output_tokens
        else:
            with an.messages.stream(
                model="chat", max_tokens=5, messages=[{"role": "user", "content": ask}]
            ) as stream:
                m = stream.get_final_message()
            prompt, completion = prompt + m.usage.input_tokens, completion + m.usage.output_tokens
    name = setup.key_name("usage")
    assert setup.gateway.counter("prompt_tokens_total", key=name) == prompt
    assert setup.gateway.counter("completion_tokens_total", key=name) == completion
    assert setup.gateway.counter("requests_total", key=name) == 4
    lines = [
        json.loads(line)
        for line in setup.gateway.log().splitlines()
        if '"logger": "mlxfleet_gateway.access"' in line
    ]
    mine = [line for line in lines if line.get("key") == name]
    assert sorted(line["endpoint"] for line in mine) == ["messages"] * 2 + ["responses"] * 2
    assert sum(line["prompt_tokens"] for line in mine) == prompt
    assert sum(line["completion_tokens"] for line in mine) == completion
    assert {line["status"] for line in mine} == {200}
    everything = setup.gateway.log() + setup.gateway.metrics()
    for canary in canaries:
        assert canary[len("CANARY-") :] not in everything


def test_a_stream_the_sdk_closes_at_done_is_ok_not_client_gone(setup: Setup) -> None:
    """The openai SDK closes the response as soon as it reads `data: [DONE]`; a backend that ends
    its chunked body a moment later (here 1 s) must not make a delivered stream an error."""
    name = setup.key_name("a")
    setup.provider.server.done_hold_s = 1.0
    try:
        chunks = list(
            setup.openai("a").chat.completions.create(
                model="tooly", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
        assert chunks
        time.sleep(1.5)  # the gateway finishes the exchange after the held end
    finally:
        setup.provider.server.done_hold_s = 0.0
    lines = [
        json.loads(line)
        for line in setup.gateway.log().splitlines()
        if '"logger": "mlxfleet_gateway.access"' in line
    ]
    last = [line for line in lines if line.get("key") == name and line.get("model") == "tooly"][-1]
    assert (last["outcome"], last["error"]) == ("ok", None), last
