"""The KV budget, pure: prompt tokens counted with the model's own tokenizer and chat template
(engines.tokencount), bounded work for huge prompts, and the data plane's refusal
(`context_length_exceeded`, OpenAI's code and wording) or the room a request without max_tokens
gets (dataplane.budget, routing.limit_tokens). The counts match mlx-lm's own `usage` in
tests/integration/agent/test_kv_budget.py."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tokenizers

from mlxfleet_agent import contract
from mlxfleet_agent.dataplane import budget, routing
from mlxfleet_agent.dataplane.errors import RouteError
from mlxfleet_agent.dev import devmodels
from mlxfleet_agent.engines import tokencount
from mlxfleet_agent.slots import lease


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tok")
    devmodels.write_tokenizer(out)
    return out


@pytest.fixture(scope="module")
def counter(model_dir: Path) -> tokencount.Counter:
    found = tokencount.load(model_dir)
    assert isinstance(found, tokencount.Counter)
    return found


@pytest.fixture(scope="module")
def tok(model_dir: Path) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))


def _n(tok: tokenizers.Tokenizer, text: str, *, special: bool = False) -> int:
    return len(tok.encode(text, add_special_tokens=special).ids)


def _chatml(*turns: tuple[str, str]) -> str:
    """What the dev models' ChatML template renders, with the generation prompt."""
    body = "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns)
    return body + "<|im_start|>assistant\n"


# ---- counting -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "turns"),
    [
        pytest.param(
            [{"role": "user", "content": "hello there"}], [("user", "hello there")], id="one"
        ),
        pytest.param(
            [
                {"role": "system", "content": "be brief"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "The quick "},
                        {"type": "text", "text": "fox"},
                    ],
                },
                {"role": "assistant", "content": None},
                {"role": "user", "content": "ünïcödé ✓"},
            ],
            [
                ("system", "be brief"),
                ("user", "The quick fox"),
                ("assistant", ""),
                ("user", "ünïcödé ✓"),
            ],
            id="parts-null-unicode",
        ),
    ],
)
def test_chat_prompt_is_the_template_rendered(
    counter: tokencount.Counter,
    tok: tokenizers.Tokenizer,
    messages: list[Any],
    turns: list[tuple[str, str]],
) -> None:
    count = counter.count({"messages": messages}, chat=True, template_args=None, limit=10**6)
    assert count == tokencount.Count(_n(tok, _chatml(*turns)), exact=True)


def test_completion_prompt_counts_special_tokens(
    counter: tokencount.Counter, tok: tokenizers.Tokenizer
) -> None:
    text = "Once upon a time there was a tiny model"
    count = counter.count({"prompt": text}, chat=False, template_args=None, limit=10**6)
    assert count == tokencount.Count(_n(tok, text, special=True), exact=True)


def test_a_long_text_counted_in_chunks_matches_the_whole(
    counter: tokencount.Counter, tok: tokenizers.Tokenizer
) -> None:
    text = "The lazy dog sleeps.\n  Numbers 0 1 2;  " * 2000  # 80 KB: five chunks
    assert len(text) > 4 * tokencount.CHUNK_CHARS
    count = counter.count({"prompt": text}, chat=False, template_args=None, limit=10**7)
    assert count == tokencount.Count(_n(tok, text, special=True), exact=True)


def test_counting_stops_once_past_the_limit(
    counter: tokencount.Counter, tok: tokenizers.Tokenizer
) -> None:
    """Bounded work: a long prompt is tokenised only until it is known not to fit."""
    text = "The quick brown fox jumps over the lazy dog. " * 4000  # 180 KB: eleven chunks
    whole = _n(tok, text)
    limit = -(-len(text.encode()) // counter.max_token_bytes)  # at the floor: it must tokenise
    count = counter.count({"prompt": text}, chat=False, template_args=None, limit=limit)
    assert not count.exact
    assert limit < count.tokens < whole // 2


@dataclass
class _Refusing:
    """A tokenizer that must not be called."""

    calls: list[str] = field(default_factory=list)

    def encode_batch(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("encode_batch")
        raise AssertionError("tokenised a text that cannot fit")

    def encode_batch_fast(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("encode_batch_fast")
        raise AssertionError("tokenised a text that cannot fit")


def test_a_text_too_long_for_any_count_is_refused_without_tokenising(
    model_dir: Path,
) -> None:
    counter = tokencount.load(model_dir)
    assert isinstance(counter, tokencount.Counter)
    spy = _Refusing()
    counter.tokenizer = spy  # type: ignore[assignment]
    text = "x" * (counter.max_token_bytes * 2048 + 1)
    assert len(text) > tokencount.CHUNK_CHARS
    count = counter.count({"prompt": text}, chat=False, template_args=None, limit=2048)
    assert count == tokencount.Count(2049, exact=False)
    assert spy.calls == []


def test_template_arguments_reach_the_template(model_dir: Path, tmp_path: Path) -> None:
    for name in ("tokenizer.json", "special_tokens_map.json"):
        (tmp_path / name).write_bytes((model_dir / name).read_bytes())
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{% if enable_thinking %}<think>{% endif %}{{ prefix }}"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    )
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    counter = tokencount.load(tmp_path)
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    plain = counter.count(body, chat=True, template_args={"prefix": ""}, limit=10**6)
    slot_args = counter.count(body, chat=True, template_args={"prefix": "ab cd ef"}, limit=10**6)
    asked = counter.count(
        {**body, "chat_template_kwargs": {"enable_thinking": True}},
        chat=True,
        template_args={"prefix": ""},
        limit=10**6,
    )
    assert [plain.exact, slot_args.exact, asked.exact] == [True, True, True]
    assert slot_args.tokens > plain.tokens
    assert asked.tokens > plain.tokens


def test_a_template_renders_from_plain_globals_with_every_name_it_had(tmp_path: Path) -> None:
    """Renders copy the template's globals: a plain dict (not jinja's ChainMap over the
    environment's, which every render iterated twice), still holding jinja's own names and ours."""
    template = (
        "{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}"
        "{{ ns.n }}|{{ strftime_now('%Y') | length }}|{{ raise_exception is defined }}"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    )
    counter = tokencount.Counter(
        tokenizers.Tokenizer(tokenizers.models.BPE()), template=template, specials={}
    )
    assert counter.template is not None
    assert type(counter.template.globals) is dict
    text, rendered = counter.chat_text({"messages": [{"role": "user", "content": "hi"}]}, None)
    assert (text, rendered) == ("6|4|Truehi", True)


def test_a_template_that_does_not_render_falls_back_to_a_lower_bound(
    model_dir: Path, tmp_path: Path, tok: tokenizers.Tokenizer
) -> None:
    (tmp_path / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    (tmp_path / "chat_template.jinja").write_text("{{ raise_exception('no system role') }}")
    counter = tokencount.load(tmp_path)
    messages = [{"role": "user", "content": "hello "}, {"role": "user", "content": "world"}]
    count = counter.count({"messages": messages}, chat=True, template_args=None, limit=10**6)
    assert count == tokencount.Count(_n(tok, "hello world"), exact=False)


@pytest.mark.parametrize(
    "files",
    [
        pytest.param({}, id="no-tokenizer"),
        pytest.param({"tokenizer.json": "{not json"}, id="unreadable-tokenizer"),
    ],
)
def test_a_model_without_a_readable_tokenizer_gets_the_byte_bound(
    tmp_path: Path, files: dict[str, str]
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    counter = tokencount.load(tmp_path)
    assert isinstance(counter, tokencount.ByteBound)
    text = "é" * 1000  # 2000 bytes
    count = counter.count({"prompt": text}, chat=False, template_args=None, limit=1)
    assert count == tokencount.Count(-(-2000 // tokencount.UNKNOWN_TOKEN_BYTES), exact=False)


def test_a_broken_template_or_config_never_stops_a_load(model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(
        '{"chat_template": "{% for %}", "bos_token": 3}'
    )
    counter = tokencount.load(tmp_path)
    assert isinstance(counter, tokencount.Counter)
    assert counter.template is None


# ---- the refusal ----------------------------------------------------------------------------


@dataclass
class _Backend:
    """What budget.check reads of a leased backend (slots.lease.Upstream)."""

    spec: contract.SlotSpec
    counter: lease.PromptCounter
    pinned: str = "/m"
    port: int = 1
    fingerprint: str | None = None
    vocab_size: int | None = None


def _spec(**extra: Any) -> contract.SlotSpec:
    return contract.SlotSpec.model_validate(
        {"source": "file:///m/a", "servedName": "a", "contextLength": 256, **extra}
    )


def _check(backend: _Backend, body: dict[str, Any], endpoint: str, size: int = 10) -> int | None:
    return asyncio.run(budget.check(body, backend, endpoint=endpoint, size=size))


def _prompt(counter: tokencount.Counter, tokens: int) -> str:
    """A completion prompt of exactly `tokens` tokens (special tokens included)."""
    text = "x" * tokens
    got = counter.count({"prompt": text}, chat=False, template_args=None, limit=10**6).tokens
    assert got == tokens, "each 'x' is one token of the dev tokenizer"
    return text


@pytest.mark.parametrize(
    ("prompt", "asked", "server", "counted"),
    [
        # fits, and its 200 bytes bound its tokens: not tokenised (None)
        pytest.param(200, 56, {}, None, id="exactly-fits"),
        pytest.param(200, 57, {}, "refused", id="one-over"),
        pytest.param(200, 10**6, {}, "refused", id="huge-max-tokens-clamped-to-context"),
        pytest.param(200, 10**6, {"maxTokens": 50}, None, id="clamped-to-server-max-fits"),
        pytest.param(255, None, {}, 255, id="absent-needs-one-token"),  # counted: room to cut
        pytest.param(256, None, {}, "refused", id="absent-no-room"),
    ],
)
def test_prompt_plus_max_tokens_within_the_context(
    counter: tokencount.Counter,
    prompt: int,
    asked: int | None,
    server: dict[str, Any],
    counted: int | str | None,
) -> None:
    backend = _Backend(_spec(server=server), counter)
    body: dict[str, Any] = {"prompt": _prompt(counter, prompt)}
    if asked is not None:
        body["max_tokens"] = asked
    if counted != "refused":
        assert _check(backend, body, "completions") == counted
        return
    with pytest.raises(RouteError) as err:
        _check(backend, body, "completions")
    e = err.value
    assert (e.status, e.code, e.param) == (400, "context_length_exceeded", "prompt")
    assert json.loads(e.body())["error"]["type"] == "invalid_request_error"
    assert "maximum context length is 256 tokens" in str(e)
    assert f"{prompt} in the prompt" in str(e) or f"resulted in {prompt} tokens" in str(e)


def test_a_short_prompt_sure_to_fit_is_not_tokenised(model_dir: Path) -> None:
    """A prompt whose UTF-8 size is within `enough` cannot have more tokens (a token covers at
    least one byte): it is answered with that bound, untokenised; one byte more is tokenised."""
    counter = tokencount.load(model_dir)
    assert isinstance(counter, tokencount.Counter)
    assert counter.expansion == 1  # no normalizer
    spy = _Refusing()
    real, counter.tokenizer = counter.tokenizer, spy  # type: ignore[assignment]
    body = {"prompt": "é" * 50}  # 100 bytes
    count = counter.count(body, chat=False, template_args=None, limit=200, enough=100)
    assert count == tokencount.Count(100, exact=False)
    assert spy.calls == []
    counter.tokenizer = real
    count = counter.count(body, chat=False, template_args=None, limit=200, enough=99)
    assert count.exact


def test_the_refusal_names_both_numbers_for_chat(counter: tokencount.Counter) -> None:
    backend = _Backend(_spec(), counter)
    body = {"messages": [{"role": "user", "content": "x" * 300}], "max_completion_tokens": 8}
    with pytest.raises(RouteError) as err:
        _check(backend, body, "chat.completions")
    message = str(err.value)
    assert err.value.param == "messages"
    assert "maximum context length is 256 tokens" in message
    assert "8 in the completion" in message
    assert "in the messages" in message


def test_a_big_body_is_counted_off_the_event_loop(counter: tokencount.Counter) -> None:
    backend = _Backend(_spec(contextLength=20_000), counter)
    text = "The quick brown fox jumps over the lazy dog. " * 1400  # 63 KB, 16,800 tokens
    body = {"prompt": text, "max_tokens": 1}
    loop_ticks = 0

    async def run() -> int | None:
        nonlocal loop_ticks
        task = asyncio.create_task(
            budget.check(body, backend, endpoint="completions", size=budget.INLINE_BYTES + 1)
        )
        while not task.done():
            loop_ticks += 1
            await asyncio.sleep(0)
        return await task

    assert asyncio.run(run()) == 16_800
    assert loop_ticks > 1  # the loop ran while the thread counted


@pytest.mark.parametrize(
    ("prompt_tokens", "server", "expected"),
    [
        pytest.param(None, {}, 512, id="not-counted-mlx-default"),
        pytest.param(100, {}, 156, id="cut-to-the-room-left"),
        pytest.param(10, {}, 246, id="room-below-default"),
        pytest.param(0, {"maxTokens": 16}, 16, id="server-default-fits"),
        pytest.param(255, {}, 1, id="one-token-left"),
    ],
)
def test_a_request_without_max_tokens_gets_the_room_its_prompt_leaves(
    prompt_tokens: int | None, server: dict[str, Any], expected: int
) -> None:
    body: dict[str, Any] = {}
    spec = _spec(server=server, contextLength=256 if prompt_tokens is not None else 8192)
    routing.limit_tokens(body, spec, prompt_tokens=prompt_tokens)
    assert body == {"max_tokens": expected}


# ---- which requests mlx-lm stops when their client leaves -------------------------------------


@pytest.mark.parametrize(
    ("body", "server", "engine", "streamed", "expected"),
    [
        pytest.param({"prompt": "x"}, {}, "mlx-lm", True, True, id="streamed-batch"),
        pytest.param({"prompt": "x"}, {}, "mlx-lm", False, False, id="whole-answer"),
        pytest.param({"prompt": "x", "seed": 7}, {}, "mlx-lm", True, False, id="seed-served-alone"),
        pytest.param({"prompt": "x", "seed": None}, {}, "mlx-lm", True, True, id="null-seed"),
        pytest.param({"prompt": "x"}, {"kvBits": 8}, "mlx-lm", True, False, id="kv-bits-slot"),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:x"}}],
                    }
                ]
            },
            {},
            "mlx-lm",
            True,
            False,
            id="images",
        ),
        pytest.param({"prompt": "x", "seed": 7}, {}, "vllm", False, True, id="other-engine"),
    ],
)
def test_interruptible(
    body: dict[str, Any], server: dict[str, Any], engine: str, streamed: bool, expected: bool
) -> None:
    spec = _spec(server=server, engine={"name": engine})
    assert routing.interruptible(body, spec, streamed=streamed) is expected


def test_a_prompt_far_too_long_is_refused_before_any_count(counter: tokencount.Counter) -> None:
    """Its characters alone cannot fit: refused on the event loop, with no template rendered,
    nothing tokenised and no thread."""

    @dataclass
    class CountsNothing:
        real: tokencount.Counter

        def at_least(self, body: Any, *, chat: bool) -> int:
            return self.real.at_least(body, chat=chat)

        def count(self, *args: Any, **kwargs: Any) -> tokencount.Count:
            raise AssertionError("counted a prompt that cannot fit")

    backend = _Backend(_spec(contextLength=2048), CountsNothing(counter))
    text = "The quick brown fox jumps over the lazy dog. " * 17_000
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 16}
    with pytest.raises(RouteError) as err:
        _check(backend, body, "chat.completions", size=len(text))
    assert err.value.code == "context_length_exceeded"
    assert "you requested at least " in str(err.value)
