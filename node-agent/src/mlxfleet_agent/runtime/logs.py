"""The agent's logs: one JSON object per line on stdout (`ts`, `level`, `logger`, `msg` and the
record's extra fields such as `slot`, `swap`, `pid`, `port`). Request text is never logged.
The last `CAPACITY` lines are also kept in memory (`RING`) for the control API's `GET /v1/logs`
(`kubectl mlxfleet logs`); the tail carries no prompt text either (tests/e2e/test_plugin.py checks
it with a marked prompt).

May import: the standard library.
Called by: cli (`serve`), compose (hands `RING.tail` to the control API).
"""

from __future__ import annotations

import collections
import json
import logging
import sys
import threading
import time
from typing import Any

_STD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STD_ATTRS and not key.startswith("_") and key != "color_message":
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


CAPACITY = 2000


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


def configure(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    RING.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler, RING]
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
