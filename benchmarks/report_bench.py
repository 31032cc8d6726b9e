"""Monthly report benchmark: a month of telemetry for a big fleet in a real S3 server (SeaweedFS).

    python -m benchmarks.report_bench --nodes 500 [--raw-nodes 20] [--days 30]

What is measured and what is extrapolated:
- Compacted: 30 day objects, one per day, for every node and minute of the month, generated
  straight in the columnar layout (21.6 million intervals for 500 nodes; writing 21.6 million
  objects to the server is not feasible here) and put in the bucket under their compacted keys
  (the generated objects are kept in `<root>/days/`: a rerun puts the same bytes without
  generating them again).
  The monthly report (figures, HTML, PDF and the detail CSVs) runs against them: measured time
  and GETs.
- Raw: one day of `--raw-nodes` nodes as the agents ship it (one object per node and minute,
  28,800 objects for 20 nodes), generated through the contract models. Reading that day the
  way a report reads an uncompacted day is measured, per object; the raw month is that cost per
  object times the month's objects: extrapolated, and marked as such. The compaction of that day
  (the CronJob's work) is measured too.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import io
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pypdf
from tests.support import s3 as s3support

from mlxfleet_agent import contract
from mlxfleet_operator.adapters import objectstore
from mlxfleet_operator.reports import (
    cli,
    columnar,
    compaction,
    config,
    detail,
    monthly,
    render,
    source,
    summary,
)

MONTH = (2026, 6)  # 30 days
PREFIX = "bench/telemetry"
MINUTES = 1440
GIB = 1024**3
E2E = np.array(contract.LATENCY_BUCKETS_S)
TOKEN = np.array(contract.TOKEN_LATENCY_BUCKETS_S)


def _node_names(n: int) -> list[str]:
    return [f"mac-{i:04d}" for i in range(1, n + 1)]


def _shapes(rng: np.random.Generator, buckets: int, patterns: int = 8) -> np.ndarray[Any, Any]:
    """Probability rows over `buckets + 1` buckets, mass around a few middle buckets."""
    out = np.zeros((patterns, buckets + 1))
    for i in range(patterns):
        centre = rng.integers(2, buckets - 2)
        w = np.exp(-0.5 * ((np.arange(buckets + 1) - centre) / rng.uniform(0.7, 2.0)) ** 2)
        out[i] = w / w.sum()
    return out


def _hist_columns(
    rng: np.random.Generator, prefix: str, requests: np.ndarray[Any, Any], bounds: Any
) -> dict[str, pa.Array]:
    n = len(requests)
    shapes = _shapes(rng, len(bounds))
    counts = np.floor(shapes[rng.integers(0, len(shapes), n)] * requests[:, None]).astype(np.int64)
    counts[:, len(bounds) // 2] += requests - counts.sum(axis=1)
    mids = np.r_[bounds[0] / 2, (bounds[1:] + bounds[:-1]) / 2, bounds[-1]]
    has = requests > 0
    offsets = np.r_[0, np.cumsum(np.where(has, len(bounds) + 1, 0))].astype(np.int32)
    values = counts[has].reshape(-1)
    mask = ~has
    return {
        f"{prefix}_bounds": pa.array(
            np.where(has, columnar.bounds_text(bounds.tolist()), np.array(None)), type=pa.string()
        ),
        f"{prefix}_counts": pa.ListArray.from_arrays(
            pa.array(offsets), pa.array(values, type=pa.int64()), mask=pa.array(mask)
        ),
        f"{prefix}_sum": pa.array(np.where(has, (counts * mids).sum(axis=1), np.nan), mask=mask),
        f"{prefix}_count": pa.array(np.where(has, requests, 0), type=pa.int64(), mask=mask),
    }


def day_table(day: date, nodes: list[str], *, seed: int) -> pa.Table:
    """Every minute of every node of one day, straight in the columnar layout."""
    rng = np.random.default_rng(seed)
    n = len(nodes)
    start0 = int(datetime.combine(day, datetime.min.time(), tzinfo=UTC).timestamp() * 1e6)
    minutes = np.arange(MINUTES, dtype=np.int64) * 60_000_000 + start0
    node_idx = np.repeat(np.arange(n), MINUTES)
    starts = np.tile(minutes, n)
    slots_per_node = rng.integers(1, 4, n)
    memory = rng.choice([16, 24, 32, 48, 64, 96, 128, 192], n) * GIB
    rows = n * MINUTES
    busy_host = np.minimum(60.0, rng.gamma(2.0, 8.0, rows))
    used = (memory[node_idx] * rng.uniform(0.3, 0.8, rows)).astype(np.int64)
    intervals = {
        "kind": pa.array(np.zeros(rows, dtype=np.int8)),
        "node": pa.array(np.array(nodes, dtype=object)[node_idx], type=pa.string()),
        "interval_start": pa.array(starts, type=pa.timestamp("us", tz="UTC")),
        "seq": pa.array(np.zeros(rows, dtype=np.int32)),
        "schema_version": pa.array(np.ones(rows, dtype=np.int32)),
        "interval_seconds": pa.array(np.full(rows, 60.0)),
        "agent_started_at": pa.array(
            np.full(rows, start0 - 86_400_000_000), pa.timestamp("us", tz="UTC")
        ),
        "dropped_intervals": pa.array(np.zeros(rows, dtype=np.int64)),
        "host_memory_total_bytes": pa.array(memory[node_idx]),
        "host_memory_used_bytes_max": pa.array(used),
        "host_memory_available_bytes_min": pa.array(memory[node_idx] - used),
        "host_memory_pressure_max": pa.array(
            np.where(rng.random(rows) < 0.01, "warn", "normal"), type=pa.string()
        ),
        "host_uptime_seconds": pa.array((starts - start0) / 1e6 + 86_400.0),
        "host_busy_seconds": pa.array(busy_host),
        "host_energy_wh": pa.array((10 * (60 - busy_host) + 90 * busy_host) / 3600),
        "host_average_power_watts": pa.array(10 + 80 * busy_host / 60),
        "host_power_source": pa.array(np.full(rows, "estimated", dtype=object), pa.string()),
    }
    # slot rows: node i has slots 0..k-1 every minute
    per_minute = slots_per_node[node_idx]
    s_rows = int(per_minute.sum())
    parent = np.repeat(np.arange(rows), per_minute)
    seq = np.arange(s_rows) - np.repeat(np.cumsum(per_minute) - per_minute, per_minute)
    model_of = rng.integers(0, 200, (n, 3))
    model = model_of[node_idx[parent], seq]
    rate = rng.uniform(0, 12, (n, 3))[node_idx[parent], seq]
    requests = rng.poisson(rate).astype(np.int64)
    errors = rng.random(s_rows) < 0.002
    err_offsets = np.r_[0, np.cumsum(errors)].astype(np.int32)
    slots = {
        "kind": pa.array(np.ones(s_rows, dtype=np.int8)),
        "node": intervals["node"].take(pa.array(parent)),
        "interval_start": intervals["interval_start"].take(pa.array(parent)),
        "seq": pa.array(seq.astype(np.int32)),
        "interval_seconds": pa.array(np.full(s_rows, 60.0)),
        "slot_slot": pa.array([f"slot-{m:03d}" for m in model.tolist()], pa.string()),
        "slot_model": pa.array([f"model-{m:03d}" for m in model.tolist()], pa.string()),
        "slot_source": pa.array([f"hf://bench/model-{m:03d}" for m in model.tolist()], pa.string()),
        "slot_namespace": pa.array([f"team-{m % 12}" for m in model.tolist()], pa.string()),
        "slot_requests": pa.array(requests),
        "slot_errors": pa.MapArray.from_arrays(
            pa.array(err_offsets),
            pa.array(np.full(int(errors.sum()), "backend_5xx", dtype=object), pa.string()),
            pa.array(np.ones(int(errors.sum()), dtype=np.int64)),
        ),
        "slot_prompt_tokens": pa.array(requests * rng.integers(100, 800, s_rows)),
        "slot_completion_tokens": pa.array(requests * rng.integers(50, 400, s_rows)),
        "slot_busy_seconds": pa.array(np.minimum(60.0, requests * rng.uniform(1, 5, s_rows))),
        "slot_max_in_flight": pa.array(np.minimum(requests, 8)),
        "slot_swaps": pa.MapArray.from_arrays(
            pa.array(np.zeros(s_rows + 1, dtype=np.int32)),
            pa.array([], pa.string()),
            pa.array([], pa.int64()),
        ),
        **_hist_columns(rng, "ttft", requests, E2E),
        **_hist_columns(rng, "tpot", requests, TOKEN),
        **_hist_columns(rng, "e2e", requests, E2E),
        **_hist_columns(rng, "queue_wait", requests, E2E),
    }
    tables = [_full(intervals, rows), _full(slots, s_rows)]
    return columnar.canonical(pa.concat_tables(tables))


def day_object(cache: Path, day: date, nodes: list[str], *, seed: int) -> bytes:
    """`day_table` encoded, kept under `cache` so that a rerun does not generate it again (it
    is most of a run: ~30 s a day at 500 nodes); the name says what made it, the generator's
    source and the layout included, so a changed generator never reads an old file."""
    made_by = inspect.getsource(day_table) + inspect.getsource(_hist_columns) + str(columnar.SCHEMA)
    tag = hashlib.sha256(made_by.encode()).hexdigest()[:12]
    path = cache / f"{len(nodes)}n-{day}-seed{seed}-{tag}.parquet"
    if path.exists():
        return path.read_bytes()
    data = columnar.encode(day_table(day, nodes, seed=seed))
    cache.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".part")
    part.write_bytes(data)
    part.replace(path)
    return data


def _full(columns: dict[str, pa.Array], rows: int) -> pa.Table:
    return pa.table(
        {
            f.name: columns[f.name].cast(f.type) if f.name in columns else pa.nulls(rows, f.type)
            for f in columnar.SCHEMA
        },
        schema=columnar.SCHEMA,
    )


def _raw_intervals(day: date, nodes: list[str], *, seed: int) -> list[contract.TelemetryInterval]:
    """The raw sample: what agents ship, through the contract models."""
    table = day_table(day, nodes, seed=seed)
    return columnar.to_intervals(table)


def _store(server: s3support.S3Server, bucket: str, prefix: str) -> objectstore.TelemetryStore:
    return objectstore.TelemetryStore(
        objectstore.StoreConfig(
            bucket=bucket,
            prefix=prefix,
            endpoint_url=server.endpoint_url,
            region=server.region,
            access_key_id=server.access_key,
            secret_access_key=server.secret_key,
        )
    )


def _report_config(nodes: list[str]) -> config.ReportConfig:
    cost = {
        "purchasePriceUSD": 3999,
        "amortizationMonths": 36,
        "electricityUSDPerKWh": 0.3,
        "idlePowerWatts": 10,
        "busyPowerWatts": 90,
    }
    return config.ReportConfig.model_validate(
        {
            "nodes": dict.fromkeys(nodes, cost),
            "reference": {"inputUSDPerMillion": 2.5, "outputUSDPerMillion": 10.0},
        }
    )


def run(*, nodes: int, raw_nodes: int, root: Path, days: int = 30) -> dict[str, Any]:
    root = root.resolve()  # weed runs in its own folder
    root.mkdir(parents=True, exist_ok=True)
    server = s3support.start(root / "s3")
    try:
        return _measure(server, nodes=nodes, raw_nodes=raw_nodes, days=days, root=root)
    finally:
        server.close()


def _measure(
    server: s3support.S3Server, *, nodes: int, raw_nodes: int, days: int, root: Path
) -> dict[str, Any]:
    bucket = server.make_bucket()
    names = _node_names(nodes)
    period = summary.month(*MONTH)
    month_days = period.days[:days]
    writer = _store(server, bucket, PREFIX)
    started = time.monotonic()
    sizes = []
    for i, day in enumerate(month_days):
        data = day_object(root / "days", day, names, seed=i)
        key = source.daily_key(PREFIX, day, columnar.digest(data))
        writer.put_object(key, data, content_type=source.CONTENT_TYPE)
        sizes.append(len(data))
    generate_s = time.monotonic() - started
    cfg = _report_config(names)
    # the monthly report over compacted days: figures, then HTML and PDF
    reader = source.BucketSource(_store(server, bucket, PREFIX))
    t0 = time.monotonic()
    figures = cli.summarise(reader, period, cfg)
    t1 = time.monotonic()
    report = monthly.build(figures)
    html = render.monthly_html(report)
    pdf = render.pdf(html)
    csvs = detail.files(report)  # every node and model, next to the PDF
    t2 = time.monotonic()
    (root / "monthly.pdf").write_bytes(pdf)
    for name, data in csvs.items():
        (root / name).write_bytes(data)
    calls = dict(reader.store.calls)
    month = {
        "month_s": round(t2 - t0, 1),
        "report_month_s": round(t2 - t0, 1),  # the names `make bench-scale` reports them under
        "report_gets": calls.get("GetObject", 0),
        "figures_s": round(t1 - t0, 1),
        "render_s": round(t2 - t1, 1),
        "gets": calls.get("GetObject", 0),
        "lists": calls.get("ListObjectsV2", 0),
        "intervals": nodes * MINUTES * len(month_days),
        "days": len(month_days),
        "day_object_mb": round(sum(sizes) / len(sizes) / 2**20, 1),
        "generate_s": round(generate_s, 1),  # or read from the cache of an earlier run
        "tokens": figures.tokens,
        "pdf_pages": len(pypdf.PdfReader(io.BytesIO(pdf)).pages),
        "detail_csv_kb": round(sum(len(d) for d in csvs.values()) / 1024),
    }
    return month | _raw_day(server, bucket, raw_nodes=raw_nodes, month_nodes=nodes, days=days)


def _raw_day(
    server: s3support.S3Server, bucket: str, *, raw_nodes: int, month_nodes: int, days: int
) -> dict[str, Any]:
    """One day of `raw_nodes` nodes as raw objects: read like an uncompacted day, then compacted."""
    prefix = "bench/raw-sample"
    day = date(*MONTH, 15)
    intervals = _raw_intervals(day, _node_names(raw_nodes), seed=99)
    writer = _store(server, bucket, prefix)
    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(writer.put_interval, intervals))
    upload_s = time.monotonic() - t0
    period = summary.Period(day, day + timedelta(days=1), "raw day")
    reader = source.BucketSource(_store(server, bucket, prefix))
    t0 = time.monotonic()
    raw_figures = summary.load(reader, period)
    raw_s = time.monotonic() - t0
    raw_gets = reader.store.calls.get("GetObject", 0)
    compactor = source.BucketSource(_store(server, bucket, prefix))
    t0 = time.monotonic()
    result = compaction.compact_day(
        compactor, day, now=datetime.now(UTC), options=compaction.Options()
    )
    compact_s = time.monotonic() - t0
    reader = source.BucketSource(_store(server, bucket, prefix))
    t0 = time.monotonic()
    compacted_figures = summary.load(reader, period)
    compacted_s = time.monotonic() - t0
    objects = len(intervals)
    per_object = raw_s / objects
    month_objects = month_nodes * MINUTES * days
    return {
        "raw_sample_objects": objects,
        "raw_sample_upload_s": round(upload_s, 1),
        "raw_sample_read_s": round(raw_s, 1),
        "raw_sample_gets": raw_gets,
        "raw_per_object_ms": round(per_object * 1000, 3),
        "raw_month_objects": month_objects,
        "raw_month_s_extrapolated": round(per_object * month_objects),
        "raw_month_gets_extrapolated": month_objects,
        "raw_sample_compact_s": round(compact_s, 1),
        "raw_sample_compacted_read_s": round(compacted_s, 2),
        "raw_sample_compacted_gets": reader.store.calls.get("GetObject", 0),
        "raw_sample_same_figures": _same(raw_figures, compacted_figures),
        "compacted_intervals": result.intervals,
        "compact_month_s_extrapolated": round(compact_s / objects * month_objects),
    }


def _same(a: Any, b: Any) -> bool:
    return bool(repr(a) == repr(b))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.report_bench", description=__doc__)
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--raw-nodes", type=int, default=20)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--root", type=Path, default=Path(".dev/bench-report"))
    ns = p.parse_args(argv)
    out = run(nodes=ns.nodes, raw_nodes=ns.raw_nodes, root=ns.root, days=ns.days)
    print(json.dumps(out))
    return 0 if math.isfinite(out["month_s"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
