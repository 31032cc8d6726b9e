"""GET /v1/state: what one agent reports about itself (versions, memory, disk, slots, cache).

May import: pydantic and the standard library only (pure).
Called by: the agent's control API, the operator's heartbeat and node status.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from mlxfleet_agent.contract.base import Wire
from mlxfleet_agent.contract.engines import EngineInfo
from mlxfleet_agent.contract.models import CachedModel, Transfer
from mlxfleet_agent.contract.slots import SlotStatus


class MemoryInfo(Wire):
    total_bytes: int
    available_bytes: int
    budget_bytes: int = Field(description="what slots may use: total x usable fraction - reserved")
    slots_estimated_bytes: int = 0
    pressure: Literal["normal", "warn", "critical"] = "normal"
    pressure_reason: str | None = Field(
        default=None,
        max_length=300,
        description="the reading the level comes from (macOS's level, the share available, "
        "Linux PSI); absent from agents older than it",
    )


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
    now: datetime | None = Field(
        default=None,
        description="the agent's wall clock when it answered (absent: an agent too old to say); "
        "the operator puts the agent's swap times on its own clock with it",
    )
    slots: list[SlotStatus]
    cached_models: list[CachedModel]
    transfers: list[Transfer] = Field(
        default_factory=list, description="model downloads in progress (bytes, rate, peers)"
    )
    counters: dict[str, float] = Field(default_factory=dict)
    fabric_address: str | None = Field(
        default=None,
        description="The IPv4 address this agent's sharded ranks listen on (--fabric-address: "
        "the Mac's address on the Thunderbolt or other fabric network); null: it runs no rank. "
        "Absent: an agent too old to say (its ranks listened on its agent URL's host).",
    )
    engines: list[EngineInfo] = Field(
        default_factory=list,
        description="Every engine this agent knows, whether it can run it here and why (found "
        "at start); empty from agents older than engines (they run mlx-lm only).",
    )
    credentials: str | None = Field(
        default=None,
        description="fingerprint of the node credentials the operator last sent "
        "(PUT /v1/credentials, `contract.credentials.fingerprint`); None: none yet",
    )
