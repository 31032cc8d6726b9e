"""Telemetry objects (agent -> S3 bucket -> operator reports): one `TelemetryInterval` JSON line
per node and interval, and its object key (`IntervalCodec`: how the shippers key, write and read
one). Counts and timings only, never request text.

May import: pydantic and the standard library only (pure).
Called by: the agent's telemetry, the gateway's shipper, the operator's object store adapter and
reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import Field

from mlxfleet_agent.contract.base import Wire

TELEMETRY_SCHEMA_VERSION = 1
TELEMETRY_KEY_LAYOUT = "v1"
# Upper bounds (seconds) of the histogram buckets; a final +Inf bucket is implicit.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
TOKEN_LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.035,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    1.0,
)
THERMAL_LEVELS = ("nominal", "fair", "serious", "critical")
ThermalLevel = Literal["nominal", "fair", "serious", "critical"]
TELEMETRY_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


class HistogramData(Wire):
    """A fixed-bucket histogram: `counts[i]` observations <= `bounds[i]`, the last one above all."""

    bounds: list[float]
    counts: list[int]
    sum: float = 0.0
    count: int = 0


class SlotTelemetry(Wire):
    """One slot (and the model it served) during one interval."""

    slot: str
    model: str = Field(description="the served model name clients ask for")
    source: str | None = None
    namespace: str | None = None
    requests: int = 0
    errors: dict[str, int] = Field(default_factory=dict, description="failed requests by kind")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    busy_seconds: float = Field(default=0.0, description="time with at least one request in flight")
    max_in_flight: int = 0
    ttft_seconds: HistogramData | None = None
    time_per_output_token_seconds: HistogramData | None = None
    end_to_end_seconds: HistogramData | None = None
    queue_wait_seconds: HistogramData | None = None
    swaps: dict[str, int] = Field(default_factory=dict, description="finished swaps by outcome")


class SwapEvent(Wire):
    """A finished swap (subset of SwapRecord; sources only, no request data)."""

    slot: str
    outcome: str
    at: datetime
    strategy: str | None = None
    from_source: str | None = None
    to_source: str | None = None
    requests_served: int = 0
    requests_failed: int = 0
    max_queue_wait_ms: float = 0.0


class NodeTelemetry(Wire):
    """Host figures over one interval: extremes for memory, totals for time and energy."""

    memory_total_bytes: int = 0
    memory_used_bytes_max: int = 0
    memory_available_bytes_min: int = 0
    memory_pressure_max: Literal["normal", "warn", "critical"] = "normal"
    uptime_seconds: float = Field(default=0.0, description="agent uptime at the interval's end")
    busy_seconds: float = Field(default=0.0, description="time with any slot busy")
    energy_wh: float = 0.0
    average_power_watts: float = 0.0
    power_source: Literal[
        "powermetrics", "macmon", "rapl", "nvidia-smi", "estimated", "unknown"
    ] = Field(
        default="unknown",
        description="the meter the energy was measured with, `estimated` from the node's "
        "nominal idle/busy watts, `unknown` without either",
    )
    thermal_pressure_max: ThermalLevel | None = Field(
        default=None, description="the worst thermal pressure level sampled; absent: not measured"
    )
    thermal_pressure_seconds: float = Field(
        default=0.0, ge=0, description="time at thermal pressure serious or critical"
    )
    gpu_temperature_max_celsius: float | None = None
    cpu_temperature_max_celsius: float | None = None
    gpu_busy_seconds: float = Field(
        default=0.0, ge=0, description="GPU utilisation x time over the sampled time (below)"
    )
    gpu_sampled_seconds: float = Field(
        default=0.0,
        ge=0,
        description="time with a GPU utilisation reading (its mean: busy / sampled)",
    )


class KeyTelemetry(Wire):
    """One API key's use of one model through a gateway during one interval (gateway only).

    Names the key by its Secret's name, never the key itself; no request text."""

    key: str = Field(description="name of the API key's Secret (`anonymous` without a key)")
    owner: str | None = None
    team: str | None = None
    namespace: str | None = Field(default=None, description="namespace of the model served")
    model: str = Field(description="the name the client asked for")
    served: str | None = Field(
        default=None, description="served name of the ModelDeployment that answered (local only)"
    )
    backend: str = Field(description="<namespace>/<deployment>, or external:... for a provider")
    external: bool = False
    requests: int = 0
    errors: dict[str, int] = Field(default_factory=dict, description="failed requests by kind")
    rate_limited: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class TelemetryInterval(Wire):
    """One JSON line in the bucket: the aggregates of one node (or gateway replica) over one
    interval. Gateway lines (`component: gateway`) carry `keys` and no slots or host figures."""

    schema_version: int = TELEMETRY_SCHEMA_VERSION
    component: Literal["agent", "gateway"] = "agent"
    node: str = Field(pattern=TELEMETRY_NODE.pattern)
    interval_start: datetime
    interval_seconds: float = Field(gt=0)
    agent_started_at: datetime | None = None
    slots: list[SlotTelemetry] = Field(default_factory=list)
    host: NodeTelemetry = Field(default_factory=NodeTelemetry)
    swap_events: list[SwapEvent] = Field(default_factory=list)
    dropped_intervals: int = Field(
        default=0, description="intervals dropped from the full disk buffer before this one"
    )
    keys: list[KeyTelemetry] = Field(default_factory=list, description="gateway: usage per key")


def telemetry_key(prefix: str, node: str, interval_start: datetime) -> str:
    """`<prefix>/v1/date=YYYY-MM-DD/node=<node>/<start>.jsonl` (UTC): one key per interval."""
    if not TELEMETRY_NODE.match(node):
        raise ValueError(f"node name {node!r} is not usable in an object key")
    if interval_start.tzinfo is None:
        raise ValueError("interval_start must be timezone-aware")
    start = interval_start.astimezone(UTC)
    head = prefix.strip("/")
    parts = [head] if head else []
    parts += [
        TELEMETRY_KEY_LAYOUT,
        f"date={start:%Y-%m-%d}",
        f"node={node}",
        f"{start:%Y%m%dT%H%M%SZ}.jsonl",
    ]
    return "/".join(parts)


def telemetry_date_prefix(prefix: str, day: str) -> str:
    """Key prefix of one UTC day (`YYYY-MM-DD`) across all nodes."""
    head = prefix.strip("/")
    return "/".join([*([head] if head else []), TELEMETRY_KEY_LAYOUT, f"date={day}", ""])


@dataclass(frozen=True, slots=True)
class IntervalCodec:
    """How the telemetry shipper (mlxfleet_common.telemetry.shipper, the agent's and the
    gateway's) writes a `TelemetryInterval`: one JSON document (the object is it and a newline),
    a spool file named by interval start and node, the object key under `prefix`."""

    prefix: str = ""

    def key(self, interval: TelemetryInterval) -> str:
        return telemetry_key(self.prefix, interval.node, interval.interval_start)

    @staticmethod
    def dump(interval: TelemetryInterval) -> bytes:
        return interval.model_dump_json().encode()

    @staticmethod
    def load(data: bytes) -> TelemetryInterval:
        return TelemetryInterval.model_validate_json(data)

    @staticmethod
    def name(interval: TelemetryInterval) -> str:
        start = round(interval.interval_start.timestamp() * 1000)
        return f"{start:016d}-{interval.node}.json"  # two names in one window: two files
