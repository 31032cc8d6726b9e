"""A built-in fixture month (October 2026) of fleet telemetry, for `report sample` and tests.

Three Macs, two models, constant hourly rates so every figure can be computed by hand:
- studio-1 (Mac Studio, 64 GiB): `llama-3.1-8b` (namespace team-chat), each hour 120 requests,
  60,000 prompt + 30,000 completion tokens, 1,200 s busy; e2e latency 60 / 48 / 12 requests in
  the (0.5,1], (1,2.5], (2.5,5] s buckets.
- mini-1, mini-2 (Mac mini, 16 GiB): `qwen-2.5-7b` (team-search), each hour 90 requests,
  36,000 + 18,000 tokens, 900 s busy; e2e 54 / 30 / 6 in the same buckets.
- mini-2 is down 15-16 Oct (no telemetry); studio-1 carries qwen for those 48 hours (failover).
- Nobody reports on 27 Oct (site power work): a fleet-wide gap.
- Swaps: 8 Oct 10:00 mini-1 search rolled back; 20 Oct 09:00 studio-1 chat completed (surge).
Energy is estimated from nominal watts (studio 12/95 W, minis 5/38 W idle/busy).
- Heat: mini-1 stands in a warm closet: every day from 13:00 to 16:00 UTC it spends 20 minutes
  of each hour at thermal pressure serious (1 h a day) and its GPU reaches 96 °C (CPU 91 °C);
  otherwise every Mac is nominal, GPUs at 58 °C (studio-1), 64 °C (minis), CPUs 10 °C cooler.
  GPU busy time is the slots' busy time.
May import: the standard library, `mlxfleet_agent.contract`, reports.columnar. Called by: cli
(sample), tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.reports import columnar

GIB = 1024**3
MONTH = (2026, 10)
FAILOVER = (date(2026, 10, 15), date(2026, 10, 17))  # mini-2 down, [start, end)
FLEET_GAP = date(2026, 10, 27)
LLAMA = "llama-3.1-8b"
QWEN = "qwen-2.5-7b"

CONFIG_YAML = """\
# Cost inputs (InferenceNode spec.cost) and the reference API price used by the sample reports.
nodes:
  studio-1: {purchasePriceUSD: 3999, amortizationMonths: 36, electricityUSDPerKWh: 0.30,
             idlePowerWatts: 12, busyPowerWatts: 95}
  mini-1: {purchasePriceUSD: 1399, amortizationMonths: 24, electricityUSDPerKWh: 0.30,
           idlePowerWatts: 5, busyPowerWatts: 38}
  mini-2: {purchasePriceUSD: 1399, amortizationMonths: 24, electricityUSDPerKWh: 0.30,
           idlePowerWatts: 5, busyPowerWatts: 38}
reference:
  name: gpt-4o
  provider: OpenAI
  asOf: 2026-10-01
  inputUSDPerMillion: 2.50
  outputUSDPerMillion: 10.00
namespaces:
  llama-3.1-8b: team-chat
  qwen-2.5-7b: team-search
"""


@dataclass(frozen=True, slots=True)
class Rate:
    """Per hour of one slot."""

    requests: int
    prompt: int
    completion: int
    busy_s: float
    e2e_buckets: tuple[int, int, int]  # (0.5,1], (1,2.5], (2.5,5]
    ttft_buckets: tuple[int, int]  # (0.1,0.25], (0.25,0.5]


LLAMA_RATE = Rate(120, 60_000, 30_000, 1200.0, (60, 48, 12), (90, 30))
QWEN_RATE = Rate(90, 36_000, 18_000, 900.0, (54, 30, 6), (72, 18))
WATTS = {"studio-1": (12.0, 95.0), "mini-1": (5.0, 38.0), "mini-2": (5.0, 38.0)}
MEMORY = {
    "studio-1": (64 * GIB, 40 * GIB),
    "mini-1": (16 * GIB, 11 * GIB),
    "mini-2": (16 * GIB, 11 * GIB),
}
HOT = {"mini-1": range(13, 16)}  # hours (UTC) in which the node spends 20 minutes throttled
GPU_C = {"studio-1": 58.0, "mini-1": 64.0, "mini-2": 64.0}
SOURCES = {
    LLAMA: "hf://meta-llama/Llama-3.1-8B-Instruct-4bit",
    QWEN: "hf://Qwen/Qwen2.5-7B-Instruct-4bit",
}


PREVIOUS_SHARE = 0.8  # the month before MONTH served this share of its traffic


def _scaled(rate: Rate, share: float) -> Rate:
    """`rate` with `share` of its requests, tokens and busy time (same latency shape)."""
    return Rate(
        round(rate.requests * share),
        round(rate.prompt * share),
        round(rate.completion * share),
        rate.busy_s * share,
        tuple(round(n * share) for n in rate.e2e_buckets),  # type: ignore[arg-type]
        tuple(round(n * share) for n in rate.ttft_buckets),  # type: ignore[arg-type]
    )


def _hist(bounds: tuple[float, ...], at: dict[float, int]) -> contract.HistogramData:
    counts = [0] * (len(bounds) + 1)
    total = 0.0
    for upper, n in at.items():
        i = bounds.index(upper)
        counts[i] += n
        lower = bounds[i - 1] if i else 0.0
        total += n * (lower + upper) / 2
    return contract.HistogramData(bounds=list(bounds), counts=counts, sum=total, count=sum(counts))


def _slot(slot: str, model: str, rate: Rate, hours: int) -> contract.SlotTelemetry:
    lat = contract.LATENCY_BUCKETS_S
    e1, e2, e3 = (n * hours for n in rate.e2e_buckets)
    t1, t2 = (n * hours for n in rate.ttft_buckets)
    return contract.SlotTelemetry(
        slot=slot,
        model=model,
        source=SOURCES[model],
        requests=rate.requests * hours,
        prompt_tokens=rate.prompt * hours,
        completion_tokens=rate.completion * hours,
        busy_seconds=rate.busy_s * hours,
        max_in_flight=4,
        ttft_seconds=_hist(lat, {0.25: t1, 0.5: t2}),
        end_to_end_seconds=_hist(lat, {1.0: e1, 2.5: e2, 5.0: e3}),
    )


def _swap_events(node: str, start: datetime, end: datetime) -> list[contract.SwapEvent]:
    events = [
        contract.SwapEvent(
            slot="search",
            outcome="RolledBack",
            at=datetime(2026, 10, 8, 10, 5, tzinfo=UTC),
            strategy="hold",
            from_source=SOURCES[QWEN],
            to_source=SOURCES[QWEN] + "@rev-b",
            requests_served=41,
            requests_failed=0,
            max_queue_wait_ms=850.0,
        ),
        contract.SwapEvent(
            slot="chat",
            outcome="Completed",
            at=datetime(2026, 10, 20, 9, 2, tzinfo=UTC),
            strategy="surge",
            from_source=SOURCES[LLAMA],
            to_source=SOURCES[LLAMA] + "@2026-10",
            requests_served=214,
            requests_failed=0,
            max_queue_wait_ms=0.0,
        ),
    ]
    owner = {"search": "mini-1", "chat": "studio-1"}
    return [e for e in events if owner[e.slot] == node and start <= e.at < end]


def intervals(
    *, interval_hours: int = 1, first: date | None = None, last: date | None = None
) -> Iterator[contract.TelemetryInterval]:
    """Every interval of the fixture month (or of days `first`..`last` inclusive)."""
    day = first or date(*MONTH, 1)
    stop = last or date(MONTH[0], MONTH[1] + 1, 1) - timedelta(days=1)
    while day <= stop:
        if day != FLEET_GAP:
            for hour in range(0, 24, interval_hours):
                start = datetime(day.year, day.month, day.day, hour, tzinfo=UTC)
                for node in ("mini-1", "mini-2", "studio-1"):
                    iv = _interval(node, start, interval_hours)
                    if iv is not None:
                        yield iv
        day += timedelta(days=1)


def _interval(node: str, start: datetime, hours: int) -> contract.TelemetryInterval | None:
    failover = FAILOVER[0] <= start.date() < FAILOVER[1]
    if node == "mini-2" and failover:
        return None
    llama, qwen = LLAMA_RATE, QWEN_RATE
    if (start.year, start.month) != MONTH:  # the month before: less traffic on the same Macs
        llama, qwen = _scaled(llama, PREVIOUS_SHARE), _scaled(qwen, PREVIOUS_SHARE)
    if node == "studio-1":
        slots = [_slot("chat", LLAMA, llama, hours)]
        if failover:
            slots.append(_slot("search", QWEN, qwen, hours))
    else:
        slots = [_slot("search", QWEN, qwen, hours)]
    seconds = hours * 3600.0
    busy = min(seconds, sum(s.busy_seconds for s in slots))
    idle_w, busy_w = WATTS[node]
    energy_wh = (idle_w * (seconds - busy) + busy_w * busy) / 3600
    total, used = MEMORY[node]
    if failover and node == "studio-1":
        used += 8 * GIB
    end = start + timedelta(seconds=seconds)
    hot_hours = sum(
        1 for h in range(start.hour, start.hour + hours) if node in HOT and h in HOT[node]
    )
    gpu = 96.0 if hot_hours else GPU_C[node]
    return contract.TelemetryInterval(
        node=node,
        interval_start=start,
        interval_seconds=seconds,
        agent_started_at=datetime(2026, 9, 28, tzinfo=UTC),
        slots=slots,
        host=contract.NodeTelemetry(
            memory_total_bytes=total,
            memory_used_bytes_max=used,
            memory_available_bytes_min=total - used,
            memory_pressure_max="normal",
            uptime_seconds=(end - datetime(2026, 9, 28, tzinfo=UTC)).total_seconds(),
            busy_seconds=busy,
            energy_wh=energy_wh,
            average_power_watts=energy_wh / hours,
            power_source="estimated",
            thermal_pressure_max="serious" if hot_hours else "nominal",
            thermal_pressure_seconds=1200.0 * hot_hours,
            gpu_temperature_max_celsius=gpu,
            cpu_temperature_max_celsius=gpu - (5.0 if hot_hours else 10.0),
            gpu_busy_seconds=busy,
            gpu_sampled_seconds=seconds,
        ),
        swap_events=_swap_events(node, start, end),
    )


class FixtureSource:
    """The fixture month as a `summary.TelemetrySource` (no bucket needed); `names` renames
    nodes (as agents shipping under other names would)."""

    def __init__(self, *, interval_hours: int = 1, names: dict[str, str] | None = None) -> None:
        self._by_day: dict[date, list[contract.TelemetryInterval]] = {}
        first = date(MONTH[0], MONTH[1] - 1, 1)  # and the month before, for month over month
        for iv in intervals(interval_hours=interval_hours, first=first):
            if names and iv.node in names:
                iv = iv.model_copy(update={"node": names[iv.node]})
            self._by_day.setdefault(iv.interval_start.date(), []).append(iv)

    def intervals_for_day(self, day: date) -> list[contract.TelemetryInterval]:
        return list(self._by_day.get(day, []))

    def day_parquet(self, day: date) -> bytes | None:
        found = self._by_day.get(day)
        return columnar.encode(columnar.to_table(found)) if found else None
