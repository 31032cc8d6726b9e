"""Telemetry intervals in columnar form: one Arrow table (Parquet object) per UTC day.

A day's `TelemetryInterval`s become one table with four kinds of rows that share `node`,
`interval_start` and `seq`: one row per interval (kind 0: host figures), one per slot of an
interval (kind 1, `seq` = its place in `slots`) and one per swap event (kind 2). A gateway line
(`component: gateway`) is not a node: it is one row of kind 3 holding the whole line as JSON in
`gateway_line` (its per-key rows are few and reports.teams reads them whole), so it never mixes
into the node and slot columns; an agent line's `keys` (normally none) are JSON in `keys`
(objects written before these two columns existed read as if they were empty). Every field of
`TelemetryInterval`, `NodeTelemetry`, `SlotTelemetry`, `HistogramData` and `SwapEvent` has a typed
column of its own (`FIELDS` says which; a unit test fails when the contract grows a field this
module does not store), so the round trip `to_intervals(to_table(x)) == x` is exact and a report
reads only the columns it needs. Histogram bounds are a short string (`repr` of each float, which
reads back to the same float), so Parquet's dictionary encoding stores them once per file.
Timestamps are microseconds in UTC (the contract's own resolution; an offset like +02:00 comes
back as the same instant in UTC).

Rows are in one canonical order (node, interval start, kind, seq) and written with fixed writer
settings, so equal content gives equal bytes (`encode`): the compactor names objects by their hash.
May import: pyarrow, numpy, pydantic, the standard library, `mlxfleet_agent.contract`. Called by:
reports.compaction, reports.dayagg, reports.source, reports.fixture.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import TypeAdapter

from mlxfleet_agent import contract

INTERVAL, SLOT, EVENT, GATEWAY = 0, 1, 2, 3
ROW_GROUP = 131_072  # rows per Parquet row group: also the batch a report reduces at once
HISTOGRAMS: dict[str, str] = {  # column prefix -> SlotTelemetry field
    "ttft": "ttft_seconds",
    "tpot": "time_per_output_token_seconds",
    "e2e": "end_to_end_seconds",
    "queue_wait": "queue_wait_seconds",
}
HOST_FIELDS: dict[str, pa.DataType] = {
    "memory_total_bytes": pa.int64(),
    "memory_used_bytes_max": pa.int64(),
    "memory_available_bytes_min": pa.int64(),
    "memory_pressure_max": pa.string(),
    "uptime_seconds": pa.float64(),
    "busy_seconds": pa.float64(),
    "energy_wh": pa.float64(),
    "average_power_watts": pa.float64(),
    "power_source": pa.string(),
    "thermal_pressure_max": pa.string(),
    "thermal_pressure_seconds": pa.float64(),
    "gpu_temperature_max_celsius": pa.float64(),
    "cpu_temperature_max_celsius": pa.float64(),
    "gpu_busy_seconds": pa.float64(),
    "gpu_sampled_seconds": pa.float64(),
}
SLOT_FIELDS: dict[str, pa.DataType] = {
    "slot": pa.string(),
    "model": pa.string(),
    "source": pa.string(),
    "namespace": pa.string(),
    "requests": pa.int64(),
    "errors": pa.map_(pa.string(), pa.int64()),
    "prompt_tokens": pa.int64(),
    "completion_tokens": pa.int64(),
    "busy_seconds": pa.float64(),
    "max_in_flight": pa.int64(),
    "swaps": pa.map_(pa.string(), pa.int64()),
}
EVENT_FIELDS: dict[str, pa.DataType] = {
    "slot": pa.string(),
    "outcome": pa.string(),
    "at": pa.timestamp("us", tz="UTC"),
    "strategy": pa.string(),
    "from_source": pa.string(),
    "to_source": pa.string(),
    "requests_served": pa.int64(),
    "requests_failed": pa.int64(),
    "max_queue_wait_ms": pa.float64(),
}
INTERVAL_FIELDS: dict[str, pa.DataType] = {
    "schema_version": pa.int32(),
    "interval_seconds": pa.float64(),
    "agent_started_at": pa.timestamp("us", tz="UTC"),
    "dropped_intervals": pa.int64(),
}
# Which contract fields are stored (the rest of TelemetryInterval is node/start/slots/host/events;
# `component` is the row kind, `keys` JSON; a gateway line is stored whole as JSON).
FIELDS: dict[type[contract.Wire], set[str]] = {
    contract.TelemetryInterval: {
        "component",
        "keys",
        "node",
        "interval_start",
        "slots",
        "host",
        "swap_events",
        *INTERVAL_FIELDS,
    },
    contract.NodeTelemetry: set(HOST_FIELDS),
    contract.SlotTelemetry: set(SLOT_FIELDS) | set(HISTOGRAMS.values()),
    contract.SwapEvent: set(EVENT_FIELDS),
    contract.HistogramData: {"bounds", "counts", "sum", "count"},
}


def _schema() -> pa.Schema:
    cols: list[tuple[str, pa.DataType]] = [
        ("kind", pa.int8()),
        ("node", pa.string()),
        ("interval_start", pa.timestamp("us", tz="UTC")),
        ("seq", pa.int32()),
        *INTERVAL_FIELDS.items(),
        ("keys", pa.string()),
        ("gateway_line", pa.string()),
        *((f"host_{k}", t) for k, t in HOST_FIELDS.items()),
        *((f"slot_{k}", t) for k, t in SLOT_FIELDS.items()),
    ]
    for prefix in HISTOGRAMS:
        cols += [
            (f"{prefix}_bounds", pa.string()),
            (f"{prefix}_counts", pa.list_(pa.int64())),
            (f"{prefix}_sum", pa.float64()),
            (f"{prefix}_count", pa.int64()),
        ]
    cols += [(f"event_{k}", t) for k, t in EVENT_FIELDS.items()]
    return pa.schema(cols)


SCHEMA = _schema()
KEYS = TypeAdapter(list[contract.KeyTelemetry])
SORT_KEYS = [("node", "ascending"), ("interval_start", "ascending"), ("kind", "ascending")]


class ColumnarError(ValueError):
    """A table or object that is not a telemetry day in this layout; says what is wrong."""


def bounds_text(bounds: Sequence[float]) -> str:
    return ",".join(repr(float(b)) for b in bounds)


def bounds_of(text: str) -> list[float]:
    return [float(b) for b in text.split(",")] if text else []


def _utc(ts: datetime | None) -> datetime | None:
    return None if ts is None else ts.astimezone(UTC)


def _row(kind: int, iv: contract.TelemetryInterval, seq: int) -> dict[str, Any]:
    """Columns every row has; `interval_seconds` too, so a slot row is complete on its own
    (a row group may split an interval's rows)."""
    return {
        "kind": kind,
        "node": iv.node,
        "interval_start": _utc(iv.interval_start),
        "seq": seq,
        "interval_seconds": iv.interval_seconds,
    }


def _interval_row(iv: contract.TelemetryInterval) -> dict[str, Any]:
    row = _row(INTERVAL, iv, 0)
    row |= {k: getattr(iv, k) for k in INTERVAL_FIELDS}
    row["agent_started_at"] = _utc(iv.agent_started_at)
    if iv.keys:
        row["keys"] = KEYS.dump_json(iv.keys).decode()
    row |= {f"host_{k}": getattr(iv.host, k) for k in HOST_FIELDS}
    return row


def _gateway_row(iv: contract.TelemetryInterval) -> dict[str, Any]:
    return _row(GATEWAY, iv, 0) | {"gateway_line": iv.model_dump_json()}


def _slot_row(
    iv: contract.TelemetryInterval, seq: int, s: contract.SlotTelemetry
) -> dict[str, Any]:
    row = _row(SLOT, iv, seq)
    row |= {f"slot_{k}": getattr(s, k) for k in SLOT_FIELDS}
    row["slot_errors"] = list(s.errors.items())
    row["slot_swaps"] = list(s.swaps.items())
    for prefix, name in HISTOGRAMS.items():
        h: contract.HistogramData | None = getattr(s, name)
        if h is not None:
            row |= {
                f"{prefix}_bounds": bounds_text(h.bounds),
                f"{prefix}_counts": h.counts,
                f"{prefix}_sum": h.sum,
                f"{prefix}_count": h.count,
            }
    return row


def _event_row(iv: contract.TelemetryInterval, seq: int, e: contract.SwapEvent) -> dict[str, Any]:
    row = _row(EVENT, iv, seq)
    row |= {f"event_{k}": getattr(e, k) for k in EVENT_FIELDS}
    row["event_at"] = _utc(e.at)
    return row


def to_table(intervals: Iterable[contract.TelemetryInterval]) -> pa.Table:
    """The canonical table of some intervals (one per node and start: the last one wins)."""
    unique: dict[tuple[str, datetime], contract.TelemetryInterval] = {}
    for iv in intervals:
        unique[(iv.node, iv.interval_start.astimezone(UTC))] = iv
    columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for key in sorted(unique):
        iv = unique[key]
        if iv.component == "gateway":
            for name, values in columns.items():
                values.append(_gateway_row(iv).get(name))
            continue
        rows = [_interval_row(iv)]
        rows += [_slot_row(iv, i, s) for i, s in enumerate(iv.slots)]
        rows += [_event_row(iv, i, e) for i, e in enumerate(iv.swap_events)]
        for row in rows:
            for name, values in columns.items():
                values.append(row.get(name))
    try:
        return pa.table(columns, schema=SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise ColumnarError(f"telemetry does not fit the columnar layout: {exc}") from exc


def _hist(row: dict[str, Any], prefix: str) -> contract.HistogramData | None:
    text = row[f"{prefix}_bounds"]
    if text is None:
        return None
    return contract.HistogramData(
        bounds=bounds_of(text),
        counts=row[f"{prefix}_counts"],
        sum=row[f"{prefix}_sum"],
        count=row[f"{prefix}_count"],
    )


def to_intervals(table: pa.Table) -> list[contract.TelemetryInterval]:
    """Back to contract objects (tests, repairs); the inverse of `to_table`."""
    by_key: dict[tuple[str, datetime], dict[str, Any]] = {}
    slots: dict[tuple[str, datetime], list[tuple[int, contract.SlotTelemetry]]] = {}
    events: dict[tuple[str, datetime], list[tuple[int, contract.SwapEvent]]] = {}
    for row in table.to_pylist():
        key = (row["node"], row["interval_start"])
        if row["kind"] in (INTERVAL, GATEWAY):
            by_key[key] = row
        elif row["kind"] == SLOT:
            fields = {k: row[f"slot_{k}"] for k in SLOT_FIELDS}
            fields["errors"] = dict(fields["errors"] or [])
            fields["swaps"] = dict(fields["swaps"] or [])
            fields |= {name: _hist(row, p) for p, name in HISTOGRAMS.items()}
            slots.setdefault(key, []).append((row["seq"], contract.SlotTelemetry(**fields)))
        else:
            ev = contract.SwapEvent(**{k: row[f"event_{k}"] for k in EVENT_FIELDS})
            events.setdefault(key, []).append((row["seq"], ev))
    out: list[contract.TelemetryInterval] = []
    for key, row in by_key.items():
        if row["kind"] == GATEWAY:
            out.append(gateway_line(row["gateway_line"]))
            continue
        out.append(
            contract.TelemetryInterval(
                node=row["node"],
                interval_start=row["interval_start"],
                **{k: row[k] for k in INTERVAL_FIELDS},
                host=contract.NodeTelemetry(
                    **{k: v for k in HOST_FIELDS if (v := row[f"host_{k}"]) is not None}
                ),
                slots=[s for _, s in sorted(slots.get(key, []), key=lambda x: x[0])],
                swap_events=[e for _, e in sorted(events.get(key, []), key=lambda x: x[0])],
                keys=KEYS.validate_json(row["keys"]) if row["keys"] else [],
            )
        )
    return out


def gateway_line(text: str) -> contract.TelemetryInterval:
    """The gateway line a kind-3 row holds."""
    try:
        return contract.TelemetryInterval.model_validate_json(text)
    except ValueError as exc:
        raise ColumnarError(f"gateway_line: not a telemetry line: {exc}") from exc


# columns added after the first objects were written: an older object reads as if they were
# empty (nulls; `to_intervals` gives the contract's defaults for them)
LATER = (
    "keys",
    "gateway_line",
    "host_thermal_pressure_max",
    "host_thermal_pressure_seconds",
    "host_gpu_temperature_max_celsius",
    "host_cpu_temperature_max_celsius",
    "host_gpu_busy_seconds",
    "host_gpu_sampled_seconds",
)


def _with_later(table: pa.Table) -> pa.Table:
    for name in LATER:
        if name not in table.schema.names:
            kind = SCHEMA.field(name).type
            table = table.append_column(name, pa.nulls(table.num_rows, kind))
    return table


def canonical(table: pa.Table) -> pa.Table:
    """Schema-checked, in canonical row order, one chunk per column."""
    table = _with_later(table)
    missing = sorted(set(SCHEMA.names) - set(table.schema.names))
    if missing:
        raise ColumnarError(f"not a telemetry day table: columns {missing} are missing")
    try:  # also names nested fields as SCHEMA does (Parquet renames list items `element`)
        table = table.select(SCHEMA.names).cast(SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ColumnarError(f"not a telemetry day table: {exc}") from exc
    return table.sort_by([*SORT_KEYS, ("seq", "ascending")]).combine_chunks()


def union(tables: Sequence[pa.Table]) -> pa.Table:
    """The canonical union of day tables; an interval (node, start) in several of them is taken
    whole (with its slots and events) from the last table that has it."""
    if not tables:
        return SCHEMA.empty_table()
    if len(tables) == 1:
        return canonical(tables[0])
    parts = [canonical(t) for t in tables]
    keys = [_interval_keys(t) for t in parts]
    winner: dict[tuple[str, int], int] = {}
    for i, found in enumerate(keys):
        for key in found:
            winner[key] = i
    kept = []
    for i, t in enumerate(parts):
        nodes = t.column("node").to_pylist()
        starts = t.column("interval_start").cast(pa.int64()).to_numpy()
        mask = np.fromiter(
            (winner.get((n, int(s))) == i for n, s in zip(nodes, starts, strict=True)),
            dtype=bool,
            count=len(nodes),
        )
        kept.append(t.filter(pa.array(mask)))
    return canonical(pa.concat_tables(kept))


def _interval_keys(table: pa.Table) -> list[tuple[str, int]]:
    kinds = table.column("kind").to_numpy()
    rows = np.flatnonzero((kinds == INTERVAL) | (kinds == GATEWAY))
    nodes = table.column("node").take(pa.array(rows)).to_pylist()
    starts = table.column("interval_start").cast(pa.int64()).to_numpy()[rows]
    return [(n, int(s)) for n, s in zip(nodes, starts, strict=True)]


def interval_keys(table: pa.Table) -> set[tuple[str, datetime]]:
    """(node, interval start) of every interval in the table."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return {(n, epoch + timedelta(microseconds=us)) for n, us in _interval_keys(table)}


def encode(table: pa.Table) -> bytes:
    """Parquet bytes of the canonical table (equal content, equal bytes)."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        canonical(table),
        sink,
        row_group_size=ROW_GROUP,
        compression="zstd",
        use_dictionary=True,
        write_statistics=False,
        store_schema=True,
    )
    return bytes(sink.getvalue().to_pybytes())


def decode(data: bytes, *, columns: Sequence[str] | None = None) -> pa.Table:
    """A whole table (or some columns) from Parquet bytes; ColumnarError when unreadable."""
    try:
        table = pq.read_table(pa.BufferReader(data), columns=list(columns) if columns else None)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ColumnarError(f"not a readable Parquet object: {exc}") from exc
    if columns is None:
        return canonical(table)
    return table


def check(data: bytes) -> None:
    """Raise ColumnarError unless `data` is a Parquet object with this layout's columns."""
    try:
        names = set(pq.ParquetFile(pa.BufferReader(data)).schema_arrow.names)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ColumnarError(f"not a readable Parquet object: {exc}") from exc
    missing = sorted(set(SCHEMA.names) - names - set(LATER))
    if missing:
        raise ColumnarError(f"not a telemetry day object: columns {missing} are missing")


def batches(
    data: bytes,
    *,
    columns: Sequence[str],
    dictionary: Sequence[str] = (),
    rare: Sequence[str] = (),
    rare_in: Callable[[pa.Table], bool] | None = None,
) -> Iterable[pa.RecordBatch]:
    """The rows of a Parquet object one row group at a time (bounded memory); the string
    columns named in `dictionary` come as dictionary arrays (Parquet's own dictionary pages,
    no string per row). Columns in `rare` (those of rows few groups have) are read only for
    the groups `rare_in` says need them (all, without `rare_in`); elsewhere they are nulls."""
    try:
        have = set(pq.read_schema(pa.BufferReader(data)).names)
        as_dictionary = [c for c in dictionary if c in have]  # an older object may lack some
        reader = pq.ParquetFile(pa.BufferReader(data), read_dictionary=as_dictionary or None)
        missing = sorted((set(columns) | set(rare)) - have - set(LATER))
        if missing:
            raise ColumnarError(f"not a telemetry day object: columns {missing} are missing")
        read = [c for c in columns if c in have]
        extra = [c for c in rare if c in have]
        for i in range(reader.num_row_groups):
            group = reader.read_row_group(i, columns=read, use_threads=False)
            if extra and (rare_in is None or rare_in(group)):
                more = reader.read_row_group(i, columns=extra, use_threads=False)
                group = pa.Table.from_arrays(
                    [*group.columns, *more.columns], names=[*group.column_names, *extra]
                )
            else:
                for name in extra:
                    kind = reader.schema_arrow.field(name).type
                    group = group.append_column(name, pa.nulls(group.num_rows, kind))
            yield from _with_later(group).combine_chunks().to_batches()
    except (pa.ArrowInvalid, OSError) as exc:
        raise ColumnarError(f"not a readable Parquet object: {exc}") from exc


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
