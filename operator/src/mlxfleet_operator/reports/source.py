"""A report's days from the telemetry bucket: the compacted day when there is one, else the
day's raw per-interval objects put in the same columnar form.

Compacted days live next to the raw objects, one Parquet object per day named by the hash of its
content (written by `reports.compaction`):

    <prefix>/v1/daily/date=YYYY-MM-DD/<sha256 of the object>.parquet

A day with two such objects (two compactions that ran at once, before the next run joins them)
reads as their union. One LIST per month finds the compacted days; each then costs one GET,
where the raw objects cost one GET per node and interval (720,000 a day for 500 nodes).
May import: the standard library, `mlxfleet_agent.contract`, adapters.objectstore,
reports.columnar. Called by: reports.cli, reports.compaction.
"""

from __future__ import annotations

import logging
import re
from datetime import date, datetime

import pyarrow as pa

from mlxfleet_agent import contract
from mlxfleet_operator.adapters import objectstore
from mlxfleet_operator.reports import columnar

log = logging.getLogger("mlxfleet_operator.reports")
DAILY = "daily"
WATERMARK = "raw-last-modified"  # user metadata: newest raw object the day object includes
CONTENT_TYPE = "application/vnd.apache.parquet"
_DAILY_KEY = re.compile(r"/date=(\d{4}-\d{2}-\d{2})/([0-9a-f]{64})\.parquet$")


def daily_prefix(prefix: str, day_text: str) -> str:
    """`<prefix>/v1/daily/date=<day_text>`: a whole day (`YYYY-MM-DD/`) or a month (`YYYY-MM-`)."""
    head = prefix.strip("/")
    return "/".join([*([head] if head else []), contract.TELEMETRY_KEY_LAYOUT, DAILY, ""]) + (
        f"date={day_text}"
    )


def daily_key(prefix: str, day: date, digest: str) -> str:
    return f"{daily_prefix(prefix, day.isoformat())}/{digest}.parquet"


def daily_day(key: str) -> date | None:
    found = _DAILY_KEY.search(key)
    return date.fromisoformat(found.group(1)) if found else None


def watermark_of(metadata: dict[str, str]) -> datetime | None:
    text = metadata.get(WATERMARK)
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


class BucketSource:
    """`summary.TelemetrySource` over the bucket; also what the compactor reads parts with."""

    def __init__(self, store: objectstore.TelemetryStore) -> None:
        self.store = store
        self._months: dict[str, dict[date, list[objectstore.ObjectInfo]]] = {}

    def parts(self, day: date, *, fresh: bool = False) -> list[objectstore.ObjectInfo]:
        """The compacted objects of a day (listed once per month unless `fresh`)."""
        if fresh:
            found = self.store.list_objects(daily_prefix(self.store.config.prefix, f"{day}/"))
            return sorted((o for o in found if daily_day(o.key) == day), key=lambda o: o.key)
        month = f"{day:%Y-%m}-"
        if month not in self._months:
            by_day: dict[date, list[objectstore.ObjectInfo]] = {}
            for o in self.store.list_objects(daily_prefix(self.store.config.prefix, month)):
                d = daily_day(o.key)
                if d is not None:
                    by_day.setdefault(d, []).append(o)
            self._months[month] = {d: sorted(v, key=lambda o: o.key) for d, v in by_day.items()}
        return self._months[month].get(day, [])

    def read_parts(
        self, parts: list[objectstore.ObjectInfo]
    ) -> tuple[list[bytes], datetime | None]:
        """The parts' bytes (each checked to be a day object) and their newest watermark."""
        bodies: list[bytes] = []
        marks: list[datetime] = []
        for part in parts:
            data, metadata = self.store.get_object(part.key)
            try:
                columnar.check(data)
            except columnar.ColumnarError as exc:
                raise columnar.ColumnarError(
                    f"s3://{self.store.config.bucket}/{part.key}: {exc}"
                ) from exc
            bodies.append(data)
            mark = watermark_of(metadata)
            if mark is not None:
                marks.append(mark)
        return bodies, max(marks, default=None)

    def day_parquet(self, day: date) -> bytes | None:
        parts = self.parts(day)
        if parts:
            bodies, _ = self.read_parts(parts)
            if len(bodies) == 1:
                return bodies[0]
            return columnar.encode(columnar.union([columnar.decode(b) for b in bodies]))
        intervals = self.store.intervals_for_day(day)
        if not intervals:
            return None
        return columnar.encode(columnar.to_table(intervals))

    def raw_table(self, keys: list[str]) -> pa.Table:
        return columnar.to_table(self.store.read_intervals(keys))
