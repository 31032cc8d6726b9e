"""What a chat or text completion body must look like before an engine sees it (pure).

mlx_lm.server trusts the body: a `stop` that is not a string or a list of strings, a `messages`
entry that is not an object, or a content part without `type` raise inside its one generation
thread, which then dies for good (its /health turns 503, every later request fails). So both
proxies refuse such bodies first with a 400 that names the field and says what is allowed:

- `check(body, endpoint=...)`: the OpenAI request shape (any OpenAI-compatible engine refuses
  what it refuses): `stop`, `messages` (chat) / `prompt` (completions), `n`, `logit_bias`,
  `logprobs` / `top_logprobs`, the sampling numbers, `tools`, `stream_options`,
  `chat_template_kwargs`, `role_mapping`, `response_format`, each message's `role` (OpenAI's
  roles: an unknown one would be rendered by the chat template as if it were a role). The gateway
  runs it where it parses the body.
- `check_mlx_lm(body, endpoint=...)`: what mlx_lm accepts on top (`prompt` is one string, one
  choice per request, no `response_format` that constrains the output: mlx_lm would ignore it).
  The agent's data plane runs both for slots of the mlx-lm engine, and
  `check_token_ids` once it knows the backend's model (a `logit_bias` id beyond the vocabulary
  kills mlx_lm's process).

Embeddings and rerank bodies are not looked at. Raises `BodyError` (an `OpenAIError`: 400,
`invalid_request_error`, `param` = the field's path, e.g. `messages[1].content[0].text`).
May import: the standard library, openai_proxy. Called by: the agent's dataplane.routing,
the gateway's core.traits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mlxfleet_common.wire.openai_proxy import OpenAIError

CHAT = "chat.completions"  # the gateway spells it "chat/completions": both are read
GENERATING = frozenset({CHAT, "completions"})
MAX_STOP = 16  # stop sequences per request
MAX_STOP_CHARS = 1000  # characters per stop sequence
MAX_N = 128
MAX_LOGIT_BIAS = 1024  # entries
MAX_TOP_LOGPROBS = 20  # OpenAI's bound
TEXT_PART = "text"
# numbers mlx_lm reads without a null check: field -> (lowest, highest) allowed, None: unbounded
NUMBERS: dict[str, tuple[float | None, float | None]] = {
    "temperature": (0.0, None),
    "top_p": (0.0, 1.0),
    "min_p": (0.0, 1.0),
    "presence_penalty": (None, None),
    "frequency_penalty": (None, None),
    "repetition_penalty": (0.0, None),
    "xtc_probability": (0.0, 1.0),
    "xtc_threshold": (0.0, 1.0),
}
INTEGERS: dict[str, tuple[int | None, int | None]] = {
    "max_tokens": (1, None),
    "max_completion_tokens": (1, None),
    "top_k": (0, None),
    "n": (1, MAX_N),
    "seed": (None, None),
    "top_logprobs": (0, MAX_TOP_LOGPROBS),
    "repetition_context_size": (0, None),
    "presence_context_size": (0, None),
    "frequency_context_size": (0, None),
}
NULLABLE = frozenset({"max_tokens", "max_completion_tokens", "n", "seed"})  # null: not set
# every bounded field in the order `check` looks at them: (name, lowest, highest, integer)
BOUNDED: tuple[tuple[str, float | None, float | None, bool], ...] = (
    *((name, low, high, False) for name, (low, high) in NUMBERS.items()),
    *((name, low, high, True) for name, (low, high) in INTEGERS.items()),
)
# the endpoint names `check` reads (either spelling) -> the endpoint they name
KINDS = {CHAT: CHAT, "chat/completions": CHAT, "completions": "completions"}
OBJECTS = ("stream_options", "chat_template_kwargs", "role_mapping", "response_format")
RESPONSE_FORMATS = ("text", "json_object", "json_schema")
ENFORCED_FORMATS = frozenset({"json_object", "json_schema"})  # constrained output
# OpenAI's message roles ("function": the deprecated form of "tool")
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class BodyError(OpenAIError):
    """A body refused: 400 `invalid_request_error`, `param` naming the field."""


def invalid(param: str, message: str) -> BodyError:
    return BodyError(400, message, param=param, code="invalid_value")


def check(body: Mapping[str, Any], *, endpoint: str) -> None:
    """Refuse (400) a chat/text completion body whose fields do not have the OpenAI shape.
    Runs once per request on both hops: a field the body does not have costs one lookup."""
    kind = KINDS.get(endpoint)
    if kind is None:
        return
    if kind == CHAT:
        _messages(body.get("messages"))
    else:
        _prompt(body.get("prompt"))
    _stop(body.get("stop"))
    for name, low, high, integer in BOUNDED:
        if name in body:
            _number(body[name], name, low=low, high=high, integer=integer)
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise invalid("logprobs", "`logprobs` must be a boolean")
    _logit_bias(body.get("logit_bias"))
    for name in OBJECTS:
        if body.get(name) is not None and not isinstance(body[name], dict):
            raise invalid(name, f"`{name}` must be an object")
    _response_format(body.get("response_format"))
    tools = body.get("tools")
    if tools is not None:
        _objects(tools, "tools")


def _response_format(value: Any) -> None:
    if value is None:
        return
    kind = value.get("type")
    if kind not in RESPONSE_FORMATS:
        raise invalid(
            "response_format.type",
            f"`response_format.type` must be one of {', '.join(RESPONSE_FORMATS)}",
        )
    if kind == "json_schema" and not isinstance(value.get("json_schema"), dict):
        raise invalid(
            "response_format.json_schema",
            "`response_format.json_schema` is required with type json_schema: an object with "
            "`name` and `schema`",
        )


def check_mlx_lm(body: Mapping[str, Any], *, endpoint: str) -> None:
    """Refuse (400) what the mlx-lm engine does not serve, beyond the OpenAI shape."""
    kind = KINDS.get(endpoint)
    if kind is None:
        return
    if kind == "completions" and not isinstance(body.get("prompt"), str):
        raise invalid("prompt", "`prompt` must be a string for this engine (mlx-lm)")
    n = body.get("n")
    if n is not None and n != 1:
        raise invalid("n", "`n` must be 1: this engine (mlx-lm) generates one choice per request")
    asked = body.get("response_format")
    kind = asked.get("type") if isinstance(asked, dict) else None
    if kind in ENFORCED_FORMATS:
        raise BodyError(
            400,
            f"`response_format` of type {kind} is not enforced by this engine (mlx-lm: no "
            "constrained decoding), and the agent never accepts and ignores it: leave it out (or "
            "use type text), or serve the model with an engine that enforces it (vllm); "
            "docs/engines.md",
            param="response_format",
            code="unsupported_parameter",
        )


def check_token_ids(body: Mapping[str, Any], *, vocab_size: int) -> None:
    """Refuse (400) a `logit_bias` token id beyond the model's vocabulary (mlx_lm indexes the
    logits with it unchecked: its process dies). Run after `check` (the ids are digits)."""
    bias = body.get("logit_bias")
    for key in bias if isinstance(bias, dict) else ():
        if int(key) >= vocab_size:
            raise invalid(
                f"logit_bias.{key}",
                f"`logit_bias` token ids must be below this model's vocabulary size ({vocab_size})",
            )


def _messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "`messages` is required: a non-empty list of message objects")
    for i, message in enumerate(messages):
        # the common shape first, without building a field's name: the checks below refuse
        if (
            type(message) is dict
            and type(role := message.get("role")) is str
            and role in ROLES
            and type(message.get("content")) is str
            and message.get("tool_calls") is None
        ):
            continue
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid(where, f"`{where}` must be an object with `role` and `content`")
        if not isinstance(message.get("role"), str) or not message["role"]:
            raise invalid(f"{where}.role", f"`{where}.role` is required and must be a string")
        if message["role"] not in ROLES:
            raise invalid(
                f"{where}.role",
                f"`{where}.role` {message['role']!r} is not a role: one of {', '.join(ROLES)}",
            )
        content = message.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                _part(part, f"{where}.content[{j}]")
        elif content is not None and not isinstance(content, str):
            raise invalid(
                f"{where}.content",
                f"`{where}.content` must be a string, null or a list of content parts",
            )
        calls = message.get("tool_calls")
        if calls is not None:
            _objects(calls, f"{where}.tool_calls")


def _part(part: Any, where: str) -> None:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise invalid(where, f"`{where}` must be an object with a string `type` (e.g. 'text')")
    if part["type"] == TEXT_PART and not isinstance(part.get("text"), str):
        raise invalid(f"{where}.text", f"`{where}.text` is required and must be a string")


def _prompt(prompt: Any) -> None:
    ok = isinstance(prompt, str) or (
        isinstance(prompt, list)
        and prompt
        and (
            all(isinstance(p, str) for p in prompt)
            or all(_is_int(p) for p in prompt)
            or all(isinstance(p, list) and all(_is_int(t) for t in p) for p in prompt)
        )
    )
    if not ok:
        raise invalid(
            "prompt",
            "`prompt` is required: a string (or a non-empty list of strings or of token ids)",
        )


def _stop(stop: Any) -> None:
    allowed = (
        f"`stop` must be a string or a list of at most {MAX_STOP} strings, "
        f"each 1 to {MAX_STOP_CHARS} characters"
    )
    if stop is None:
        return
    words = [stop] if isinstance(stop, str) else stop
    if not isinstance(words, list) or len(words) > MAX_STOP:
        raise invalid("stop", allowed)
    for i, word in enumerate(words):
        if not isinstance(word, str) or not 1 <= len(word) <= MAX_STOP_CHARS:
            raise invalid("stop" if isinstance(stop, str) else f"stop[{i}]", allowed)


def _number(
    value: Any,
    name: str,
    *,
    low: float | None,
    high: float | None,
    integer: bool,
) -> None:
    if value is None and name in NULLABLE:
        return  # OpenAI's "not set"; the agent's token cap fills max_tokens in
    kind = "an integer" if integer else "a finite number"
    bad = not (_is_int(value) or (not integer and isinstance(value, float)))
    bad = bad or (isinstance(value, float) and not math.isfinite(value))
    bad = bad or (low is not None and value < low) or (high is not None and value > high)
    if bad:
        raise invalid(name, f"`{name}` must be {kind}{_range(low, high)}")


def _range(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" from {low:g} to {high:g}"
    if low is not None:
        return f" of at least {low:g}"
    return ""


def _logit_bias(bias: Any) -> None:
    if bias is None:
        return
    allowed = (
        f"`logit_bias` must be an object of at most {MAX_LOGIT_BIAS} entries mapping token ids "
        "(non-negative integers, as strings) to numbers from -100 to 100"
    )
    if not isinstance(bias, dict) or len(bias) > MAX_LOGIT_BIAS:
        raise invalid("logit_bias", allowed)
    for key, value in bias.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit()):
            raise invalid("logit_bias", allowed)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or abs(value) > 100
        ):
            raise invalid(f"logit_bias.{key}", allowed)


def _objects(value: Any, where: str) -> None:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise invalid(where, f"`{where}` must be a list of objects")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
