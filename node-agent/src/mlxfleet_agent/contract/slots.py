"""Slots on the wire: the desired `SlotSpec` (PUT /v1/slots/{name}), its `SlotStatus` (with the
`DownloadProgress` of weights being fetched), the swap policy and the `SwapRecord` each swap
leaves.

May import: pydantic and the standard library only (pure).
Called by: the agent (control API, slots, data plane), the operator's agent client and its API
models.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

from mlxfleet_agent.contract.base import StrictWire, Wire
from mlxfleet_agent.contract.engines import EngineSpec
from mlxfleet_agent.contract.models import DownloadProgress
from mlxfleet_agent.contract.shards import RankSpec
from mlxfleet_agent.contract.sources import ModelSource


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


CHAT_TEMPLATE_ARGS_MAX_KEYS = 64
CHAT_TEMPLATE_ARGS_MAX_DEPTH = 8
CHAT_TEMPLATE_ARGS_MAX_BYTES = 16 * 1024


def check_chat_template_args(value: dict[str, Any]) -> dict[str, Any]:
    """Bound a free-form JSON object: nesting depth (each object or list is a level; checked
    without recursion, so any depth is refused cheaply) and size as compact JSON (UTF-8)."""
    limit = CHAT_TEMPLATE_ARGS_MAX_DEPTH
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise ValueError(f"is nested deeper than {limit} levels (each object or list is one)")
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"is not plain JSON: {exc}") from exc
    size = len(text.encode())
    if size > CHAT_TEMPLATE_ARGS_MAX_BYTES:
        raise ValueError(
            f"is {size} bytes as compact JSON; at most {CHAT_TEMPLATE_ARGS_MAX_BYTES} bytes"
        )
    return value


def check_image_url_prefix(value: str) -> str:
    """An allowed image URL prefix: http(s)://host[:port]/path/ (ends with '/', no user info,
    query or fragment), so that a prefix can never match another host or a sibling path."""
    parts = urlsplit(value)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or "@" in parts.netloc
        or not parts.path.endswith("/")
        or parts.query
        or parts.fragment
        or not value.isprintable()
        or " " in value
    ):
        raise ValueError(
            f"allowedImageUrls entry {value!r} must look like https://host[:port]/path/ "
            "(ending with '/', no user, query or fragment)"
        )
    return value


REQUEST_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
REQUEST_ID_MAX = 128
RequestId = Annotated[
    str, Field(min_length=1, max_length=REQUEST_ID_MAX, pattern=REQUEST_ID_PATTERN)
]
"""The caller's id for the swap a PUT /v1/slots/{name}?requestId=... may start: the swap's record
echoes it, so the caller finds its own swap without comparing clocks."""

ChatTemplateArgs = Annotated[
    dict[str, Any],
    Field(max_length=CHAT_TEMPLATE_ARGS_MAX_KEYS),
    AfterValidator(check_chat_template_args),
]
"""Arguments for the tokenizer's chat template: a JSON object of at most 64 keys, 8 levels and
16 KiB (it becomes one command-line argument of the backend and part of the persisted state)."""

ImageUrlPrefix = Annotated[
    str, Field(min_length=8, max_length=2048), AfterValidator(check_image_url_prefix)
]


MLX_DEFAULT_MAX_TOKENS = 512  # mlx_lm.server's --max-tokens default


def completion_cap(*, asked: int | None, max_tokens: int | None, context_length: int) -> int:
    """The most tokens one answer may generate on a slot (chat and text completions): the
    request's own cap clamped to the slot's (`server.maxTokens`, else `contextLength`); without
    one, `server.maxTokens`, else mlx_lm's default within the slot's cap. The agent's data plane
    writes it into each request; the gateway's token limits reserve it."""
    cap = max_tokens or context_length
    if asked is None:
        return max_tokens or min(MLX_DEFAULT_MAX_TOKENS, cap)
    return min(asked, cap)


class ServerOptions(StrictWire):
    """mlx-lm server options; the same names as ModelDeployment spec.server."""

    decode_concurrency: int | None = Field(default=None, ge=1, le=1024)
    prompt_concurrency: int | None = Field(default=None, ge=1, le=1024)
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1_048_576,
        description="Default and most tokens per answer (the data plane clamps requests to it).",
    )
    kv_bits: Literal[4, 8] | None = None
    chat_template_args: ChatTemplateArgs | None = None
    allowed_image_urls: list[ImageUrlPrefix] | None = Field(
        default=None,
        max_length=32,
        description="URL prefixes the backend may fetch images from (chat image parts); "
        "unset: only data: URLs. Enforced by the data plane, no backend restart.",
    )


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
    engine: EngineSpec = Field(
        default_factory=EngineSpec,
        description="The server process the slot runs (default mlx-lm; ModelDeployment "
        "spec.engine).",
    )
    swap: SwapPolicy = Field(default_factory=SwapPolicy)
    shard: RankSpec | None = Field(
        default=None,
        description="Set for one rank of a sharded group (ModelDeployment spec.sharding).",
    )


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
    idle_seconds: float | None = Field(
        default=None,
        ge=0,
        description="seconds since a request last arrived or finished, or since the backend "
        "became ready (0 while requests are in flight or queued; absent while none serves): "
        "what spec.idleTimeout is measured against",
    )
    restarts: int = 0
    last_error: str | None = None
    busy: str | None = Field(
        default=None,
        description="why the slot's backend counts as busy: a request has waited longer than "
        "the agent's busy deadline for its first token; the slot is not ready (out of routing) "
        "until it answers (absent: not busy)",
    )
    estimated_memory_bytes: int | None = None
    spec: SlotSpec | None = None
    active_swap: str | None = Field(default=None, description="id of the swap in progress")
    serving_group: str | None = Field(
        default=None,
        description="the sharded group (formation id) the serving backend is a rank of; it "
        "differs from spec.shard.group while a swap has not switched yet (absent: not a rank, "
        "or nothing serves)",
    )
    download: DownloadProgress | None = Field(
        default=None,
        description="the download of the weights being prepared (absent when none runs)",
    )


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
    request_id: RequestId | None = Field(
        default=None,
        description="the requestId of the PUT that asked for this swap (absent: none given)",
    )
    started_at: datetime = Field(description="the agent's wall clock, as all times here")
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
