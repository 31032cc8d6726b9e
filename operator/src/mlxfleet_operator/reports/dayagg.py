"""Reduces a day's columnar telemetry to the few figures a report needs, vectorised.

A month of 500 nodes is 21.6 million intervals: far too many to turn into Python objects one by
one. `reduce` walks a day's Parquet object a row group at a time and folds it with numpy into a
`partials.Partial`: per node (coverage, busy time, energy, memory extremes, heat, requests,
tokens, models, coalesced reported spans), per (node, namespace, model) (requests, errors,
tokens, busy time, latency histograms, first and last presence), tokens per day, the swap events
and the gateway's lines (whole, for reports.teams). Partials of several row groups and days merge;
`summary.summarise` turns the merged one into figures. Reduction order is fixed by the object's
bytes, so equal objects give equal figures.
May import: numpy, pyarrow, the standard library, `mlxfleet_agent.contract`, reports.columnar,
reports.partials. Called by: reports.summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mlxfleet_agent import contract
from mlxfleet_operator.reports import columnar, partials

DAY_US = 86_400_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LATENCY = ("e2e",)  # the histograms the reports show (end to end; TTFT is in no report)
HEAT = (  # host heat columns (absent from objects older than them: nulls, columnar.LATER)
    "thermal_pressure_max",
    "thermal_pressure_seconds",
    "gpu_temperature_max_celsius",
    "cpu_temperature_max_celsius",
    "gpu_busy_seconds",
    "gpu_sampled_seconds",
)
COLUMNS = [
    "kind",
    "node",
    "interval_start",
    "seq",
    "interval_seconds",
    "dropped_intervals",
    *(
        f"host_{k}"
        for k in (
            "memory_total_bytes",
            "memory_used_bytes_max",
            "memory_available_bytes_min",
            "memory_pressure_max",
            "busy_seconds",
            "energy_wh",
            "power_source",
            *HEAT,
        )
    ),
    *(
        f"slot_{k}"
        for k in (
            "model",
            "namespace",
            "requests",
            "errors",
            "prompt_tokens",
            "completion_tokens",
            "busy_seconds",
        )
    ),
    *(f"{h}_{part}" for h in LATENCY for part in ("bounds", "counts", "sum", "count")),
    "gateway_line",
]
EVENT_COLUMNS = [f"event_{k}" for k in columnar.EVENT_FIELDS]  # read for row groups with events
# string columns read as dictionaries: few distinct values, grouped by code
DICTIONARY = [
    "node",
    "host_memory_pressure_max",
    "host_power_source",
    "host_thermal_pressure_max",
    "slot_model",
    "slot_namespace",
    *(f"{h}_bounds" for h in LATENCY),
]


def _coalesced(
    starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]
) -> list[tuple[float, float]]:
    """`partials.coalesce` of spans sorted by (start, end), vectorised."""
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]])
    joined_ends = np.maximum.reduceat(ends, first)
    return list(zip(starts[first].tolist(), joined_ends.tolist(), strict=True))


def reduce(data: bytes, *, start: date, end: date) -> partials.Partial:
    """The figures of one Parquet day object, for intervals starting in [start, end)."""
    lo = (datetime.combine(start, datetime.min.time(), tzinfo=UTC) - EPOCH) // timedelta(
        microseconds=1
    )
    hi = lo + (end - start).days * DAY_US
    total = partials.Partial()
    for batch in columnar.batches(
        data, columns=COLUMNS, dictionary=DICTIONARY, rare=EVENT_COLUMNS, rare_in=_has_events
    ):
        total.merge(_reduce_batch(batch, lo=lo, hi=hi))
    return total


def _has_events(group: pa.Table) -> bool:
    return bool(pc.any(pc.equal(group.column("kind"), columnar.EVENT)).as_py())


# ---- one batch ------------------------------------------------------------------------------


def _np(batch: pa.RecordBatch, name: str, fill: Any = 0) -> np.ndarray[Any, Any]:
    col = batch.column(name)
    if col.null_count:
        col = pc.fill_null(col, fill)
    return np.asarray(col.to_numpy(zero_copy_only=False))


def _codes(array: pa.Array) -> tuple[np.ndarray[Any, Any], list[Any]]:
    """Integer codes (nulls: -1) and the distinct values of a string column. A column read as
    a dictionary (Parquet's own, `DICTIONARY`) is used as it is when its values do not repeat:
    no hashing of every row."""
    if pa.types.is_dictionary(array.type):
        values = array.dictionary
        if values.null_count == 0 and len(pc.unique(values)) == len(values):
            return _indices(array.indices), values.to_pylist()
        array = array.cast(array.type.value_type)
    enc = pc.dictionary_encode(array)
    return _indices(enc.indices), enc.dictionary.to_pylist()


def _indices(indices: pa.Array) -> np.ndarray[Any, Any]:
    if indices.null_count:
        indices = pc.fill_null(indices, -1)
    return np.asarray(indices.to_numpy(zero_copy_only=False), dtype=np.int64)


class _Groups:
    """Rows grouped by an integer key, in first-row order within each group (stable). Keys
    already in order (interval rows by node: the canonical row order) are not sorted again."""

    def __init__(self, keys: np.ndarray[Any, Any]) -> None:
        self.n = len(keys)
        ordered = self.n < 2 or bool(np.all(keys[1:] >= keys[:-1]))
        self.order: np.ndarray[Any, Any] | None = (
            None if ordered else np.argsort(keys, kind="stable")
        )
        sorted_keys = keys if self.order is None else keys[self.order]
        self.starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
        self.keys = sorted_keys[self.starts]

    def _sorted(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return values if self.order is None else values[self.order]

    def index(self) -> np.ndarray[Any, Any]:
        """The group of each row, in the rows' own order."""
        groups = np.repeat(np.arange(len(self.keys)), np.diff(np.r_[self.starts, self.n]))
        if self.order is None:
            return groups
        out = np.empty(self.n, dtype=np.int64)
        out[self.order] = groups
        return out

    def sum(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.add.reduceat(self._sorted(values), self.starts, axis=0)

    def max(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.maximum.reduceat(self._sorted(values), self.starts)

    def min(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.minimum.reduceat(self._sorted(values), self.starts)

    def any(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.logical_or.reduceat(self._sorted(values), self.starts)


@dataclass(frozen=True, slots=True)
class _Rows:
    """One batch with its node codes and interval starts (microseconds), shared by the kinds."""

    batch: pa.RecordBatch
    node: np.ndarray[Any, Any]  # code per row, into `names`
    names: list[str]
    start_us: np.ndarray[Any, Any]


def _reduce_batch(batch: pa.RecordBatch, *, lo: int, hi: int) -> partials.Partial:
    out = partials.Partial()
    kind = _np(batch, "kind", -1)
    start_us = np.asarray(
        pc.fill_null(batch.column("interval_start").cast(pa.int64()), 0).to_numpy(
            zero_copy_only=False
        )
    )
    inside = (start_us >= lo) & (start_us < hi)
    node, names = _codes(batch.column("node"))
    rows = _Rows(batch, node, names, start_us)
    for code, fold in (
        (columnar.INTERVAL, _intervals),
        (columnar.SLOT, _slots),
        (columnar.EVENT, _events),
    ):
        picked = np.flatnonzero((kind == code) & inside)
        if len(picked):
            fold(out, rows, picked)
    lines = batch.column("gateway_line")
    for r in np.flatnonzero((kind == columnar.GATEWAY) & inside):
        out.gateway.append(columnar.gateway_line(lines[int(r)].as_py()))
    return out


def _day(us: int) -> date:
    return (EPOCH + timedelta(microseconds=int(us))).date()


def _intervals(out: partials.Partial, b: _Rows, rows: np.ndarray[Any, Any]) -> None:
    batch, node, names, start_us = b.batch, b.node, b.names, b.start_us
    seconds = _np(batch, "interval_seconds", 0.0)[rows]
    starts = start_us[rows]
    groups = _Groups(node[rows])
    covered = groups.sum(seconds)
    busy = groups.sum(_np(batch, "host_busy_seconds", 0.0)[rows])
    source_code, sources = _codes(batch.column("host_power_source"))
    source_code = source_code[rows]
    known_codes = [i for i, s in enumerate(sources) if s not in (None, "unknown")]
    known = np.isin(source_code, known_codes)
    energy = groups.sum(np.where(known, _np(batch, "host_energy_wh", 0.0)[rows], 0.0))
    energy_known = groups.any(known)
    total = groups.max(_np(batch, "host_memory_total_bytes")[rows])
    used = groups.max(_np(batch, "host_memory_used_bytes_max")[rows])
    avail_raw = _np(batch, "host_memory_available_bytes_min")[rows]
    big = np.iinfo(np.int64).max
    avail = groups.min(np.where(avail_raw != 0, avail_raw, big))
    pressure_code, pressures = _codes(batch.column("host_memory_pressure_max"))
    rank = np.array(
        [partials.PRESSURE.index(p) if p in partials.PRESSURE else 0 for p in pressures] + [0]
    )
    pressure = groups.max(rank[pressure_code[rows]])
    dropped = groups.sum(_np(batch, "dropped_intervals")[rows])
    heat = _heat(batch, rows, groups)
    start_s = starts / 1e6
    length = (start_s + seconds) - start_s
    shortest = groups.min(length)
    day_idx = starts // DAY_US
    day_groups = _Groups(node[rows] * (1 << 24) + (day_idx - day_idx.min()))
    day_cov = day_groups.sum(seconds / partials.DAY_S)
    day_first = day_groups.min(starts)
    for g, code in enumerate(groups.keys):
        part = out.nodes.setdefault(names[code], partials.NodePart())
        part.covered_seconds += float(covered[g])
        part.busy_seconds += float(busy[g])
        part.energy_wh += float(energy[g])
        part.energy_known |= bool(energy_known[g])
        part.memory_total_bytes = max(part.memory_total_bytes, int(total[g]))
        part.memory_used_max = max(part.memory_used_max, int(used[g]))
        if avail[g] != big:
            part.memory_available_min = int(avail[g])
        part.pressure = max(part.pressure, int(pressure[g]))
        part.dropped += int(dropped[g])
        part.shortest = float(shortest[g])
        part.merge_heat(heat[g])
    for g, key in enumerate(day_groups.keys):
        part = out.nodes[names[int(key) >> 24]]
        d = _day(int(day_first[g]))
        part.day_coverage[d] = part.day_coverage.get(d, 0.0) + float(day_cov[g])
        out.daily_tokens.setdefault(d, 0)
    for code in np.unique(node[rows][known]):
        mask = (node[rows] == code) & known
        out.nodes[names[code]].power_sources |= {
            sources[int(c)] for c in np.unique(source_code[mask])
        }
    ends = start_s + seconds
    order = np.lexsort((ends, start_s, node[rows]))  # as sorted() orders (start, end) pairs
    by_node = _Groups(node[rows][order])
    bounds = np.r_[by_node.starts, len(order)]
    for g, code in enumerate(by_node.keys):
        sel = order[bounds[g] : bounds[g + 1]]
        out.nodes[names[code]].spans = _coalesced(start_s[sel], ends[sel])


def _heat(
    batch: pa.RecordBatch, rows: np.ndarray[Any, Any], groups: _Groups
) -> list[partials.NodePart]:
    """Per node group: the worst thermal level, time under pressure, the hottest GPU and CPU,
    GPU busy and sampled time (nodes that never reported heat keep the defaults: unknown)."""
    level_code, levels = _codes(batch.column("host_thermal_pressure_max"))
    # the code of a null is -1: the appended last entry, -1 (never reported)
    ranks = np.array(
        [partials.THERMAL.index(x) if x in partials.THERMAL else -1 for x in levels] + [-1]
    )
    worst = groups.max(ranks[level_code[rows]])
    seconds = groups.sum(_np(batch, "host_thermal_pressure_seconds", 0.0)[rows])
    busy = groups.sum(_np(batch, "host_gpu_busy_seconds", 0.0)[rows])
    sampled = groups.sum(_np(batch, "host_gpu_sampled_seconds", 0.0)[rows])
    gpu = groups.max(_np(batch, "host_gpu_temperature_max_celsius", -np.inf)[rows])
    cpu = groups.max(_np(batch, "host_cpu_temperature_max_celsius", -np.inf)[rows])
    return [
        partials.NodePart(
            thermal=int(worst[g]),
            thermal_seconds=float(seconds[g]),
            gpu_temp_max=float(gpu[g]) if np.isfinite(gpu[g]) else None,
            cpu_temp_max=float(cpu[g]) if np.isfinite(cpu[g]) else None,
            gpu_busy_seconds=float(busy[g]),
            gpu_sampled_seconds=float(sampled[g]),
        )
        for g in range(len(groups.keys))
    ]


def _slots(out: partials.Partial, b: _Rows, rows: np.ndarray[Any, Any]) -> None:
    batch, node, names, start_us = b.batch, b.node, b.names, b.start_us
    model, models = _codes(batch.column("slot_model"))
    ns, namespaces = _codes(batch.column("slot_namespace"))
    k = node[rows]
    per_node = max(len(models), 1) * (len(namespaces) + 1)
    groups = _Groups(k * per_node + model[rows] * (len(namespaces) + 1) + ns[rows] + 1)
    requests = _np(batch, "slot_requests")[rows]
    tokens = _np(batch, "slot_prompt_tokens")[rows] + _np(batch, "slot_completion_tokens")[rows]
    sums = {
        "requests": groups.sum(requests),
        "errors": groups.sum(_map_sums(batch.column("slot_errors"))[rows]),
        "prompt": groups.sum(_np(batch, "slot_prompt_tokens")[rows]),
        "completion": groups.sum(_np(batch, "slot_completion_tokens")[rows]),
        "busy": groups.sum(_np(batch, "slot_busy_seconds", 0.0)[rows]),
    }
    starts = start_us[rows]
    first = groups.min(starts)
    last_end = groups.max(starts + _micros(_np(batch, "interval_seconds", 0.0)[rows]))
    hists = {h: _hists(batch, h, rows, groups) for h in LATENCY}
    for g, key in enumerate(groups.keys):
        node_code, rest = divmod(int(key), per_node)
        model_code, ns_code = divmod(rest, len(namespaces) + 1)
        name, model_name = names[node_code], models[model_code]
        mkey: partials.ModelKey = (name, namespaces[ns_code - 1] if ns_code else None, model_name)
        part = out.models.setdefault(mkey, partials.ModelPart())
        part.merge(
            partials.ModelPart(
                requests=int(sums["requests"][g]),
                errors=int(sums["errors"][g]),
                prompt_tokens=int(sums["prompt"][g]),
                completion_tokens=int(sums["completion"][g]),
                busy_seconds=float(sums["busy"][g]),
                e2e=hists["e2e"][g],
                first=EPOCH + timedelta(microseconds=int(first[g])),
                last=EPOCH + timedelta(microseconds=int(last_end[g])),
            )
        )
        out.nodes.setdefault(name, partials.NodePart()).models.add(model_name)
    node_groups = _Groups(k)
    node_requests = node_groups.sum(requests)
    node_tokens = node_groups.sum(tokens)
    for g, code in enumerate(node_groups.keys):
        part_n = out.nodes.setdefault(names[code], partials.NodePart())
        part_n.requests += int(node_requests[g])
        part_n.tokens += int(node_tokens[g])
    day_groups = _Groups(starts // DAY_US)
    day_tokens = day_groups.sum(tokens)
    for g, d in enumerate(day_groups.keys):
        day = _day(int(d) * DAY_US)
        out.daily_tokens[day] = out.daily_tokens.get(day, 0) + int(day_tokens[g])


def _micros(seconds: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """`timedelta(seconds=x)` in microseconds, exactly as Python rounds it, per value."""
    distinct, inverse = np.unique(seconds, return_inverse=True)
    exact = [timedelta(seconds=float(x)) // timedelta(microseconds=1) for x in distinct]
    return np.asarray(exact, dtype=np.int64)[inverse.reshape(-1)]


def _map_sums(array: pa.Array) -> np.ndarray[Any, Any]:
    """Per row, the sum of a map<string, int64> column's values (nulls: 0)."""
    offsets = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    values = np.asarray(
        pc.fill_null(array.items, 0).to_numpy(zero_copy_only=False), dtype=np.int64
    )[offsets[0] : offsets[-1]]
    lengths = np.diff(offsets)
    parents = np.repeat(np.arange(len(lengths)), lengths)
    out = np.zeros(len(lengths), dtype=np.int64)
    np.add.at(out, parents, values)
    return out


def _hists(
    batch: pa.RecordBatch, prefix: str, rows: np.ndarray[Any, Any], groups: _Groups
) -> list[partials.Hist]:
    """One merged histogram per group of `rows` (empty where no row has observations)."""
    count = _np(batch, f"{prefix}_count")[rows]
    total = _np(batch, f"{prefix}_sum", 0.0)[rows]
    bounds_code, bounds = _codes(batch.column(f"{prefix}_bounds"))
    counts = batch.column(f"{prefix}_counts")
    offsets = np.asarray(counts.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    values = counts.values
    if values.null_count:
        values = pc.fill_null(values, 0)
    flat = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)
    used = (count != 0) & (bounds_code[rows] >= 0)
    out = [partials.Hist() for _ in groups.keys]
    if not used.any():
        return out
    group_of = groups.index()
    sel = rows[used]
    lengths = offsets[sel + 1] - offsets[sel]
    width = int(lengths[0])
    if bool(np.all(lengths == width)):
        # one sum per (group, buckets) and bucket, in row order (np.add.at: exact integers,
        # no sort, one pass over every bucket of every row)
        nb = len(bounds) + 1
        key = group_of[used] * nb + bounds_code[sel]
        size = len(groups.keys) * nb
        present = np.flatnonzero(np.bincount(key, minlength=size))
        cells = _cells(flat, offsets, sel, width)
        buckets = np.zeros(size * width, dtype=np.int64)
        cell_key = (key[:, None] * width + np.arange(width)[None, :]).reshape(-1)
        np.add.at(buckets, cell_key, cells.reshape(-1))
        bucket_sums = buckets.reshape(size, width)[present].tolist()
        counts_of = np.zeros(size, dtype=np.int64)
        np.add.at(counts_of, key, count[used])
        count_sums = counts_of[present].tolist()
        totals = np.zeros(size, dtype=np.float64)
        np.add.at(totals, key, total[used])
        total_sums = totals[present].tolist()
        for g, k in enumerate(present.tolist()):
            grp, code = divmod(k, nb)
            out[grp].merge(
                partials.Hist(
                    tuple(columnar.bounds_of(bounds[code])),
                    bucket_sums[g],
                    count_sums[g],
                    total_sums[g],
                )
            )
        return out
    for i, r in enumerate(rows):  # ragged counts: the slow path, with the same checks
        if not used[i]:
            continue
        out[int(group_of[i])].merge(
            partials.Hist(
                tuple(columnar.bounds_of(bounds[bounds_code[r]])),
                [int(x) for x in flat[offsets[r] : offsets[r + 1]]],
                int(count[i]),
                float(total[i]),
            )
        )
    return out


def _cells(
    flat: np.ndarray[Any, Any], offsets: np.ndarray[Any, Any], sel: np.ndarray[Any, Any], width: int
) -> np.ndarray[Any, Any]:
    """The `width` counts of each row in `sel`, one row each. When every list of the batch has
    that width (or none), the lists are one `(n, width)` block: rows taken whole, or as they are."""
    lengths = np.diff(offsets)
    if width and bool(np.all((lengths == 0) | (lengths == width))):
        block: np.ndarray[Any, Any] = flat[offsets[0] : offsets[-1]].reshape(-1, width)
        at = (offsets[sel] - offsets[0]) // width
        if len(at) == len(block) and bool(np.all(at == np.arange(len(at)))):
            return block
        return np.asarray(block[at])
    return np.asarray(flat[offsets[sel][:, None] + np.arange(width)[None, :]])


def _events(out: partials.Partial, b: _Rows, rows: np.ndarray[Any, Any]) -> None:
    batch, node, names, start_us = b.batch, b.node, b.names, b.start_us
    cols = {
        k: batch.column(f"event_{k}").take(pa.array(rows)).to_pylist()
        for k in columnar.EVENT_FIELDS
    }
    seq = _np(batch, "seq")[rows]
    for i, r in enumerate(rows):
        ev = contract.SwapEvent(**{k: cols[k][i] for k in columnar.EVENT_FIELDS})
        start = EPOCH + timedelta(microseconds=int(start_us[r]))
        out.events.append(((ev.at, start, names[int(node[r])], int(seq[i])), ev))
