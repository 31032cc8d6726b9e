"""The model store on the wire: cached models, their shape (what sizing needs), prefetch.

May import: pydantic and the standard library only (pure).
Called by: the agent's model store and control API, the operator (placement facts, sizing).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from mlxfleet_agent.contract.base import StrictWire, Wire
from mlxfleet_agent.contract.sources import ModelSource


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
