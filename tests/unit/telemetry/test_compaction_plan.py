"""Compaction decisions (pure): which days a scheduled run visits, which raw objects it reads
and which it may delete."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.adapters import objectstore
from mlxfleet_operator.reports import compaction

PREFIX = "acme/telemetry"
START = datetime(2026, 10, 14, 5, tzinfo=UTC)
THEN = datetime(2026, 10, 15, 1, tzinfo=UTC)


def obj(node: str, start: datetime, modified: datetime = THEN) -> objectstore.ObjectInfo:
    return objectstore.ObjectInfo(contract.telemetry_key(PREFIX, node, start), 100, modified)


def test_scheduled_window_covers_late_days_and_the_retention_edge() -> None:
    today = date(2026, 11, 26)
    plain = compaction.window(today, days=2, options=compaction.Options())
    assert plain == [date(2026, 11, 24), date(2026, 11, 25)]
    deleting = compaction.window(
        today, days=2, options=compaction.Options(delete_raw=True, retention_days=35)
    )
    assert deleting == [date(2026, 10, 20), date(2026, 10, 21), *plain]


def test_a_day_is_past_retention_once_it_ended_that_long_ago() -> None:
    day = date(2026, 10, 21)  # ends 22 Oct 00:00; + 35 days = 26 Nov 00:00
    edge = datetime(2026, 11, 26, tzinfo=UTC)
    assert not compaction.past_retention(day, now=edge - timedelta(seconds=1), retention_days=35)
    assert compaction.past_retention(day, now=edge, retention_days=35)


def test_raw_keys_name_their_interval_only_in_the_agents_layout() -> None:
    assert compaction.named_interval(obj("mini-1", START).key, PREFIX) == ("mini-1", START)
    assert compaction.named_interval(obj("mini-1", START).key, "other") is None
    assert compaction.named_interval(f"{PREFIX}/v1/date=2026-10-14/odd.jsonl", PREFIX) is None


def test_only_objects_the_day_object_lacks_or_that_changed_are_read() -> None:
    held = {("mini-1", START)}
    kept, changed, late = (
        obj("mini-1", START),
        obj("mini-1", START, THEN + timedelta(hours=2)),
        obj("mini-2", START),
    )
    fetch = compaction.to_fetch([kept, late], held=held, watermark=THEN, prefix=PREFIX)
    assert fetch == [late]
    assert compaction.to_fetch([changed], held=held, watermark=THEN, prefix=PREFIX) == [changed]
    assert compaction.to_fetch([kept], held=held, watermark=None, prefix=PREFIX) == [kept]


def test_only_objects_whose_intervals_are_held_are_deletable() -> None:
    held = {("mini-1", START), ("mini-2", START)}
    a, b, c = obj("mini-1", START), obj("mini-2", START), obj("mini-3", START)
    read = {b.key: {("mini-2", START)}, c.key: set()}  # c: nothing readable in it
    assert compaction.deletable([a, b, c], held=held, read=read, prefix=PREFIX) == [a.key, b.key]
    odd = objectstore.ObjectInfo(f"{PREFIX}/v1/date=2026-10-14/odd.jsonl", 1, THEN)
    assert compaction.deletable([odd], held=held, read={}, prefix=PREFIX) == []
