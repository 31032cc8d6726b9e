"""What the data plane does to a backend's answer before a client sees it (pure, no I/O).

- `Assembler`: a whole (non-streamed) OpenAI answer built from the backend's stream. The agent
  asks mlx_lm for a stream even when the client wants one JSON body, because mlx_lm only notices
  a client that left when a write fails: streamed, a hang-up stops the generation at the next
  token; whole, it would run to `max_tokens` for nobody. The answer has the fields, order and
  values of mlx_lm's own whole answer (its stream carries no logprobs: requests that ask for them
  are still generated whole, see `wants_logprobs`).
- `backend_error`: a backend's 4xx/5xx body (mlx_lm writes `{"error": "text"}` or plain text) as
  the OpenAI error shape, with the backend's model path replaced by the served name; mlx_lm's
  404 for a request it failed on becomes 400, or 503 when its generation thread died.
- `fingerprint` / `rewriter`: mlx_lm's `system_fingerprint` names the kernel and C library
  (`platform.platform()`); answers carry an opaque, stable value instead. The original is known
  per backend (from its warm-up answer), so a stream pays one `bytes.replace` per chunk.

May import: dataplane.errors (error shape), the standard library. Called by: dataplane.relay.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable
from typing import Any

from mlxfleet_agent.dataplane.errors import RETRY_AFTER, RouteError

_FINGERPRINT_KEY = secrets.token_bytes(32)  # per agent process: the value cannot be reversed
_FINGERPRINT_FIELD = re.compile(rb'"system_fingerprint": "[^"]*"')
MAX_ERROR_MESSAGE = 2000


# ---- system_fingerprint ---------------------------------------------------------------------


def fingerprint(original: str) -> str:
    """An opaque value for a backend's fingerprint: equal for equal inputs, reveals nothing."""
    digest = hmac.new(_FINGERPRINT_KEY, original.encode(), hashlib.sha256).hexdigest()
    return f"fp_{digest[:16]}"


def _field(value: str) -> bytes:
    return b'"system_fingerprint": ' + json.dumps(value).encode()


@functools.lru_cache(maxsize=64)
def fingerprint_swap(original: str) -> tuple[bytes, bytes]:
    """(the field as mlx_lm writes it, the same field with the opaque value)."""
    return _field(original), _field(fingerprint(original))


def scrub_fingerprint(data: bytes) -> bytes:
    """Replace any system_fingerprint value (for a backend whose own value is not known)."""
    return _FINGERPRINT_FIELD.sub(_field(fingerprint("")), data)


Rewrite = Callable[[bytes], bytes]


def rewriter(*, pinned: str, served: str, original_fingerprint: str | None) -> Rewrite:
    """Per-request rewrite of answer bytes: the backend's model path becomes the served name and
    the fingerprint becomes opaque (both plain `bytes.replace` when the fingerprint is known)."""
    model_old = b'"model": ' + json.dumps(pinned).encode()
    model_new = b'"model": ' + json.dumps(served).encode()
    if original_fingerprint is None:
        return lambda data: scrub_fingerprint(data.replace(model_old, model_new))
    fp_old, fp_new = fingerprint_swap(original_fingerprint)
    return lambda data: data.replace(model_old, model_new).replace(fp_old, fp_new)


# ---- errors -----------------------------------------------------------------------------------


MLX_LM_THREAD_DIED = "generation thread died"  # mlx_lm's words once its one generation thread died


def backend_error(
    status: int, raw: bytes, *, pinned: str, served: str, mlx_lm: bool = False
) -> RouteError:
    """A backend's error answer, OpenAI-shaped.

    mlx_lm (`mlx_lm=True`) answers 404 for any exception while it handles a completion, with the
    exception's text: that is the client's bad request (400, the text kept: it names the
    problem), or, when its generation thread died, a backend out of service until the agent
    restarts it (503, retryable: the gateway tries another replica). Other answers keep their
    status."""
    message, type_, param, code = "", None, None, None
    try:
        parsed: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or "")
        type_ = error.get("type") if isinstance(error.get("type"), str) else None
        param = error.get("param") if isinstance(error.get("param"), str) else None
        code = error.get("code") if isinstance(error.get("code"), str) else None
    elif isinstance(error, str):
        message = error
    else:
        message = raw.decode("utf-8", "replace").strip()
    message = message.replace(pinned, served)[:MAX_ERROR_MESSAGE] or f"backend answered {status}"
    if mlx_lm and status == 404:
        if MLX_LM_THREAD_DIED in message:
            return RouteError(
                503,
                "the model's backend failed (mlx_lm: generation thread died) and is being "
                "restarted; retry the request",
                type_="server_error",
                code="backend_unhealthy",
                headers=RETRY_AFTER,
            )
        return RouteError(400, message, code=code or "invalid_request", param=param)
    kind = type_ or ("server_error" if status >= 500 else "invalid_request_error")
    return RouteError(status, message, type_=kind, code=code, param=param)


# ---- whole answers from a stream ---------------------------------------------------------------


def wants_logprobs(body: dict[str, Any]) -> bool:
    """mlx_lm's stream has no logprobs: such requests are generated whole by the backend."""
    top = body.get("top_logprobs")
    return bool(body.get("logprobs")) or (isinstance(top, int) and top > 0)


class Assembler:
    """Feed it a backend's SSE bytes in any pieces; `result()` is the whole answer."""

    def __init__(self, *, chat: bool) -> None:
        self.chat = chat
        self.done = False
        self.events = 0  # events with a choice (the first one is the first token)
        self._pending = b""
        self._head: dict[str, Any] = {}
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._tool_calls: list[Any] = []
        self._finish: Any = None
        self._usage: dict[str, Any] | None = None

    def feed(self, raw: bytes) -> None:
        self._pending += raw
        *complete, self._pending = self._pending.split(b"\n\n")
        for event in complete:
            self._event(event.strip())

    @property
    def prompt_tokens(self) -> int:
        return _count(self._usage, "prompt_tokens", 0)

    @property
    def completion_tokens(self) -> int:
        return _count(self._usage, "completion_tokens", self.events)

    def _event(self, event: bytes) -> None:
        if not event.startswith(b"data: "):
            return  # `: keepalive` comments while the prompt is processed
        data = event[6:]
        if data == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        if not self._head:
            self._head = {k: obj[k] for k in ("id", "created") if k in obj}
        if isinstance(obj.get("usage"), dict):
            self._usage = obj["usage"]
        choices = obj.get("choices")
        if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
            return
        choice = choices[0]
        self.events += 1
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
        if not self.chat:
            _append(self._text, choice.get("text"))
            return
        delta = choice.get("delta")
        if isinstance(delta, dict):
            _append(self._text, delta.get("content"))
            _append(self._reasoning, delta.get("reasoning"))
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                self._tool_calls += [
                    {k: v for k, v in c.items() if k != "index"} if isinstance(c, dict) else c
                    for c in calls
                ]

    def result(self, *, served: str, fingerprint: str) -> bytes:
        choice: dict[str, Any] = {"index": 0, "finish_reason": self._finish}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
            if self._reasoning:
                message["reasoning"] = "".join(self._reasoning)
            if self._tool_calls:
                message["tool_calls"] = self._tool_calls
            choice["message"] = message
        else:
            choice["text"] = "".join(self._text)
        answer = {
            "id": self._head.get("id", ""),
            "system_fingerprint": fingerprint,
            "object": "chat.completion" if self.chat else "text_completion",
            "model": served,
            "created": self._head.get("created", 0),
            "choices": [choice],
            "usage": self._usage
            or {
                "prompt_tokens": 0,
                "completion_tokens": self.events,
                "total_tokens": self.events,
            },
        }
        return json.dumps(answer).encode()


def _append(parts: list[str], value: Any) -> None:
    if isinstance(value, str) and value:
        parts.append(value)


def _count(usage: dict[str, Any] | None, key: str, default: int) -> int:
    value = (usage or {}).get(key)
    return value if isinstance(value, int) else default
