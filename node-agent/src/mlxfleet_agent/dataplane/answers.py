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


@functools.lru_cache(maxsize=64)
def fingerprint(original: str) -> str:
    """An opaque value for a backend's fingerprint: equal for equal inputs, reveals nothing
    (one HMAC per backend's value, not per request: cached)."""
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
    return _FINGERPRINT_FIELD.sub(fingerprint_swap("")[1], data)


Rewrite = Callable[[bytes], bytes]


@functools.lru_cache(maxsize=64)
def rewriter(*, pinned: str, served: str, original_fingerprint: str | None) -> Rewrite:
    """The rewrite of a backend's answer bytes: its model path becomes the served name and the
    fingerprint becomes opaque (both plain `bytes.replace` when the fingerprint is known). Made
    once per backend (cached: the function keeps no state), not per request."""
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
        self._stop_reason: Any = None  # the stop string that ended it (the Stopper's)
        self._usage: dict[str, Any] | None = None

    def feed(self, raw: bytes) -> None:
        self._pending += raw
        *complete, self._pending = self._pending.split(b"\n\n")
        for event in complete:
            self._event(event.strip())

    @property
    def prompt_tokens(self) -> int:
        return _count(self._usage, "prompt_tokens", 0)

    def stopped(self, *, prompt_tokens: int, events: int) -> None:
        """The agent ended the generation at a stop string (no usage event, no [DONE] came)."""
        self.done = True
        self._usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": events,
            "total_tokens": prompt_tokens + events,
        }

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
            self._stop_reason = choice.get("stop_reason")
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
        if self._stop_reason is not None:
            choice["stop_reason"] = self._stop_reason
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


# ---- stop strings -------------------------------------------------------------------------------


def take_stop(body: dict[str, Any]) -> tuple[str, ...]:
    """Remove `stop` from a body bound for mlx_lm and return its strings (after `openai_body`
    checked the shape). mlx_lm stops only when the tokens it generates spell a stop string the
    way the tokenizer would encode it alone; any other occurrence it cuts out of the text and
    generates on (a stop string "blanked"). OpenAI's API stops at the first occurrence: the
    agent does that itself (`Stopper`)."""
    stop = body.pop("stop", None)
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list):
        return tuple(s for s in stop if isinstance(s, str) and s)
    return ()


class Stopper:
    """Ends a stream at the first stop string, as OpenAI's API does: text before it is passed
    on, the stop string and everything after it never are, and the last event says
    `finish_reason: "stop"`. Text that may be the start of a stop string is held back until the
    next event tells; that last event names the stop string in `stop_reason` (vLLM's field, which
    the gateway's Anthropic translation reports as `stop_sequence`). Fed whole SSE events (what
    `StreamScanner.feed` returns); events without
    text (role, usage, [DONE], keep-alive comments) pass as they are. Only requests with `stop`
    pay for it (one JSON parse per event)."""

    def __init__(self, stops: tuple[str, ...], *, chat: bool) -> None:
        self.stops = stops
        self.chat = chat
        self.stopped = False
        self.events = 0  # generated events seen (each one token of mlx_lm's)
        self._held = ""
        self._longest = max(len(s) for s in stops) - 1
        self._last: dict[str, Any] = {}

    def feed(self, chunk: bytes) -> bytes:
        if self.stopped:
            return b""
        out: list[bytes] = []
        for event in chunk.split(b"\n\n"):
            if not event:
                continue
            obj = _data(event)
            choice = _choice(obj)
            if obj is None or choice is None:
                out.append(event + b"\n\n")
                continue
            self.events += 1
            self._last = obj
            text = self._held + (_text(choice, chat=self.chat) or "")
            self._held = ""
            cut, stop = _first_stop(text, self.stops)
            if cut >= 0:
                self.stopped = True
                _set_text(choice, text[:cut], chat=self.chat)
                choice["finish_reason"] = "stop"
                choice["stop_reason"] = stop
                out.append(_event(obj))
                break
            if choice.get("finish_reason") is None:
                keep = _partial(text, self.stops, self._longest)
                text, self._held = text[: len(text) - keep], text[len(text) - keep :]
            if text or choice.get("finish_reason") is not None or _has_more(choice, self.chat):
                _set_text(choice, text, chat=self.chat)
                out.append(_event(obj))
        return b"".join(out)

    def usage_event(self, *, prompt_tokens: int) -> bytes:
        """The usage-only event of a stream the agent stopped (the backend's never came)."""
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": self.events,
            "total_tokens": prompt_tokens + self.events,
        }
        keys = ("id", "system_fingerprint", "object", "model", "created")
        head: dict[str, Any] = {k: self._last[k] for k in keys if k in self._last}
        return _event({**head, "choices": [], "usage": usage})


def stop_whole(body: bytes, stops: tuple[str, ...], *, chat: bool) -> bytes:
    """A whole answer (generated whole: a request for logprobs) cut at its first stop string."""
    try:
        obj = json.loads(body)
    except ValueError:
        return body
    choice = _choice(obj)
    text = _text(choice, chat=chat) if choice is not None else None
    if choice is None or text is None:
        return body
    cut, stop = _first_stop(text, stops)
    if cut < 0:
        return body
    _set_text(choice, text[:cut], chat=chat)
    choice["finish_reason"] = "stop"
    choice["stop_reason"] = stop
    return json.dumps(obj).encode()


def _first_stop(text: str, stops: tuple[str, ...]) -> tuple[int, str]:
    """(where the first stop string in `text` begins, which one), or (-1, "")."""
    found = [(i, s) for s in stops if (i := text.find(s)) >= 0]
    return min(found, key=lambda f: f[0]) if found else (-1, "")


def _data(event: bytes) -> dict[str, Any] | None:
    if not event.startswith(b"data: {"):
        return None
    try:
        obj = json.loads(event[6:])
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _choice(obj: Any) -> dict[str, Any] | None:
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _text(choice: dict[str, Any], *, chat: bool) -> str | None:
    where = choice.get("delta", choice.get("message")) if chat else choice
    value = where.get("content" if chat else "text") if isinstance(where, dict) else None
    return value if isinstance(value, str) else None


def _set_text(choice: dict[str, Any], text: str, *, chat: bool) -> None:
    if not chat:
        choice["text"] = text
        return
    where = choice.get("delta", choice.get("message"))
    if isinstance(where, dict):
        if text or "message" in choice:
            where["content"] = text or None if "message" in choice else text
        else:
            where.pop("content", None)


def _has_more(choice: dict[str, Any], chat: bool) -> bool:
    """The event says something besides its text (reasoning, tool calls)."""
    delta = choice.get("delta")
    return chat and isinstance(delta, dict) and bool(set(delta) - {"role", "content"})


def _partial(text: str, stops: tuple[str, ...], longest: int) -> int:
    """How many characters at the end of `text` may begin a stop string."""
    for keep in range(min(longest, len(text)), 0, -1):
        tail = text[-keep:]
        if any(s.startswith(tail) for s in stops):
            return keep
    return 0


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"
