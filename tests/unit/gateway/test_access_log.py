"""The access log's line (docs/gateway.md, "Access log"): written without a `LogRecord` when the
gateway's own JSON handler alone writes it, the same line as `logging` would write; any other
logging setup (a test capturing records) still gets it through `logging`."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

from mlxfleet_gateway import logline, metering

FIELDS: dict[str, Any] = {
    "key": "team-a",
    "team": None,
    "endpoint": "chat/completions",
    "model": "chat",
    "stream": False,
    "status": 200,
    "outcome": "ok",
    "error": None,
    "backend": "ns/chat",
    "served_by": "ns/chat/0",
    "attempts": 0,
    "ttfb_ms": 1.5,
    "duration_ms": 2.0,
    "prompt_tokens": 12,
    "completion_tokens": 1,
}
TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}$")


@contextlib.contextmanager
def configured() -> Iterator[io.StringIO]:
    """The root logger as `server.configure_logging` sets it, on a buffer; restored after
    (entered in the test itself: pytest adds its capturing handlers to the root per phase)."""
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    out = io.StringIO()
    root.handlers[:] = [logline.JsonHandler(out)]
    root.setLevel(logging.INFO)
    try:
        yield out
    finally:
        root.handlers[:] = saved
        root.setLevel(level)


def lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_direct_line_is_the_line_logging_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    with configured() as stdout:
        assert logline.sole_handler(metering.access, logging.INFO) is not None
        made: list[Any] = []
        monkeypatch.setattr(logging.Logger, "makeRecord", lambda *a, **k: made.append(a))
        metering.write_access(dict(FIELDS))
        assert made == []  # no record was built
        monkeypatch.undo()
        metering.access.info("request", extra=dict(FIELDS))
    direct, through_logging = lines(stdout)
    assert list(direct) == list(through_logging)  # the same keys in the same order
    assert list(direct)[:4] == ["time", "level", "logger", "message"]
    assert TIME.match(direct["time"])
    assert TIME.match(through_logging["time"])
    del direct["time"], through_logging["time"]
    assert direct == through_logging
    assert direct["logger"] == "mlxfleet_gateway.access"
    assert direct["message"] == "request"


def test_a_refused_request_has_its_short_line() -> None:
    meter = metering.Meter(gauges=None, usage=None, clock=lambda: 0.0)  # type: ignore[arg-type]
    with configured() as stdout:
        meter.refused("/v1/chat/completions", 401, "invalid_api_key")
    (line,) = lines(stdout)
    del line["time"]
    assert line == {
        "level": "INFO",
        "logger": "mlxfleet_gateway.access",
        "message": "request",
        "key": None,
        "path": "/v1/chat/completions",
        "status": 401,
        "error": "invalid_api_key",
    }


def test_another_logging_setup_gets_records(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=metering.ACCESS)
    with configured() as stdout:
        logging.getLogger().addHandler(caplog.handler)  # a second handler beside the gateway's
        assert logline.sole_handler(metering.access, logging.INFO) is None
        metering.write_access(dict(FIELDS))
    assert lines(stdout)[0]["served_by"] == "ns/chat/0"  # the gateway's handler wrote it too
    (record,) = [r for r in caplog.records if r.name == metering.ACCESS]
    assert record.getMessage() == "request"
    assert record.__dict__["served_by"] == "ns/chat/0"


def test_the_access_log_off_writes_nothing() -> None:
    metering.access.setLevel(logging.WARNING)  # --no-access-log
    try:
        with configured() as stdout:
            metering.write_access(dict(FIELDS))
    finally:
        metering.access.setLevel(logging.NOTSET)
    assert stdout.getvalue() == ""
