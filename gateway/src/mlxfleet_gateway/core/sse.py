"""Usage in answers: token counts of whole bodies, and of server-sent-event streams in passing.

The gateway forwards stream bytes as they come; `StreamScanner.feed(chunk)` returns what to send
now and does the least work that counting needs: a chunk that ends on an event boundary and holds
no usage object is returned as it is (two `bytes` searches); only the rare chunk with a usage
event is split into events, and that event is held back when the client did not ask for it
(`stream_options.include_usage`: the gateway always asks upstream, so it can count). A chunk that
ends inside an event keeps the partial event until the rest arrives. Completion tokens come from
the usage event, else from the number of content events.
May import: the standard library. Called by: the proxy.
"""

from __future__ import annotations

import json
import re
from typing import Any

EVENT_END = b"\n\n"
DATA = b"data:"
DONE = b"data: [DONE]"
_USAGE_OBJECT = re.compile(rb'"usage"\s*:\s*\{')


def usage_of(body: bytes) -> tuple[int, int] | None:
    """(prompt, completion) tokens of a whole JSON answer, if it says."""
    try:
        usage = json.loads(body).get("usage")
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return None


def _event_usage(event: bytes) -> dict[str, Any] | None:
    """The usage object of one `data: {...}` event, if it carries one."""
    start = event.find(b"{")
    if start < 0:
        return None
    try:
        obj = json.loads(event[start:])
    except ValueError:
        return None
    usage = obj.get("usage") if isinstance(obj, dict) else None
    return usage if isinstance(usage, dict) else None


class StreamScanner:
    """Counts a stream's tokens while it passes through; strips the usage event on request."""

    __slots__ = (
        "_pending",
        "data_events",
        "done",
        "forward_usage",
        "prompt_tokens",
        "usage_completion",
    )

    def __init__(self, *, forward_usage: bool) -> None:
        self.forward_usage = forward_usage
        self.prompt_tokens = 0
        self.usage_completion: int | None = None
        self.data_events = 0  # `data:` events seen (content, usage and [DONE] alike)
        self.done = False  # saw `data: [DONE]`
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        """Bytes to forward now (whole events)."""
        if self._pending:
            chunk = self._pending + chunk
            self._pending = b""
        if not chunk.endswith(EVENT_END):
            cut = chunk.rfind(EVENT_END)
            if cut < 0:
                self._pending = chunk
                return b""
            chunk, self._pending = chunk[: cut + 2], chunk[cut + 2 :]
        self.data_events += chunk.count(DATA)
        if not self.done and DONE in chunk:
            self.done = True
        if _USAGE_OBJECT.search(chunk) is None:
            return chunk
        return self._usage(chunk)

    def _usage(self, chunk: bytes) -> bytes:
        out = []
        for event in chunk.split(EVENT_END)[:-1]:
            usage = _event_usage(event) if _USAGE_OBJECT.search(event) else None
            if usage is not None:
                try:
                    self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                    self.usage_completion = int(usage.get("completion_tokens") or 0)
                except (TypeError, ValueError):
                    usage = None
            is_usage_only = usage is not None and b'"choices": []' in event.replace(
                b'"choices":[]', b'"choices": []'
            )
            if is_usage_only and not self.forward_usage:
                continue
            out.append(event + EVENT_END)
        return b"".join(out)

    def flush(self) -> bytes:
        """What is left at the end (an unterminated last event)."""
        rest, self._pending = self._pending, b""
        return rest

    @property
    def completion_tokens(self) -> int:
        if self.usage_completion is not None:
            return self.usage_completion
        return max(0, self.data_events - (2 if self.done else 1))

    @property
    def started(self) -> bool:
        return self.data_events > 0
