"""Token counts of an answer the data plane relays: ask the backend for a usage event, and split
a server-sent-event stream into whole events while counting its tokens.

Pure (no I/O). May import: the standard library. Called by: dataplane.relay.
"""

from __future__ import annotations

import json
import re
from typing import Any

_USAGE_EVENT = re.compile(rb'^data: (\{.*"choices": ?\[\].*"usage": ?\{.*\})\s*$', re.S)


def ask_for_usage(body: dict[str, Any]) -> bool:
    """Make a streamed request ask the backend for a usage event; return whether the client did.

    mlx_lm then sends one extra event (`"choices": []`, `"usage": {...}`) before `[DONE]`:
    the agent counts tokens from it and forwards it only when the client asked for it.
    """
    options = body.get("stream_options")
    asked = isinstance(options, dict) and bool(options.get("include_usage"))
    body["stream_options"] = {
        **(options if isinstance(options, dict) else {}),
        "include_usage": True,
    }
    return asked


class StreamCounter:
    """Splits a server-sent-event stream into whole events and counts its tokens.

    `feed(raw)` returns the bytes to forward now (whole events only; the usage event is held
    back unless `forward_usage`); `flush()` returns whatever is left at the end. Token counts
    come from the backend's usage event, else completion tokens = content events - 1.
    """

    def __init__(self, *, forward_usage: bool) -> None:
        self.forward_usage = forward_usage
        self.prompt_tokens = 0
        self._usage_completion: int | None = None
        self._events = 0
        self._pending = b""

    def feed(self, raw: bytes) -> bytes:
        self._pending += raw
        *complete, self._pending = self._pending.split(b"\n\n")
        out = []
        for event in complete:
            if self._is_usage(event) and not self.forward_usage:
                continue
            out.append(event + b"\n\n")
        return b"".join(out)

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rest

    @property
    def completion_tokens(self) -> int:
        if self._usage_completion is not None:
            return self._usage_completion
        return max(0, self._events - 1)

    def _is_usage(self, event: bytes) -> bool:
        if not event.startswith(b"data: {"):
            return False
        match = _USAGE_EVENT.match(event)
        if match is None:
            self._events += 1
            return False
        try:
            usage = json.loads(match.group(1))["usage"]
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            self._usage_completion = int(usage.get("completion_tokens") or 0)
        except (ValueError, KeyError, TypeError):
            self._events += 1
            return False
        return True
