"""The agent's recent log lines, kept in memory for `GET /v1/logs?tail=N` (`kubectl mlxfleet logs`).

A logging handler with a bounded ring of formatted lines (the same JSON lines as stdout). The agent
never logs request bodies (prompts, completions): only routes, sizes, timings and slot events, so
the tail carries no prompt text either (tests/e2e/test_plugin.py checks it with a marked prompt).
May import: the standard library. Called by: app (configure_logging installs it; the route).
"""

from __future__ import annotations

import collections
import logging
import threading

CAPACITY = 2000
MAX_TAIL = CAPACITY


class RingHandler(logging.Handler):
    """Keeps the last `capacity` formatted records."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        super().__init__()
        self._lines: collections.deque[str] = collections.deque(maxlen=capacity)
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        with self._guard:
            self._lines.append(line)

    def tail(self, count: int) -> list[str]:
        with self._guard:
            lines = list(self._lines)
        return lines[-count:] if count > 0 else []


RING = RingHandler()
