"""The gateway's log line: one JSON object per line, `time`, `level`, `logger`, `message`, then
the record's own fields (`extra`), in that order.

`JsonFormatter` formats every record so; `JsonHandler` (a `logging.StreamHandler` with that
formatter, the one `server.configure_logging` puts on stdout) can also write a line of that shape
from a logger name, a level, a message and the fields, without a `LogRecord`: building a record
(caller lookup, process and thread names) and formatting it cost more than all the rest of a
one-token answer's work in the gateway. `sole_handler(logger)` says when that is the same line the
logger would write: it and its ancestors have no handlers and no filters of their own, and the
root's only handler is a `JsonHandler` that takes the level (a test capturing records, or another
logging setup, gets the `LogRecord` path as before).
May import: the standard library. Called by: server (configures logging), metering (the access
log).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, TextIO


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any `extra` fields."""

    RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None)))

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(
            {k: v for k, v in vars(record).items() if k not in self.RESERVED and k != "message"}
        )
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class JsonHandler(logging.StreamHandler[TextIO]):
    """A stream handler of `JsonFormatter` lines that also writes such lines without a record."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.setFormatter(JsonFormatter())
        self._second = -1
        self._stamp = ""

    def write_line(self, logger: str, level: int, message: str, fields: dict[str, Any]) -> None:
        """The line `logger.log(level, message, extra=fields)` would write through this handler
        (the time as `logging.Formatter.formatTime` writes it: local time, milliseconds)."""
        now = time.time()
        second = int(now)
        if second != self._second:  # the date and time part changes once a second
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
            self._second = second
        out: dict[str, Any] = {
            "time": "%s,%03d" % (self._stamp, (now - second) * 1000),  # noqa: UP031 - as logging
            "level": logging.getLevelName(level),
            "logger": logger,
            "message": message,
        }
        out.update(fields)
        try:  # the fields are JSON's own types: the encoder json keeps made
            line = json.dumps(out) + self.terminator
        except TypeError:  # a value JSON has no type for: as its str(), as the formatter does
            line = json.dumps(out, default=str) + self.terminator
        self.acquire()
        try:
            self.stream.write(line)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stdout: as logging, never raise here
            pass
        finally:
            self.release()


def sole_handler(logger: logging.Logger, level: int) -> JsonHandler | None:
    """The `JsonHandler` that alone writes `logger`'s records at `level`, or None when anything
    else would see them (a handler or filter of its own or of an ancestor, another root
    handler)."""
    node: logging.Logger | None = logger
    while node is not None and node.parent is not None:  # up to the root, not including it
        if node.handlers or node.filters or not node.propagate:
            return None
        node = node.parent
    if node is None or node.filters or len(node.handlers) != 1:
        return None
    handler = node.handlers[0]
    if type(handler) is not JsonHandler or handler.filters or level < handler.level:
        return None
    return handler
