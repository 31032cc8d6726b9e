"""What routing reads from a request: the model, streaming, tools, prompt size, an affinity key.

`parse(raw, headers)` turns the raw JSON body into a `Traits` (and the parsed body, which
`calls.payload` re-serialises only when it must change it). Prompt size is estimated as
characters / 4 (no tokenizer in the gateway). The affinity key is a stable 64-bit hash of the first
`AFFINITY_CHARS` characters of the prompt (roles included), only for prompts of at least
`min_affinity_chars`: requests that share that prefix (one long system prompt, the turns of one
conversation) get the same key, so the balancer can send them to the replica whose prompt cache
already holds it. Never logs or stores
the text itself.
The body's shape (what an engine would choke on: a malformed `stop`, `messages` or `prompt`) is
checked by the agent's own `mlxfleet_agent.openai_body`, shared, so both refuse the same bodies.
May import: the standard library, `errors`, mlxfleet_agent.openai_body. Called by: the proxy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlxfleet_agent import openai_body
from mlxfleet_gateway.core import errors

AFFINITY_CHARS = 1024  # the prefix hashed for affinity (about 256 tokens)
MIN_AFFINITY_CHARS = 1024  # shorter prompts gain little from a prompt cache
CHARS_PER_TOKEN = 4
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
    except (ValueError, UnicodeDecodeError) as exc:
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
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]


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
    for name in ("prompt", "input"):
        value = body.get(name)
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            yield from (v for v in value if isinstance(v, str))


def affinity_key(parts: Iterable[str], *, min_chars: int = MIN_AFFINITY_CHARS) -> tuple[int, int]:
    """(prompt characters, key or 0): a stable hash of the first AFFINITY_CHARS characters."""
    digest = hashlib.blake2b(digest_size=8)
    total = hashed = 0
    for part in parts:
        total += len(part)
        if hashed < AFFINITY_CHARS:
            piece = part[: AFFINITY_CHARS - hashed]
            digest.update(piece.encode("utf-8", "surrogatepass"))
            hashed += len(piece)
    key = int.from_bytes(digest.digest(), "big") if total >= min_chars else 0
    return total, key


def traits(
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    endpoint: str = "",
    min_affinity_chars: int = MIN_AFFINITY_CHARS,
) -> Traits:
    """Traits of a parsed body; 400 naming the field when `model` or `stream` is malformed, or
    (chat and text completions at `endpoint`) a field has not the OpenAI shape."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise errors.bad_request("`model` is required and must be a string", param="model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise errors.bad_request("`stream` must be a boolean", param="stream")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)):
        raise errors.bad_request("`max_tokens` must be an integer", param="max_tokens")
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
        prompt_chars=chars,
        max_tokens=max_tokens,
        include_usage=include_usage,
        affinity=key or None,
        headers=headers,
    )
