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


ThermalLevel = Literal["nominal", "fair", "serious", "critical"]


class ThermalInfo(Wire):
    """The host's heat as the agent last sampled it (every few seconds, off the event loop);
    a figure no source on this host gives is absent."""

    level: ThermalLevel | None = Field(
        default=None,
        description="thermal pressure in macOS's names (powermetrics' Nominal, Moderate, Heavy, "
        "Trapping/Sleeping); on Linux from trip points and GPU thermal slowdown",
    )
    level_reason: str | None = Field(
        default=None, max_length=300, description="what it was read from"
    )
    gpu_utilization: float | None = Field(default=None, ge=0, le=1)
    gpu_temperature_celsius: float | None = None
    cpu_temperature_celsius: float | None = None
    power_watts: float | None = Field(default=None, ge=0, description="measured power")
    power_source: str | None = Field(default=None, max_length=40, description="the meter")


DOCTOR_CHECKS = ("sleep", "auto-restart", "filevault", "os-update", "thunderbolt-bridge")


class DoctorReport(Wire):
    """What the agent's doctor last read from the host about what takes a headless Mac down
    (`pmset -g`, `fdesetup status`, `softwareupdate -l`, `networksetup -listallhardwareports`),
    at a slow interval and off the event loop. The operator turns it into InferenceNode
    conditions. A figure left absent: that check does not apply here (its command is missing,
    as on Linux); a check that could not be read is in `errors`."""

    checked_at: datetime
    sleep_minutes: int | None = Field(default=None, ge=0, description="pmset sleep (0: never)")
    display_sleep_minutes: int | None = Field(default=None, ge=0, description="pmset displaysleep")
    sleep_prevented_by: list[str] = Field(
        default_factory=list, max_length=20, description="what holds sleep off now (pmset's note)"
    )
    auto_restart: bool | None = Field(
        default=None, description="start up automatically after a power failure (pmset autorestart)"
    )
    filevault: Literal["on", "off", "encrypting", "decrypting"] | None = None
    restart_updates: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="OS updates softwareupdate lists that restart the Mac (their labels)",
    )
    updates_checked_at: datetime | None = Field(
        default=None, description="when softwareupdate last answered (it runs less often)"
    )
    thunderbolt_bridge: bool | None = Field(
        default=None, description="networksetup lists a Thunderbolt Bridge hardware port"
    )
    disk_min_free_bytes: int | None = Field(
        default=None, ge=0, description="free space below which the model store is low"
    )
    errors: dict[str, str] = Field(
        default_factory=dict, description="check (one of DOCTOR_CHECKS) -> why it could not be read"
    )


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
    thermal: ThermalInfo | None = Field(
        default=None, description="heat, GPU and power (absent: nothing sampled yet, or older)"
    )
    doctor: DoctorReport | None = Field(
        default=None, description="the host checks (absent: not run yet, or an older agent)"
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
