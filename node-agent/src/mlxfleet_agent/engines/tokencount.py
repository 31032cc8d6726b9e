"""A request's prompt tokens, counted with the model's own tokenizer as mlx-lm will count them.

The data plane refuses a completion whose prompt plus `max_tokens` exceed the slot's
`contextLength` before a backend sees it (`dataplane.budget`); this module says how many tokens
the prompt has. `load(model_dir)` reads the model's `tokenizer.json` (the `tokenizers` package,
Rust: no transformers import) and its chat template (`chat_template.jinja`, else
`tokenizer_config.json`'s `chat_template`); `Counter.count(...)` then counts:

- chat: the messages rendered with the chat template the way transformers renders it for mlx-lm
  (a sandboxed jinja2 environment with `trim_blocks`/`lstrip_blocks`, `tojson`,
  `raise_exception`, `strftime_now`, the special tokens, `add_generation_prompt=True`, the
  slot's `chatTemplateArgs` and the request's `chat_template_kwargs`), content parts joined as
  mlx-lm joins them, tokenised without special tokens; a template that does not render here
  (a Python renderer, an exotic jinja feature) falls back to the messages' text alone: a lower
  bound, so a prompt that fits is never refused on a guess;
- completions: the prompt, tokenised with the tokenizer's special tokens (BOS), as mlx-lm does.

A short prompt sure to fit is not tokenised at all: its UTF-8 size bounds its tokens (a token
covers at least one byte, after a normalizer that may at most triple them). The work is bounded
whatever the prompt's size: a long text whose UTF-8 size exceeds `limit` times
the vocabulary's longest token cannot fit and is refused without tokenising ("at least N"),
and a long text is tokenised in chunks that stop once `limit` is passed (a text of one chunk,
`CHUNK_CHARS`, is always counted exactly). `tokenizers`' batch
call releases the GIL, so the data plane runs big counts in a thread. A model without a
readable `tokenizer.json` gets `ByteBound`: bytes / `UNKNOWN_TOKEN_BYTES`, a lower bound too.
May import: the standard library, jinja2, tokenizers. Called by: slots (a backend's counter,
loaded with it), dataplane.budget (through `slots.lease.PromptCounter`), tests.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.sandbox
import tokenizers

log = logging.getLogger(__name__)
UNKNOWN_TOKEN_BYTES = 256  # no tokenizer: no token of any common vocabulary is longer
CHUNK_CHARS = 16_384  # a long text is tokenised this much at a time (early stop)
THINK_PAIRS = (("<think>", "</think>"), ("<longcat_think>", "</longcat_think>"))


@dataclass(frozen=True, slots=True)
class Count:
    """A prompt's tokens: `exact` False means at least `tokens` (counting stopped early, or a
    lower bound stood in for the chat template)."""

    tokens: int
    exact: bool = True


class ByteBound:
    """No tokenizer: a lower bound from the prompt's UTF-8 size."""

    def __init__(self, max_token_bytes: int = UNKNOWN_TOKEN_BYTES) -> None:
        self.max_token_bytes = max_token_bytes

    def count(
        self,
        body: Mapping[str, Any],
        *,
        chat: bool,
        template_args: Mapping[str, Any] | None,
        limit: int,
        enough: int = 0,
    ) -> Count:
        text = contents_text(body.get("messages")) if chat else _str(body.get("prompt"))
        return Count(math.ceil(len(text.encode()) / self.max_token_bytes), exact=False)

    def at_least(self, body: Mapping[str, Any], *, chat: bool) -> int:
        return math.ceil(_chars(body, chat=chat) / self.max_token_bytes)


class Counter:
    """A model's tokenizer and chat template (see the module docstring)."""

    def __init__(
        self,
        tokenizer: tokenizers.Tokenizer,
        *,
        template: str | None,
        specials: Mapping[str, str],
    ) -> None:
        self.tokenizer = tokenizer
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        self.max_token_bytes = max((len(t.encode()) for t in vocab), default=1) or 1
        self.special_tokens = len(tokenizer.encode("", add_special_tokens=True).ids)
        self.specials = dict(specials)
        self.thinking = any(a in vocab and b in vocab for a, b in THINK_PAIRS)
        self.template = _compile(template) if template else None
        self.expansion = _expansion(tokenizer)

    def count(
        self,
        body: Mapping[str, Any],
        *,
        chat: bool,
        template_args: Mapping[str, Any] | None,
        limit: int,
        enough: int = 0,
    ) -> Count:
        """The prompt's tokens; counting stops once it passes `limit` (then `exact` is False).
        A prompt sure to have at most `enough` tokens (its UTF-8 size bounds them: a token is at
        least a byte, times what the normalizer may expand) is not tokenised: the count is then
        that upper bound (`exact` False, `tokens` <= `enough`)."""
        if not chat:
            text, extra, exact = _str(body.get("prompt")), self.special_tokens, True
        else:
            text, exact = self.chat_text(body, template_args)
            extra = 0
        size = len(text.encode())
        if self.expansion and size * self.expansion + extra <= enough:
            return Count(size * self.expansion + extra, exact=False)
        floor = math.ceil(size / self.max_token_bytes) + extra
        if floor > limit and len(text) > CHUNK_CHARS:  # a short one is counted all the same
            return Count(floor, exact=False)
        total, complete = self._tokens(text, stop_after=limit - extra)
        return Count(total + extra, exact=exact and complete)

    def at_least(self, body: Mapping[str, Any], *, chat: bool) -> int:
        """A lower bound of the prompt's tokens in O(messages): its text's characters (each at
        least a byte) over the vocabulary's longest token; no template, no tokenising."""
        extra = 0 if chat else self.special_tokens
        return math.ceil(_chars(body, chat=chat) / self.max_token_bytes) + extra

    def chat_text(
        self, body: Mapping[str, Any], template_args: Mapping[str, Any] | None
    ) -> tuple[str, bool]:
        """The prompt mlx-lm builds from `messages` (True), or their text alone (False: no
        template, or it did not render here)."""
        messages = body.get("messages")
        if self.template is None or not isinstance(messages, list):
            return contents_text(messages), False
        kwargs: dict[str, Any] = {**self.specials, "enable_thinking": self.thinking}
        kwargs.update(template_args or {})
        asked = body.get("chat_template_kwargs")
        if isinstance(asked, dict):
            kwargs.update(asked)
        tools = body.get("tools")
        try:
            text = self.template.render(
                messages=_plain_messages(messages),
                tools=tools if isinstance(tools, list) else None,
                documents=None,
                add_generation_prompt=True,
                **kwargs,
            )
        except Exception as exc:  # the template is the model's code: any failure means "guess"
            log.debug("chat template did not render; counting the text alone: %s", exc)
            return contents_text(messages), False
        return text, True

    def _tokens(self, text: str, *, stop_after: int) -> tuple[int, bool]:
        """Tokens of `text` without special tokens, a chunk at a time (cut before whitespace,
        where byte-level pre-tokenisers split anyway); (count so far, False) once past
        `stop_after`."""
        total, start, size = 0, 0, len(text)
        # the batch calls release the GIL; the `_fast` one (tokenizers >= 0.21) skips offsets
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        while start < size:
            end = size if size - start <= CHUNK_CHARS else _cut(text, start)
            [enc] = encode([text[start:end]], add_special_tokens=False)
            total += len(enc.ids)
            start = end
            if total > stop_after and start < size:
                return total, False
        return total, True


# how many bytes a normalizer may make of one (Unicode: NFC and NFD at most triple a text);
# a token is at least one byte of the normalised text, so tokens <= bytes x this
_EXPANSION = {None: 1, "NFC": 3, "NFD": 3}


def _expansion(tokenizer: tokenizers.Tokenizer) -> int:
    """The factor of the upper bound on tokens from UTF-8 bytes; 0: no bound known (a
    normalizer that may expand more, NFKC's ligatures, or one made of several steps)."""
    normalizer = tokenizer.normalizer
    kind = None if normalizer is None else type(normalizer).__name__
    return _EXPANSION.get(kind, 0)


def _cut(text: str, start: int) -> int:
    """Where the chunk from `start` ends: just before a space or newline in its second half."""
    end = start + CHUNK_CHARS
    for sep in (" ", "\n"):
        at = text.rfind(sep, start + CHUNK_CHARS // 2, end)
        if at > start:
            return at
    return end


def _chars(body: Mapping[str, Any], *, chat: bool) -> int:
    """Characters of the prompt's own text (message contents and text parts, or `prompt`)."""
    if not chat:
        return len(_str(body.get("prompt")))
    messages = body.get("messages")
    total = 0
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            for part in content:
                text = part.get("text") if isinstance(part, dict) else None
                total += len(text) if isinstance(text, str) else 0
    return total


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def contents_text(messages: object) -> str:
    """The text of every message (string contents and `text` parts), joined: what any chat
    template wraps with its own markup, so its tokens are a lower bound of the prompt's."""
    if not isinstance(messages, list):
        return ""
    out: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
    return "".join(out)


def _plain_messages(messages: Sequence[Any]) -> list[Any]:
    """The messages as mlx-lm hands them to the template (`process_message_content`): a list of
    text parts joined into one string, a null content as "", tool-call arguments parsed."""
    out: list[Any] = []
    for message in messages:
        if not isinstance(message, dict):
            out.append(message)
            continue
        m = dict(message)
        content = m.get("content")
        if isinstance(content, list):
            m["content"] = "".join(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        elif content is None:
            m["content"] = ""
        calls = m.get("tool_calls")
        if isinstance(calls, list):
            m["tool_calls"] = [_parsed_call(c) for c in calls]
        out.append(m)
    return out


def _parsed_call(call: object) -> object:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    func = dict(call["function"])
    args = func.get("arguments")
    if isinstance(args, str) and args:
        with contextlib.suppress(ValueError):
            func["arguments"] = json.loads(args)
    return {**call, "function": func}


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(
    x: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


class _Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (assistant masks in transformers): its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> Any:
        return caller()


def _compile(template: str) -> jinja2.Template | None:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        compiled = env.from_string(template)
    except jinja2.TemplateError as exc:
        log.warning("chat template does not compile; prompts are counted without it: %s", exc)
        return None
    # jinja keeps a template's globals as a ChainMap over the environment's, and every render
    # copies them twice by iterating it (half of a short chat's render); the same names in one
    # plain dict render the same (nothing adds globals after this)
    compiled.globals = dict(compiled.globals)
    return compiled


def _template(model_dir: Path, config: Mapping[str, Any]) -> str | None:
    """The chat template transformers would use: chat_template.jinja, else the config's (a
    string, or named templates: `default`)."""
    path = model_dir / "chat_template.jinja"
    if path.is_file():
        return path.read_text()
    found = config.get("chat_template")
    if isinstance(found, list):
        named = {t.get("name"): t.get("template") for t in found if isinstance(t, dict)}
        found = named.get("default")
    return found if isinstance(found, str) else None


def _specials(config: Mapping[str, Any]) -> dict[str, str]:
    """bos_token, eos_token, ...: strings, or AddedToken objects with `content`."""
    out: dict[str, str] = {}
    for name in ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token"):
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[name] = value
    return out


def load(model_dir: Path) -> Counter | ByteBound:
    """The counter of the model in `model_dir` (blocking: call it in a thread); ByteBound when
    it has no readable tokenizer.json. Never raises."""
    try:
        return _load(model_dir)
    except Exception as exc:  # the model's files are not ours: no failure may stop a load
        log.warning("prompt counting falls back to a byte bound: %s", exc)
        return ByteBound()


def _load(model_dir: Path) -> Counter | ByteBound:
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    except Exception as exc:  # missing, or a format this tokenizers cannot read
        log.info("no tokenizer for prompt counting (%s): byte bound only", exc)
        return ByteBound()
    config: dict[str, Any] = {}
    try:
        found = json.loads((model_dir / "tokenizer_config.json").read_text())
        config = found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        pass
    try:
        template = _template(model_dir, config)
    except OSError:
        template = None
    return Counter(tokenizer, template=template, specials=_specials(config))
