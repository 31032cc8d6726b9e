"""Telemetry compaction against a real S3 server (SeaweedFS): reports from compacted days equal
reports from the raw objects, reruns change nothing, concurrent runs lose nothing, late
telemetry joins its day, and raw objects go only after their day object is verified."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from mlxfleet_agent import contract
from mlxfleet_operator.adapters import objectstore
from mlxfleet_operator.reports import (
    cli,
    compaction,
    config,
    fixture,
    monthly,
    render,
    source,
    summary,
)
from tests.support import s3 as s3support

pytestmark = pytest.mark.s3
PREFIX = "acme/telemetry"
CFG = config.ReportConfig.from_yaml(fixture.CONFIG_YAML)
OCTOBER = summary.month(2026, 10)
WEEK = summary.iso_week(2026, 42)  # 12-18 Oct: mini-2's failover, a swap on the 8th before
DAYS = OCTOBER.days
MODEL = fixture.LLAMA  # served in namespace team-chat
AFTER = datetime(2026, 12, 1, tzinfo=UTC)  # "now" for retention: October is 30+ days old


@dataclass
class Bucket:
    server: s3support.S3Server
    name: str

    def store(self) -> objectstore.TelemetryStore:
        return objectstore.TelemetryStore(
            objectstore.StoreConfig(
                bucket=self.name,
                prefix=PREFIX,
                endpoint_url=self.server.endpoint_url,
                region=self.server.region,
                access_key_id=self.server.access_key,
                secret_access_key=self.server.secret_key,
            )
        )

    def source(self) -> source.BucketSource:
        return source.BucketSource(self.store())

    def keys(self, under: str) -> list[str]:
        return [o.key for o in self.store().list_objects(f"{PREFIX}/v1/{under}")]

    def cli_flags(self) -> list[str]:
        return [
            "--bucket",
            self.name,
            "--prefix",
            PREFIX,
            "--endpoint-url",
            self.server.endpoint_url,
            "--region",
            self.server.region,
        ]


def fill(bucket: Bucket, *, first: date, last: date) -> None:
    store = bucket.store()
    for iv in fixture.intervals(interval_hours=6, first=first, last=last):
        store.put_interval(iv)


def fill_gateway(bucket: Bucket, days: Sequence[date]) -> None:
    """One gateway line a day (per-key usage: not a node), as the gateway ships them."""
    store = bucket.store()
    for i, day in enumerate(days):
        store.put_interval(
            contract.TelemetryInterval(
                component="gateway",
                node="gw-0",
                interval_start=datetime.combine(day, datetime.min.time(), tzinfo=UTC)
                + timedelta(hours=12),
                interval_seconds=3600.0,
                keys=[
                    contract.KeyTelemetry(
                        key="key-search",
                        team="search",
                        namespace="team-chat",
                        model=MODEL,
                        served=MODEL,
                        backend=f"team-chat/{MODEL}",
                        requests=10 + i,
                        prompt_tokens=1000 * (i + 1),
                        completion_tokens=500,
                    ),
                    contract.KeyTelemetry(
                        key="anonymous",
                        model="gpt-x",
                        backend="external:openai",
                        external=True,
                        requests=1,
                        prompt_tokens=7,
                    ),
                ],
            )
        )


@pytest.fixture
def bucket(s3_server: s3support.S3Server) -> Bucket:
    return Bucket(s3_server, s3_server.make_bucket())


@pytest.fixture
def week_bucket(bucket: Bucket) -> Bucket:
    fill(bucket, first=date(2026, 10, 12), last=date(2026, 10, 18))
    return bucket


def figures(src: summary.TelemetrySource, period: summary.Period) -> summary.PeriodSummary:
    return cli.summarise(src, period, CFG)


def run(src: source.BucketSource, days: list[date], **options: object) -> list[str]:
    opts = compaction.Options(**options)  # type: ignore[arg-type]
    return [compaction.compact_day(src, d, now=AFTER, options=opts).line() for d in days]


def test_reports_from_compacted_days_equal_reports_from_raw_objects(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the files say when they were made (to the minute): one clock for both, or a compaction
    # that crosses a minute makes them differ by that line alone
    monkeypatch.setattr(render, "_generated", lambda: "2026-11-02 07:00 UTC")
    fill(bucket, first=date(2026, 10, 1), last=date(2026, 10, 31))
    fill_gateway(bucket, DAYS)
    raw = bucket.source()
    raw_month = figures(raw, OCTOBER)
    # one GET per object: 30 days x 4 intervals x 3 nodes - mini-2's 8, and 31 gateway lines
    assert raw.store.calls["GetObject"] == 352 + 31
    assert len(raw_month.gateway) == 31
    assert "gw-0" not in raw_month.nodes  # a gateway replica is not a node
    raw_teams = {t.team: t for t in monthly.build(raw_month).teams}
    assert raw_teams["search"].prompt_tokens == 1000 * 31 * 32 // 2
    assert raw_teams["search"].cost_usd is not None  # priced at the model's own cost
    raw_weekly = cli.weekly_files(raw, WEEK, CFG)
    monkeypatch.setenv("MLXFLEET_TELEMETRY_ACCESS_KEY_ID", bucket.server.access_key)
    monkeypatch.setenv("MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY", bucket.server.secret_key)
    days = [f"--day={d}" for d in DAYS]
    assert cli.main(["compact", *days, *bucket.cli_flags()]) == 0
    assert len(bucket.keys("daily/")) == 31  # 27 Oct: only the gateway reported
    compacted = bucket.source()
    month = figures(compacted, OCTOBER)
    assert month == raw_month  # every figure, to the last bit
    assert render.monthly_html(monthly.build(month)) == render.monthly_html(
        monthly.build(raw_month)
    )
    assert cli.weekly_files(compacted, WEEK, CFG) == raw_weekly
    assert month.gateway == raw_month.gateway
    # one LIST finds the month's days, one GET each
    assert compacted.store.calls["GetObject"] == 31 + 14  # month, then the two weeks again
    assert month.tokens == 142_560_000


def test_rerun_writes_nothing_and_a_late_interval_joins_its_day(week_bucket: Bucket) -> None:
    src = week_bucket.source()
    day = date(2026, 10, 14)
    first = run(src, [day])
    (key,) = week_bucket.keys(f"daily/date={day}/")
    store = week_bucket.store()
    again = compaction.compact_day(
        source.BucketSource(store), day, now=AFTER, options=compaction.Options()
    )
    assert not again.written
    assert again.fetched == 0
    assert again.key == key
    assert store.calls["PutObject"] == 0
    assert store.calls["DeleteObjects"] == 0
    assert "(unchanged)" in again.line()
    assert "(written)" in first[0]
    late = next(fixture.intervals(interval_hours=6, first=day, last=day))
    late = late.model_copy(
        update={"node": "mini-9", "interval_start": late.interval_start + timedelta(hours=1)}
    )
    store.put_interval(late)
    period = summary.Period(day, day + timedelta(days=1), "one day")
    assert "mini-9" not in figures(week_bucket.source(), period).nodes  # until compacted
    result = run(week_bucket.source(), [day])
    (new_key,) = week_bucket.keys(f"daily/date={day}/")
    assert new_key != key
    assert "1 read" in result[0]
    assert "1 older day objects removed" in result[0]
    assert figures(week_bucket.source(), period).nodes["mini-9"].covered_seconds == 6 * 3600


def test_two_runs_at_once_lose_nothing(week_bucket: Bucket) -> None:
    days = WEEK.days
    raw = figures(week_bucket.source(), WEEK)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            run(week_bucket.source(), days, delete_raw=True, retention_days=30)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert figures(week_bucket.source(), WEEK) == raw
    assert week_bucket.keys("date=") == []  # every raw object was held by a verified object
    run(week_bucket.source(), days)  # joins any two objects of one day into one
    assert len(week_bucket.keys("daily/")) == 7
    assert figures(week_bucket.source(), WEEK) == raw


def test_raw_objects_go_only_past_the_retention_and_unreadable_ones_stay(
    week_bucket: Bucket,
) -> None:
    store = week_bucket.store()
    bad = contract.telemetry_key(PREFIX, "mini-1", datetime(2026, 10, 13, 5, tzinfo=UTC))
    store.put_object(bad, b"{not json\n", content_type="application/x-ndjson")
    raw = figures(week_bucket.source(), WEEK)
    days = WEEK.days
    kept = run(week_bucket.source(), days, delete_raw=True, retention_days=60)
    assert all("0 deleted" in line for line in kept)  # 12-18 Oct are not 60 days old
    assert len(week_bucket.keys("date=")) == 77  # 76 intervals + the unreadable object
    run(week_bucket.source(), days, delete_raw=True, retention_days=30)
    assert week_bucket.keys("date=") == [bad]
    assert figures(week_bucket.source(), WEEK) == raw


def test_a_corrupt_day_object_is_named(week_bucket: Bucket) -> None:
    day = date(2026, 10, 15)
    run(week_bucket.source(), [day])
    (key,) = week_bucket.keys(f"daily/date={day}/")
    week_bucket.store().put_object(key, b"not parquet", content_type=source.CONTENT_TYPE)
    with pytest.raises(ValueError, match=key):
        figures(week_bucket.source(), summary.Period(day, day + timedelta(days=1), "day"))


def _extra(day: date, *, node: str, hour: int) -> contract.TelemetryInterval:
    """A fixture interval of `day`, moved to another node and hour (not in the fixture)."""
    first = next(fixture.intervals(interval_hours=6, first=day, last=day))
    start = datetime(day.year, day.month, day.day, hour, tzinfo=UTC)
    return first.model_copy(
        update={"node": node, "interval_start": start, "interval_seconds": 3600.0}
    )


def test_a_partly_readable_raw_object_is_counted_and_never_deleted(week_bucket: Bucket) -> None:
    """An object cut off mid-line (an upload that broke) and one with a line of a newer schema:
    their readable intervals count, once, and the objects stay (what could not be read is not
    thrown away with them)."""
    day = date(2026, 10, 13)
    store = week_bucket.store()
    cut = _extra(day, node="mini-8", hour=5)
    cut_key = contract.telemetry_key(PREFIX, cut.node, cut.interval_start)
    body = cut.model_dump_json().encode() + b"\n" + cut.model_dump_json().encode()[:40]
    store.put_object(cut_key, body, content_type="application/x-ndjson")
    newer = _extra(day, node="mini-9", hour=7)
    newer_key = contract.telemetry_key(PREFIX, newer.node, newer.interval_start)
    future = newer.model_copy(
        update={
            "schema_version": contract.TELEMETRY_SCHEMA_VERSION + 1,
            "interval_start": newer.interval_start + timedelta(minutes=30),
        }
    )
    lines = [newer.model_dump_json(), future.model_dump_json()]
    store.put_object(newer_key, "\n".join(lines).encode(), content_type="application/x-ndjson")
    period = summary.Period(day, day + timedelta(days=1), "one day")
    raw = figures(week_bucket.source(), period)
    assert raw.nodes["mini-8"].covered_seconds == 3600  # the whole line, not the cut one
    assert raw.nodes["mini-9"].covered_seconds == 3600  # the newer-schema line skipped
    run(week_bucket.source(), [day], delete_raw=True, retention_days=30)
    left = week_bucket.keys(f"date={day}/")
    assert sorted(left) == sorted([cut_key, newer_key])  # the other raw objects went
    assert figures(week_bucket.source(), period) == raw
    run(week_bucket.source(), [day], delete_raw=True, retention_days=30)  # and stay on reruns
    assert sorted(week_bucket.keys(f"date={day}/")) == sorted([cut_key, newer_key])
    assert figures(week_bucket.source(), period) == raw


class Crash(BaseException):
    """The process dying at this point (no handler sees it, like SIGKILL)."""


class CrashingStore(objectstore.TelemetryStore):
    """The real store against the real server, dying at one step of a compaction."""

    def __init__(self, config: objectstore.StoreConfig, *, at: str) -> None:
        super().__init__(config)
        self.at = at

    def put_object(self, key: str, data: bytes, **kwargs: object) -> None:
        daily = "/daily/" in key
        if daily and self.at == "before-put":
            raise Crash(self.at)
        super().put_object(key, data, **kwargs)  # type: ignore[arg-type]
        if daily and self.at == "after-put":
            raise Crash(self.at)

    def delete_objects(self, keys: Sequence[str]) -> int:
        if all("/daily/" in k for k in keys):
            done = super().delete_objects(keys)
            if self.at == "after-old-deleted":
                raise Crash(self.at)
            return done
        if self.at == "mid-raw-delete":
            super().delete_objects(list(keys)[: len(keys) // 2])
            raise Crash(self.at)
        return super().delete_objects(keys)


@pytest.mark.parametrize("at", ["before-put", "after-put", "after-old-deleted", "mid-raw-delete"])
def test_a_crash_mid_compaction_loses_nothing_and_counts_nothing_twice(
    week_bucket: Bucket, at: str
) -> None:
    day = date(2026, 10, 14)
    period = summary.Period(day, day + timedelta(days=1), "one day")
    run(week_bucket.source(), [day])  # an older day object, then a late interval
    (old,) = week_bucket.keys(f"daily/date={day}/")
    week_bucket.store().put_interval(_extra(day, node="mini-9", hour=3))
    before = figures(week_bucket.source(), period)  # the old day object: without mini-9
    raw = figures(source.BucketSource(_RawOnly(week_bucket.store().config)), period)
    assert "mini-9" in raw.nodes
    assert "mini-9" not in before.nodes
    crashing = CrashingStore(week_bucket.store().config, at=at)
    with pytest.raises(Crash):
        compaction.compact_day(
            source.BucketSource(crashing),
            day,
            now=AFTER,
            options=compaction.Options(delete_raw=True, retention_days=30),
        )
    # a report right after the crash: the old or the new day, never both added up
    assert figures(week_bucket.source(), period) in (before, raw)
    if at == "after-put":
        assert len(week_bucket.keys(f"daily/date={day}/")) == 2  # read as their union
        assert figures(week_bucket.source(), period) == raw
    # the next run finishes the job: one day object with everything, raw objects gone
    run(week_bucket.source(), [day], delete_raw=True, retention_days=30)
    (new,) = week_bucket.keys(f"daily/date={day}/")
    assert new != old
    assert week_bucket.keys(f"date={day}/") == []
    assert figures(week_bucket.source(), period) == raw


class _RawOnly(objectstore.TelemetryStore):
    """Sees no compacted objects: reports from the per-interval objects alone."""

    def list_objects(self, prefix: str) -> list[objectstore.ObjectInfo]:
        return [] if "/daily/" in prefix else super().list_objects(prefix)
