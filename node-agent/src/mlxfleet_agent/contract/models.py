"""The model store on the wire: cached models, their shape (what sizing needs), prefetch, and
the progress of a download (`DownloadProgress`, also in a slot's status).

May import: pydantic and the standard library only (pure).
Called by: the agent's model store and control API, the operator (placement facts, sizing).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

from mlxfleet_agent.contract import credentials
from mlxfleet_agent.contract.base import StrictWire, Wire
from mlxfleet_agent.contract.sources import ModelSource


class ModelShape(Wire):
    """What the memory estimate needs from a model's config.json (GQA: kv heads, not heads)."""

    num_layers: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    dtype_bytes: float = Field(default=2.0, gt=0, description="bytes per KV element unquantized")


class DownloadProgress(Wire):
    """The model download of a slot while it runs (phase Downloading, then Loading/Warming),
    or of a prefetch (`CachedModel.download`)."""

    bytes_done: int = Field(ge=0, description="bytes on disk so far (resumed bytes included)")
    bytes_total: int = Field(ge=0, description="the model's size; 0 while unknown (hf://)")
    bytes_per_second: float = Field(ge=0, description="recent transfer rate (last few seconds)")


class CachedModel(Wire):
    id: str = Field(description="stable id of the cached copy (derived from source and revision)")
    source: str
    revision: str | None = None
    size_bytes: int = Field(ge=0, description="sum of the weight files (safetensors) on disk")
    total_bytes: int = Field(default=0, ge=0, description="everything on disk for this model")
    shape: ModelShape | None = None
    last_used: datetime | None = None
    in_use: bool = False
    download: DownloadProgress | None = Field(
        default=None, description="while a prefetch still fetches it (size 0 until done)"
    )


class ModelList(Wire):
    items: list[CachedModel]


def check_peer(url: str) -> str:
    """A peer agent's control URL: http(s)://host:port, nothing else."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError("peer must be an agent's control URL, http(s)://host:port")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("peer must be an agent's control URL, http(s)://host:port")
    return url


PeerUrl = Annotated[str, Field(min_length=8, max_length=300), AfterValidator(check_peer)]


class Peer(StrictWire):
    """A peer agent to copy a model from, with the fetch token it accepts from this node for
    that model (`contract.credentials`: made by the operator, opens nothing else)."""

    url: PeerUrl
    token: str = Field(
        min_length=66, max_length=320, pattern=credentials.FETCH_TOKEN.pattern, repr=False
    )


class PrefetchRequest(StrictWire):
    source: ModelSource
    revision: str | None = Field(default=None, min_length=1, max_length=256)
    peers: list[Peer | PeerUrl] = Field(
        default_factory=list,
        max_length=16,
        description="agents that hold the model: files come from them first (verified against "
        "the origin's sizes and digests), the rest from the origin. Each with the fetch token "
        "it accepts from this node for this model; a bare control URL (an operator older than "
        "per-node credentials) is asked with the legacy --peer-token-file",
    )


class Transfer(Wire):
    """A model download in progress (GET /v1/state `transfers`)."""

    model_id: str
    source: str
    done_bytes: int = Field(ge=0)
    total_bytes: int = Field(ge=0)
    bytes_per_second: float = Field(ge=0)
    peer_bytes: int = Field(default=0, ge=0, description="bytes of done_bytes that came from peers")
    phase: Literal["peers", "origin"] = "origin"
