"""Compaction: each UTC day's per-interval telemetry objects rolled into one Parquet object.

For every day it processes, a run joins the day's compacted objects (if any) with the raw
objects they lack (new, late or changed since: newer than the day object's watermark), writes
the union under a key named by the hash of its bytes, reads it back and compares byte for byte,
and only then deletes what the verified object now holds: superseded compacted objects of the
day and, with `delete_raw`, raw objects of days older than the retention.

Safe to rerun: a run that finds nothing new writes nothing. Safe to run twice at once: two runs
that saw the same objects write the same bytes to the same key; when one saw a late object the
other missed, both day objects stay (readers take their union) until the next run joins them. A
run deletes only objects it listed itself and that the object it verified contains, so neither
run deletes what the other one wrote, and no interval is ever only in a deleted object. A raw
object with any line that cannot be read (cut off, malformed, a newer schema) is never deleted:
its readable intervals are compacted, the object stays for a reader that can read the rest.
May import: the standard library, `mlxfleet_agent.contract`, adapters.objectstore,
reports.columnar, reports.source. Called by: reports.cli (`mlxfleet report compact`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa

from mlxfleet_agent import contract
from mlxfleet_operator.adapters import objectstore
from mlxfleet_operator.reports import columnar, source

log = logging.getLogger("mlxfleet_operator.reports.compaction")
ATTEMPTS = 3
CHUNK = 20_000  # raw objects read and converted at once
_RAW_KEY = re.compile(r"/node=([^/]+)/(\d{8}T\d{6}Z)\.jsonl$")
Interval = tuple[str, datetime]  # (node, interval start in UTC)


@dataclass(frozen=True, slots=True)
class Options:
    delete_raw: bool = False
    retention_days: int = 35


@dataclass(frozen=True, slots=True)
class DayResult:
    day: date
    raw_objects: int
    fetched: int  # raw objects read this run (not yet in the day object, or changed)
    intervals: int  # in the day object after the run
    key: str | None  # the day object after the run; None: no telemetry that day
    written: bool
    superseded: int  # older day objects deleted
    raw_deleted: int

    def line(self) -> str:
        if self.key is None:
            return f"{self.day}: no telemetry"
        what = "written" if self.written else "unchanged"
        return (
            f"{self.day}: {self.intervals} intervals in {self.key} ({what}); "
            f"{self.raw_objects} raw objects, {self.fetched} read, {self.raw_deleted} deleted; "
            f"{self.superseded} older day objects removed"
        )


# ---- decisions (pure) ------------------------------------------------------------------------


def window(today: date, *, days: int, options: Options) -> list[date]:
    """The days a scheduled run looks at: the last `days` complete days (late telemetry is
    joined in) and, when deleting, the `days` that just passed the retention."""
    picked = {today - timedelta(days=i) for i in range(1, days + 1)}
    if options.delete_raw:
        edge = today - timedelta(days=options.retention_days + 1)
        picked |= {edge - timedelta(days=i) for i in range(days)}
    return sorted(picked)


def past_retention(day: date, *, now: datetime, retention_days: int) -> bool:
    """True once the day ended more than `retention_days` ago."""
    end = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    return now >= end + timedelta(days=retention_days)


def named_interval(key: str, prefix: str) -> Interval | None:
    """The (node, start) a raw key is named for, when it follows the agent's key layout."""
    found = _RAW_KEY.search(key)
    if not found:
        return None
    start = datetime.strptime(found.group(2), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    try:
        if contract.telemetry_key(prefix, found.group(1), start) != key:
            return None
    except ValueError:
        return None
    return found.group(1), start


def to_fetch(
    raw: Sequence[objectstore.ObjectInfo],
    *,
    held: set[Interval],
    watermark: datetime | None,
    prefix: str,
) -> list[objectstore.ObjectInfo]:
    """Raw objects the day object lacks: not held by name, or written after its watermark."""
    out = []
    for o in raw:
        named = named_interval(o.key, prefix)
        if named is None or named not in held or watermark is None or o.last_modified > watermark:
            out.append(o)
    return out


def deletable(
    raw: Sequence[objectstore.ObjectInfo],
    *,
    held: set[Interval],
    read: dict[str, set[Interval]],
    prefix: str,
) -> list[str]:
    """Raw keys whose intervals the verified day object holds. `read`: the intervals found in
    each object read this run, empty for an object with a line that could not be read (kept)."""
    out = []
    for o in raw:
        if o.key in read:
            found = read[o.key]
            if found and found <= held:
                out.append(o.key)
            continue
        named = named_interval(o.key, prefix)
        if named is not None and named in held:
            out.append(o.key)
    return out


# ---- a run -----------------------------------------------------------------------------------


class CompactionError(RuntimeError):
    """A day could not be compacted (the message names the day and the cause)."""


def compact(
    src: source.BucketSource, days: Iterable[date], *, now: datetime, options: Options
) -> list[DayResult]:
    return [compact_day(src, day, now=now, options=options) for day in days]


def compact_day(
    src: source.BucketSource, day: date, *, now: datetime, options: Options
) -> DayResult:
    last: Exception | None = None
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _compact_day(src, day, now=now, options=options)
        except (objectstore.ObjectStoreError, _Superseded) as exc:
            last = exc
            log.warning("compacting %s, attempt %d: %s", day, attempt, exc)
    raise CompactionError(f"{day}: {last}")


class _Superseded(Exception):
    """The object just written was replaced meanwhile (a concurrent run): start the day over."""


def _compact_day(
    src: source.BucketSource, day: date, *, now: datetime, options: Options
) -> DayResult:
    store, prefix = src.store, src.store.config.prefix
    parts = src.parts(day, fresh=True)
    bodies, watermark = src.read_parts(parts)
    existing = [columnar.decode(b) for b in bodies]
    held: set[Interval] = set()
    for table in existing:
        held |= columnar.interval_keys(table)
    raw = store.raw_objects(day)
    lacking = to_fetch(raw, held=held, watermark=watermark, prefix=prefix)
    deleting = options.delete_raw and past_retention(
        day, now=now, retention_days=options.retention_days
    )
    # before raw objects go, each is read again: only one read whole (every line) may be deleted
    fetch = list(raw) if deleting else lacking
    fresh, read = _read_raw(store, fetch, add={o.key for o in lacking})
    tables: list[pa.Table] = [*existing, *fresh]
    if not tables:
        return DayResult(day, len(raw), len(fetch), 0, None, False, 0, 0)
    table = columnar.union(tables)
    data = columnar.encode(table)
    key = source.daily_key(prefix, day, columnar.digest(data))
    marks = [m for m in (watermark, *(o.last_modified for o in lacking)) if m is not None]
    mark = max(marks, default=None)
    written = [p.key for p in parts] != [key] or mark != watermark
    if written:
        metadata = {source.WATERMARK: mark.isoformat()} if mark is not None else {}
        store.put_object(key, data, content_type=source.CONTENT_TYPE, metadata=metadata)
        try:
            again, _ = store.get_object(key)
        except objectstore.ObjectStoreError as exc:
            raise _Superseded(f"{key} is gone after writing it: {exc}") from exc
        if again != data:
            raise CompactionError(f"{day}: {key} reads back different bytes than were written")
    held = columnar.interval_keys(table)
    old = [p.key for p in parts if p.key != key]
    if old:
        store.delete_objects(old)
    removed = 0
    if deleting:
        removed = store.delete_objects(deletable(raw, held=held, read=read, prefix=prefix))
    return DayResult(day, len(raw), len(fetch), len(held), key, written, len(old), removed)


def _read_raw(
    store: objectstore.TelemetryStore, fetch: Sequence[objectstore.ObjectInfo], *, add: set[str]
) -> tuple[list[pa.Table], dict[str, set[Interval]]]:
    """Read raw objects in chunks: tables of the intervals in the objects named in `add`, and
    the intervals found in each object read (empty when a line of it could not be read)."""
    tables: list[pa.Table] = []
    read: dict[str, set[Interval]] = {}
    for i in range(0, len(fetch), CHUNK):  # bounded memory: a day of 500 nodes is 720,000
        chunk = fetch[i : i + CHUNK]
        fresh: list[contract.TelemetryInterval] = []
        for o, body in zip(chunk, store.get_many([o.key for o in chunk]), strict=True):
            found = store.parse(o.key, body)
            lines = body.decode(errors="replace").splitlines()
            whole = len(found) == sum(1 for line in lines if line.strip())
            read[o.key] = (
                {(iv.node, iv.interval_start.astimezone(UTC)) for iv in found} if whole else set()
            )
            if o.key in add:
                fresh += found
        if fresh:
            tables.append(columnar.to_table(fresh))
    return tables, read
