"""Pydantic models of the node agent's HTTP API: the wire contract between operator and agent.

This is the only agent module (with the pure `memory` estimate) that the operator imports.
May import: pydantic and the standard library only. Called by: the agent's app/slots code and the
operator's agent client adapter. Field names on the wire are camelCase; Python names snake_case.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

API_PREFIX = "/v1"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
SOURCE_SCHEMES = ("file", "hf", "s3")
HF_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class Wire(BaseModel):
    """Base for every contract model: camelCase on the wire, tolerant of fields added later."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
    )


class StrictWire(Wire):
    """Request bodies: unknown fields are rejected so typos surface as 422 naming the field."""

    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------------------------
# Model sources
# --------------------------------------------------------------------------------------------


class SourceError(ValueError):
    """A model source string that is not `file:///abs`, `hf://org/repo` or `s3://bucket/prefix`."""


def check_source(value: str) -> str:
    """Validate a model source and return it unchanged; raise SourceError naming what is allowed."""
    allowed = "file:///<absolute path>, hf://<org>/<repo> or s3://<bucket>/<prefix>"
    parts = urlsplit(value)
    if parts.scheme not in SOURCE_SCHEMES:
        raise SourceError(f"unknown scheme {parts.scheme!r}: allowed are {allowed}")
    if parts.scheme == "file":
        if parts.netloc:
            raise SourceError(f"file source must be file:///<absolute path>, got {value!r}")
        if not parts.path.startswith("/"):
            raise SourceError("file source path must be absolute")
        if any(seg in ("..", ".") for seg in parts.path.split("/")):
            raise SourceError("file source path must not contain '.' or '..' segments")
    elif parts.scheme == "hf":
        repo = parts.netloc + parts.path
        if not HF_REPO.match(repo):
            raise SourceError(f"hf source must be hf://<org>/<repo>, got {value!r}")
    else:
        if not S3_BUCKET.match(parts.netloc):
            raise SourceError(f"s3 source must be s3://<bucket>/<prefix>, got {value!r}")
        if ".." in parts.path.split("/"):
            raise SourceError("s3 prefix must not contain '..' segments")
    if parts.query or parts.fragment:
        raise SourceError("model source must not carry a query or fragment")
    return value


ModelSource = Annotated[str, Field(min_length=4, max_length=2048), AfterValidator(check_source)]


# --------------------------------------------------------------------------------------------
# Slots (desired state, PUT /v1/slots/{name})
# --------------------------------------------------------------------------------------------


class SwapStrategy(StrEnum):
    AUTO = "auto"
    SURGE = "surge"
    HOLD = "hold"


class SlotPhase(StrEnum):
    PENDING = "Pending"
    DOWNLOADING = "Downloading"
    LOADING = "Loading"
    WARMING = "Warming"
    READY = "Ready"
    SWAPPING = "Swapping"
    FAILED = "Failed"


class SwapOutcome(StrEnum):
    COMPLETED = "Completed"
    ROLLED_BACK = "RolledBack"
    FAILED = "Failed"


class ServerOptions(StrictWire):
    """mlx-lm server options; the same names as ModelDeployment spec.server."""

    decode_concurrency: int | None = Field(default=None, ge=1, le=1024)
    prompt_concurrency: int | None = Field(default=None, ge=1, le=1024)
    max_tokens: int | None = Field(default=None, ge=1, le=1_048_576)
    kv_bits: Literal[4, 8] | None = None
    chat_template_args: dict[str, Any] | None = None


class SwapPolicy(StrictWire):
    strategy: SwapStrategy = SwapStrategy.AUTO
    drain_timeout_seconds: int = Field(default=300, ge=1, le=3600)


class SlotSpec(StrictWire):
    """Desired state of one slot. Equal specs are idempotent; a different source/revision swaps."""

    source: ModelSource
    revision: str | None = Field(default=None, min_length=1, max_length=256)
    served_name: str = Field(
        min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"
    )
    context_length: int = Field(default=8192, ge=256, le=1_048_576)
    max_concurrency: int = Field(default=4, ge=1, le=256)
    memory_bytes: int | None = Field(
        default=None,
        ge=1,
        description="Overrides the estimate (ModelDeployment spec.resources.memory).",
    )
    server: ServerOptions = Field(default_factory=ServerOptions)
    swap: SwapPolicy = Field(default_factory=SwapPolicy)

    def model_identity(self) -> tuple[str, str | None]:
        """What a swap changes: the weights. Other fields restart in place (also zero-drop)."""
        return (self.source, self.revision)


class SlotStatus(Wire):
    name: str
    served_name: str
    source: str
    revision: str | None = None
    phase: SlotPhase
    ready: bool
    backend_port: int | None = None
    in_flight: int = 0
    queued: int = 0
    restarts: int = 0
    last_error: str | None = None
    estimated_memory_bytes: int | None = None
    spec: SlotSpec | None = None
    active_swap: str | None = Field(default=None, description="id of the swap in progress")


class SwapRecord(Wire):
    """One swap of one slot, newest first in GET /v1/slots/{name}/swaps."""

    id: str
    slot: str
    requested_strategy: SwapStrategy
    strategy: SwapStrategy = Field(description="what auto resolved to: surge or hold")
    from_source: str | None = None
    from_revision: str | None = None
    to_source: str
    to_revision: str | None = None
    started_at: datetime
    new_ready_at: datetime | None = None
    switched_at: datetime | None = None
    old_drained_at: datetime | None = None
    old_stopped_at: datetime | None = None
    finished_at: datetime | None = None
    requests_served: int = 0
    requests_failed: int = 0
    max_queue_wait_ms: float = 0.0
    outcome: SwapOutcome | None = Field(default=None, description="None while in progress")
    reason: str | None = None


class SwapList(Wire):
    items: list[SwapRecord]


# --------------------------------------------------------------------------------------------
# Model store
# --------------------------------------------------------------------------------------------


class ModelShape(Wire):
    """What the memory estimate needs from a model's config.json (GQA: kv heads, not heads)."""

    num_layers: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    dtype_bytes: float = Field(default=2.0, gt=0, description="bytes per KV element unquantized")


class CachedModel(Wire):
    id: str = Field(description="stable id of the cached copy (derived from source and revision)")
    source: str
    revision: str | None = None
    size_bytes: int = Field(ge=0, description="sum of the weight files (safetensors) on disk")
    total_bytes: int = Field(default=0, ge=0, description="everything on disk for this model")
    shape: ModelShape | None = None
    last_used: datetime | None = None
    in_use: bool = False


class ModelList(Wire):
    items: list[CachedModel]


class PrefetchRequest(StrictWire):
    source: ModelSource
    revision: str | None = Field(default=None, min_length=1, max_length=256)


# --------------------------------------------------------------------------------------------
# GET /v1/state
# --------------------------------------------------------------------------------------------


class MemoryInfo(Wire):
    total_bytes: int
    available_bytes: int
    budget_bytes: int = Field(description="what slots may use: total x usable fraction - reserved")
    slots_estimated_bytes: int = 0
    pressure: Literal["normal", "warn", "critical"] = "normal"


class DiskInfo(Wire):
    free_bytes: int
    total_bytes: int


class AgentState(Wire):
    agent_version: str
    os: str
    mlx_version: str | None = None
    mlx_lm_version: str | None = None
    chip: str
    memory: MemoryInfo
    disk: DiskInfo
    data_port: int
    started_at: datetime
    slots: list[SlotStatus]
    cached_models: list[CachedModel]
    counters: dict[str, float] = Field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Errors (4xx bodies)
# --------------------------------------------------------------------------------------------


class ErrorDetail(Wire):
    field: str | None = Field(default=None, description="dotted path of the offending field")
    message: str
    allowed: str | None = None


class ErrorBody(Wire):
    error: ErrorDetail


class InsufficientMemory(Wire):
    """507 body: the model (plus its KV cache) does not fit the agent's memory budget."""

    error: ErrorDetail
    estimate_bytes: int
    budget_bytes: int
    free_bytes: int


# --------------------------------------------------------------------------------------------
# Telemetry objects (agent -> S3 bucket -> operator reports). Counts and timings only, never text.
# --------------------------------------------------------------------------------------------

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
    power_source: Literal["powermetrics", "estimated", "unknown"] = "unknown"


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
    from datetime import UTC

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
