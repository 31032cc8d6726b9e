"""What routing reads from a request: the model, streaming, tools, prompt size, an affinity key.

`parse(raw, headers)` turns the raw JSON body into a `Traits` (and the parsed body, which
`calls.payload` re-serialises only when it must change it). Prompt size is estimated as
characters / 4 (no tokenizer in the gateway), counting all the prompt carries: the text, and as
JSON the tools, the other fields of each message (`tool_calls`, ...) and the parts without text.
`max_tokens` / `max_completion_tokens` (the latter wins, as in mlx_lm; null: not given) must be
integers of at least 1: the limits reserve prompt + max_tokens. The affinity key is a stable
64-bit hash of the first `AFFINITY_CHARS` characters of the prompt's text (roles included), only
for prompts of at least `min_affinity_chars`: requests that share that prefix (one long system
prompt, the turns of one conversation) get the same key, so the balancer can send them to the
replica whose prompt cache already holds it. Never logs or stores the text itself.
The body's shape (what an engine would choke on: a malformed `stop`, `messages` or `prompt`) is
checked by `mlxfleet_common.wire.openai_body`, shared with the agent, so both refuse the same
bodies. May import: the standard library, `errors`, mlxfleet_common.wire.openai_body. Called by: the
proxy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlxfleet_common.wire import openai_body
from mlxfleet_gateway.core import errors

AFFINITY_CHARS = 1024  # the prefix hashed for affinity (about 256 tokens)
MIN_AFFINITY_CHARS = 1024  # shorter prompts gain little from a prompt cache
CHARS_PER_TOKEN = 4
PROMPT_FIELDS = ("prompt", "input", "query", "documents")  # completions, embeddings, rerank
MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")  # the last one given wins
# fields a client must not pass through: mlx_lm would load other weights from these paths
STRIPPED_FIELDS = ("adapters", "draft_model")


@dataclass(frozen=True, slots=True)
class Traits:
    """The parts of a request that rules, limits and balancing look at."""

    model: str
    stream: bool
    has_tools: bool
    prompt_chars: int
    max_tokens: int | None
    include_usage: bool  # a streaming client asked for the usage event
    affinity: int | None
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def prompt_tokens_estimate(self) -> int:
        return self.prompt_chars // CHARS_PER_TOKEN


def parse_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or 400."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise errors.bad_request(
            f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise errors.bad_request("request body must be a JSON object", code="invalid_json")
    return body


def _text(content: Any) -> Iterable[str]:
    """The text parts of a message `content` (a string or a list of typed parts)."""
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if _is_text_part(part):
                yield part["text"]


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("text"), str)


def prompt_parts(body: Mapping[str, Any]) -> Iterable[str]:
    """The prompt's text, in order (chat messages with their roles, or `prompt`/`input`)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                role = message.get("role")
                yield f"{role}:" if isinstance(role, str) else ":"
                yield from _text(message.get("content"))
                yield "\n"
        return
    for name in PROMPT_FIELDS:
        value = body.get(name)
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            yield from (v for v in value if isinstance(v, str))


def _json_chars(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def carried_chars(body: Mapping[str, Any]) -> int:
    """Characters the prompt carries beyond `prompt_parts`' text, each counted as its JSON:
    `tools` / `functions`, every message field but role and content (`tool_calls`, `name`, ...),
    content parts without text (an image as its URL), and prompt entries that are not strings
    (token ids: one token each)."""
    total = sum(_json_chars(body[name]) for name in ("tools", "functions") if body.get(name))
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, dict):
                total += _json_chars(message)
                continue
            rest = {k: v for k, v in message.items() if k not in ("role", "content")}
            total += _json_chars(rest) if rest else 0
            content = message.get("content")
            if isinstance(content, list):
                total += sum(_json_chars(p) for p in content if not _is_text_part(p))
            elif content is not None and not isinstance(content, str):
                total += _json_chars(content)
        return total
    for name in PROMPT_FIELDS:
        value = body.get(name)
        for entry in value if isinstance(value, list) else [value]:
            if entry is not None and not isinstance(entry, str):
                total += _entry_chars(entry)
    return total


def _entry_chars(entry: Any) -> int:
    """A prompt entry that is not a string: token ids count a token each, the rest its JSON."""
    ids = entry if isinstance(entry, list) else [entry]
    if all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return len(ids) * CHARS_PER_TOKEN
    return _json_chars(entry)


def affinity_key(parts: Iterable[str], *, min_chars: int = MIN_AFFINITY_CHARS) -> tuple[int, int]:
    """(prompt characters, key or 0): a stable hash of the first AFFINITY_CHARS characters,
    made only for a prompt of at least `min_chars` (a shorter one has key 0 and is not
    hashed: most one-shot requests, embeddings and classification among them)."""
    texts = parts if isinstance(parts, list) else list(parts)
    total = sum(map(len, texts))
    if total < min_chars:
        return total, 0
    digest = hashlib.blake2b(digest_size=8)
    hashed = 0
    for part in texts:
        if hashed >= AFFINITY_CHARS:
            break
        piece = part[: AFFINITY_CHARS - hashed]
        digest.update(piece.encode("utf-8", "surrogatepass"))
        hashed += len(piece)
    return total, int.from_bytes(digest.digest(), "big")


def traits(
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    endpoint: str = "",
    min_affinity_chars: int = MIN_AFFINITY_CHARS,
) -> Traits:
    """Traits of a parsed body; 400 naming the field when `model`, `stream` or the token cap is
    malformed, or (chat and text completions at `endpoint`) a field has not the OpenAI shape."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise errors.bad_request("`model` is required and must be a string", param="model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise errors.bad_request("`stream` must be a boolean", param="stream")
    max_tokens = None
    for name in MAX_TOKENS_FIELDS:
        value = body.get(name)
        if value is None:
            continue  # null: not given (the agent fills in its cap)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise errors.bad_request(f"`{name}` must be an integer of at least 1", param=name)
        max_tokens = value
    try:
        openai_body.check(body, endpoint=endpoint)
    except openai_body.BodyError as exc:
        raise errors.bad_request(str(exc), param=exc.param, code=exc.code) from None
    tools = body.get("tools") or body.get("functions")
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    chars, key = affinity_key(prompt_parts(body), min_chars=min_affinity_chars)
    return Traits(
        model=model,
        stream=stream,
        has_tools=isinstance(tools, list) and len(tools) > 0,
        prompt_chars=chars + carried_chars(body),
        max_tokens=max_tokens,
        include_usage=include_usage,
        affinity=key or None,
        headers=headers,
    )
