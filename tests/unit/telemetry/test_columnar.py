"""Columnar telemetry: the Parquet day layout is lossless and canonical, and the vectorised
reduction gives the same figures as folding the intervals one by one."""

from __future__ import annotations

import math
import random
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from mlxfleet_agent import contract
from mlxfleet_operator.reports import columnar, dayagg, fixture, partials

DAY = date(2026, 10, 1)


def _hist(r: random.Random, bounds: tuple[float, ...]) -> contract.HistogramData | None:
    if r.random() < 0.3:
        return None
    counts = [r.randint(0, 5) for _ in range(len(bounds) + 1)]
    return contract.HistogramData(
        bounds=list(bounds), counts=counts, sum=r.random() * 10, count=sum(counts)
    )


def intervals(seed: int) -> list[contract.TelemetryInterval]:
    """Random nodes over two days and a bit: odd interval lengths, holes, overlaps, 0-3 slots
    with or without namespace and histograms, errors, swap events, every power source."""
    r = random.Random(seed)
    out = []
    base = datetime(2026, 10, 1, tzinfo=UTC)
    for n in range(r.randint(1, 5)):
        t = base - timedelta(hours=2)
        while t < base + timedelta(days=2, hours=2):
            step = r.choice([60.0, 60.0, 30.5, 3600.0])
            if r.random() < 0.05:
                t += timedelta(minutes=r.randint(5, 600))
            slots = [
                contract.SlotTelemetry(
                    slot=f"s{k}",
                    model=r.choice(["m1", "m2", "m3"]),
                    source=r.choice([None, "hf://org/m"]),
                    namespace=r.choice([None, "", "ns1", "ns2"]),
                    requests=r.randint(0, 50),
                    errors={e: r.randint(0, 3) for e in r.sample(["a", "b", "c"], r.randint(0, 2))},
                    prompt_tokens=r.randint(0, 1000),
                    completion_tokens=r.randint(0, 1000),
                    busy_seconds=r.random() * 60,
                    max_in_flight=r.randint(0, 8),
                    ttft_seconds=_hist(r, contract.LATENCY_BUCKETS_S),
                    time_per_output_token_seconds=_hist(r, contract.TOKEN_LATENCY_BUCKETS_S),
                    end_to_end_seconds=_hist(r, contract.LATENCY_BUCKETS_S),
                    queue_wait_seconds=_hist(r, contract.LATENCY_BUCKETS_S),
                    swaps={"Completed": 1} if r.random() < 0.02 else {},
                )
                for k in range(r.randint(0, 3))
            ]
            events = []
            if r.random() < 0.03:
                events.append(
                    contract.SwapEvent(
                        slot="s0",
                        outcome=r.choice(["Completed", "RolledBack"]),
                        at=t + timedelta(seconds=r.randint(0, 59)),
                        strategy=r.choice([None, "surge"]),
                        requests_failed=r.randint(0, 2),
                    )
                )
            out.append(
                contract.TelemetryInterval(
                    node=f"node-{n}",
                    interval_start=t,
                    interval_seconds=step,
                    agent_started_at=r.choice([None, base]),
                    slots=slots,
                    swap_events=events,
                    dropped_intervals=r.choice([0, 0, 1]),
                    host=contract.NodeTelemetry(
                        memory_total_bytes=r.choice([16, 32]) << 30,
                        memory_used_bytes_max=r.randint(0, 1 << 34),
                        memory_available_bytes_min=r.choice([0, r.randint(1, 1 << 34)]),
                        memory_pressure_max=r.choice(["normal", "warn", "critical"]),
                        uptime_seconds=r.random() * 1e5,
                        busy_seconds=r.random() * step,
                        energy_wh=r.random(),
                        average_power_watts=r.random() * 90,
                        power_source=r.choice(
                            ["unknown", "estimated", "powermetrics", "macmon", "rapl", "nvidia-smi"]
                        ),
                        **_heat(r, step),
                    ),
                )
            )
            t += timedelta(seconds=step)
            if r.random() < 0.05:  # the next one overlaps this one (a restarted agent)
                t -= timedelta(seconds=step / 2 + 0.25)
    return out + gateway_lines(r, base)


def _heat(r: random.Random, step: float) -> dict[str, Any]:
    """Heat figures, or none (a host without a source, an agent older than them)."""
    if r.random() < 0.3:
        return {}
    sampled = r.random() * step
    return {
        "thermal_pressure_max": r.choice([None, *contract.THERMAL_LEVELS]),
        "thermal_pressure_seconds": r.choice([0.0, r.random() * step]),
        "gpu_temperature_max_celsius": r.choice([None, 30 + r.random() * 70]),
        "cpu_temperature_max_celsius": r.choice([None, 30 + r.random() * 70]),
        "gpu_busy_seconds": sampled * r.random(),
        "gpu_sampled_seconds": sampled,
    }


def _key(r: random.Random) -> contract.KeyTelemetry:
    return contract.KeyTelemetry(
        key=r.choice(["anonymous", "key-a", "key-b"]),
        owner=r.choice([None, "ann"]),
        team=r.choice([None, "search", "ads"]),
        namespace=r.choice([None, "ns1"]),
        model=r.choice(["m1", "gpt-x"]),
        served=r.choice([None, "m1"]),
        backend=r.choice(["ns1/m1", "external:openai"]),
        external=r.random() < 0.3,
        requests=r.randint(0, 9),
        errors={"timeout": r.randint(1, 3)} if r.random() < 0.2 else {},
        rate_limited=r.randint(0, 2),
        prompt_tokens=r.randint(0, 500),
        completion_tokens=r.randint(0, 500),
    )


def gateway_lines(r: random.Random, base: datetime) -> list[contract.TelemetryInterval]:
    """Gateway replicas' per-key lines (not nodes), and now and then an agent line with keys."""
    out = []
    for g in range(r.randint(0, 2)):
        t = base - timedelta(hours=1)
        while t < base + timedelta(days=2, hours=1):
            out.append(
                contract.TelemetryInterval(
                    component="gateway",
                    node=f"gw-{g}",
                    interval_start=t,
                    interval_seconds=900.0,
                    keys=[_key(r) for _ in range(r.randint(0, 3))],
                )
            )
            t += timedelta(seconds=900)
    if r.random() < 0.5:
        out.append(
            contract.TelemetryInterval(
                node="agent-with-keys",
                interval_start=base + timedelta(hours=3),
                interval_seconds=60.0,
                keys=[_key(r)],
            )
        )
    return out


def fold(ivs: list[contract.TelemetryInterval], *, start: date, end: date) -> partials.Partial:
    """The reference: every interval folded one at a time, in plain Python."""
    out = partials.Partial()
    for iv in sorted(ivs, key=lambda i: (i.node, i.interval_start)):
        s = iv.interval_start.astimezone(UTC)
        if not start <= s.date() < end:
            continue
        if iv.component == "gateway":
            out.gateway.append(iv)
            continue
        t0 = s.timestamp()
        h = iv.host
        known = h.power_source != "unknown"
        part = partials.NodePart(
            covered_seconds=iv.interval_seconds,
            day_coverage={s.date(): iv.interval_seconds / partials.DAY_S},
            busy_seconds=h.busy_seconds,
            energy_wh=h.energy_wh if known else 0.0,
            energy_known=known,
            power_sources={h.power_source} if known else set(),
            memory_total_bytes=h.memory_total_bytes,
            memory_used_max=h.memory_used_bytes_max,
            memory_available_min=h.memory_available_bytes_min or None,
            pressure=partials.PRESSURE.index(h.memory_pressure_max),
            requests=sum(x.requests for x in iv.slots),
            tokens=sum(x.prompt_tokens + x.completion_tokens for x in iv.slots),
            models={x.model for x in iv.slots},
            spans=[(t0, t0 + iv.interval_seconds)],
            shortest=(t0 + iv.interval_seconds) - t0,
            dropped=iv.dropped_intervals,
            thermal=partials.THERMAL.index(h.thermal_pressure_max)
            if h.thermal_pressure_max
            else -1,
            thermal_seconds=h.thermal_pressure_seconds,
            gpu_temp_max=h.gpu_temperature_max_celsius,
            cpu_temp_max=h.cpu_temperature_max_celsius,
            gpu_busy_seconds=h.gpu_busy_seconds,
            gpu_sampled_seconds=h.gpu_sampled_seconds,
        )
        out.nodes.setdefault(iv.node, partials.NodePart()).merge(part)
        tokens = 0
        for x in iv.slots:
            m = partials.ModelPart(
                requests=x.requests,
                errors=sum(x.errors.values()),
                prompt_tokens=x.prompt_tokens,
                completion_tokens=x.completion_tokens,
                busy_seconds=x.busy_seconds,
                first=s,
                last=s + timedelta(seconds=iv.interval_seconds),
            )
            m.e2e.add(x.end_to_end_seconds)
            out.models.setdefault((iv.node, x.namespace, x.model), partials.ModelPart()).merge(m)
            tokens += x.prompt_tokens + x.completion_tokens
        out.daily_tokens[s.date()] = out.daily_tokens.get(s.date(), 0) + tokens
        for i, ev in enumerate(iv.swap_events):
            out.events.append(((ev.at, s, iv.node, i), ev))
    return out


def same(a: Any, b: Any, path: str = "") -> None:
    """Equal, with floats equal up to summation order."""
    if isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (path, a, b)
    elif isinstance(a, dict):
        assert sorted(a, key=repr) == sorted(b, key=repr), path
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{i}]")
    elif hasattr(a, "__dataclass_fields__"):
        for name in a.__dataclass_fields__:
            same(getattr(a, name), getattr(b, name), f"{path}.{name}")
    else:
        assert a == b, (path, a, b)


def test_every_contract_field_has_a_column() -> None:
    """A field added to the telemetry contract must be stored, or compaction would lose it."""
    for model, stored in columnar.FIELDS.items():
        assert set(model.model_fields) == stored, model.__name__


@pytest.mark.parametrize("seed", range(6))
def test_round_trip_is_exact(seed: int) -> None:
    ivs = intervals(seed)
    back = columnar.to_intervals(columnar.decode(columnar.encode(columnar.to_table(ivs))))
    assert sorted(back, key=lambda i: (i.node, i.interval_start)) == sorted(
        ivs, key=lambda i: (i.node, i.interval_start)
    )


def test_equal_content_gives_equal_bytes_whatever_the_order() -> None:
    ivs = intervals(7)
    a = columnar.encode(columnar.to_table(ivs))
    b = columnar.encode(columnar.to_table(list(reversed(ivs))))
    c = columnar.encode(columnar.union([columnar.decode(a), columnar.to_table(ivs[:10])]))
    assert a == b == c


def test_union_takes_a_repeated_interval_whole_from_the_last_table() -> None:
    ivs = intervals(3)[:20]
    changed = [iv.model_copy(update={"slots": [], "dropped_intervals": 99}) for iv in ivs[:5]]
    merged = columnar.to_intervals(
        columnar.union([columnar.to_table(ivs), columnar.to_table(changed)])
    )
    by_key = {(iv.node, iv.interval_start): iv for iv in merged}
    assert len(merged) == 20
    for iv in changed:
        assert by_key[(iv.node, iv.interval_start)] == iv


@pytest.mark.parametrize(
    ("seed", "row_group"),
    [pytest.param(s, g, id=f"seed{s}-rows{g}") for s in range(5) for g in (37, 131_072)],
)
def test_vectorised_reduction_equals_the_plain_fold(
    seed: int, row_group: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(columnar, "ROW_GROUP", row_group)  # small: rows split across groups
    ivs = intervals(seed)
    start, end = DAY, DAY + timedelta(days=2)
    got = dayagg.reduce(columnar.encode(columnar.to_table(ivs)), start=start, end=end)
    want = fold(ivs, start=start, end=end)
    got.events.sort(key=lambda e: e[0])
    want.events.sort(key=lambda e: e[0])
    same(got, want)


def test_histograms_with_other_buckets_cannot_be_merged() -> None:
    ivs = list(fixture.intervals(interval_hours=6, first=DAY, last=DAY))
    odd = (
        ivs[0]
        .slots[0]
        .model_copy(
            update={
                "end_to_end_seconds": contract.HistogramData(
                    bounds=[1.0], counts=[1, 0], sum=0.5, count=1
                )
            }
        )
    )
    ivs[0] = ivs[0].model_copy(update={"slots": [odd]})
    with pytest.raises(ValueError, match="different buckets"):
        dayagg.reduce(
            columnar.encode(columnar.to_table(ivs)), start=DAY, end=DAY + timedelta(days=1)
        )


def test_a_file_that_is_not_a_telemetry_day_is_refused_by_name() -> None:
    with pytest.raises(columnar.ColumnarError, match="not a readable Parquet object"):
        columnar.check(b"PAR1 not really")


def test_vectorised_reduction_equals_the_plain_fold_on_generated_days(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two days of the report benchmark's generated fleet (every minute of 6 nodes, 1-3 slots
    each, histograms on busy slots only): the reduction of the two day objects, row groups
    that split nodes included, equals the plain fold of the same intervals."""
    from benchmarks import report_bench

    monkeypatch.setattr(columnar, "ROW_GROUP", 4_000)
    names = report_bench._node_names(6)
    days = [DAY, DAY + timedelta(days=1)]
    tables = [report_bench.day_table(d, names, seed=i) for i, d in enumerate(days)]
    got = partials.Partial()
    for t in tables:
        got.merge(dayagg.reduce(columnar.encode(t), start=DAY, end=DAY + timedelta(days=2)))
    want = fold(
        [iv for t in tables for iv in columnar.to_intervals(t)],
        start=DAY,
        end=DAY + timedelta(days=2),
    )
    assert sum(m.e2e.count for m in want.models.values()) > 0
    same(got, want)


def test_histograms_of_other_widths_without_observations_are_ignored() -> None:
    """A slot whose histogram has other buckets but no observation (count 0) neither merges
    nor breaks the others' sums (the batch's lists are then of several widths)."""
    ivs = list(fixture.intervals(interval_hours=6, first=DAY, last=DAY))
    empty = contract.HistogramData(bounds=[1.0], counts=[0, 0], sum=0.0, count=0)
    odd = ivs[0].slots[0].model_copy(update={"end_to_end_seconds": empty})
    ivs[0] = ivs[0].model_copy(update={"slots": [odd, *ivs[0].slots[1:]]})
    end = DAY + timedelta(days=1)
    got = dayagg.reduce(columnar.encode(columnar.to_table(ivs)), start=DAY, end=end)
    same(got, fold(ivs, start=DAY, end=end))
