"""InferenceNode (cluster-scoped, `inode`): one Mac running the mlxfleet agent, and its status.

Spec (written by the admin): how to reach the agent, optional hardware facts and cost inputs,
`unschedulable` to cordon, `approved` for a Mac that joined itself. Labels on the object drive
placement. The node's memory budget is the
agent's own (reported in status): placement never uses another number.
Status (written by the operator from the agent's `/v1/state`): heartbeat, memory, disk, slots.
May import: pydantic, the standard library and the sibling api modules.
Called by: core (placement, cost), handlers and adapters.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from mlxfleet_operator.api import base, fields, resources
from mlxfleet_operator.api import conditions as cond

_CA_NEEDS_HTTPS = base.rule(
    "!has(self.caSecretRef) || self.url.startsWith('https://')",
    "spec.agent.caSecretRef needs an https:// spec.agent.url",
    field_path=".caSecretRef",
)


class AgentEndpoint(base.ApiModel):
    """How the operator reaches the node agent's control API."""

    model_config = ConfigDict(json_schema_extra=base.crd(_CA_NEEDS_HTTPS))

    url: fields.AgentUrl = Field(
        description="Base URL of the agent's control API, http:// or https://, such as "
        "https://mac-studio-1.lan:8470.",
    )
    token_secret_ref: fields.SecretKeyRef = Field(
        description="Secret key holding the agent's bearer token (key `token` by default). The "
        f"operator sends it to spec.agent.url, so it uses only Secrets labelled "
        f"{resources.AGENT_CREDENTIALS_LABEL}=true.",
    )
    ca_secret_ref: fields.CaSecretRef | None = Field(
        default=None,
        description="Secret key holding the CA (PEM) that signed a self-signed agent certificate "
        f"(a Secret labelled {resources.AGENT_CREDENTIALS_LABEL}=true, as the token's).",
        json_schema_extra=base.crd(nullable=False),
    )

    @model_validator(mode="after")
    def _ca_needs_https(self) -> AgentEndpoint:
        if self.ca_secret_ref is not None and not self.url.startswith("https://"):
            raise ValueError("spec.agent.caSecretRef needs an https:// spec.agent.url")
        return self


class Hardware(base.ApiModel):
    """Hardware facts that override what the agent reports."""

    chip: str | None = Field(
        default=None, max_length=128, description="Chip name, such as Apple M2 Ultra."
    )
    memory: fields.Quantity | None = Field(
        default=None,
        description="Unified memory such as 192Gi, shown in status instead of the agent's "
        "report. Placement uses the agent's memory budget (status.memory.allocatableBytes).",
    )


_BUSY_AT_LEAST_IDLE = base.rule(
    "!has(self.idlePowerWatts) || !has(self.busyPowerWatts) || "
    "self.busyPowerWatts >= self.idlePowerWatts",
    "spec.cost.busyPowerWatts must be at least spec.cost.idlePowerWatts",
    field_path=".busyPowerWatts",
)


class Cost(base.ApiModel):
    """Inputs of the cost reports: amortised hardware plus energy."""

    model_config = ConfigDict(json_schema_extra=base.crd(_BUSY_AT_LEAST_IDLE))

    purchase_price_usd: float | None = Field(
        default=None,
        ge=0,
        alias="purchasePriceUSD",
        description="Purchase price of the Mac in US dollars (non-negative).",
    )
    amortization_months: int | None = Field(
        default=None,
        ge=1,
        le=240,
        description="Months over which the purchase price is written off (1-240).",
    )
    idle_power_watts: float | None = Field(
        default=None,
        ge=0,
        le=10_000,
        description="Power drawn while idle, in watts.",
        json_schema_extra=base.crd(nullable=False),
    )
    busy_power_watts: float | None = Field(
        default=None,
        ge=0,
        le=10_000,
        description="Power drawn while generating, in watts.",
        json_schema_extra=base.crd(nullable=False),
    )
    electricity_usd_per_kwh: float | None = Field(
        default=None,
        ge=0,
        alias="electricityUSDPerKWh",
        description="Price of electricity in US dollars per kWh (non-negative).",
    )

    @model_validator(mode="after")
    def _busy_at_least_idle(self) -> Cost:
        idle, busy = self.idle_power_watts, self.busy_power_watts
        if idle is not None and busy is not None and busy < idle:
            raise ValueError("spec.cost.busyPowerWatts must be at least spec.cost.idlePowerWatts")
        return self


class InferenceNodeSpec(base.ApiModel):
    """Desired state of an InferenceNode."""

    agent: AgentEndpoint = Field(description="How to reach the node agent.")
    hardware: Hardware | None = Field(
        default=None, description="Hardware facts overriding the agent's report."
    )
    reserved_memory: fields.NonNegativeQuantity | None = Field(
        default=None,
        description="Deprecated, not used: placement uses the agent's own memory budget "
        "(status.memory.allocatableBytes), the number the agent admits models against. To keep "
        "more memory free on a Mac, set memory_budget in its agent config. Accepted (such as "
        "8Gi or 0) so existing objects stay valid.",
    )
    unschedulable: bool = Field(
        default=False,
        description="Cordon: place no new replicas here (running ones stay until moved).",
    )
    drain: bool = Field(
        default=False,
        description="Drain: move this node's replicas to other nodes, each kept serving until "
        "its replacement serves (make-before-break); a replica with nowhere to go stays. Set "
        "with unschedulable by `kubectl mlxfleet drain`; `kubectl mlxfleet uncordon` clears both.",
    )
    cost: Cost | None = Field(default=None, description="Cost inputs for the reports.")
    approved: bool | None = Field(
        default=None,
        description="A node that joined with a bootstrap token (`mlxfleet-agent join`) is "
        "created with approved: false (and unschedulable: true) and takes no traffic, holds no "
        "credential and is not even polled until a person approves it (`kubectl mlxfleet "
        "approve node NAME`, or set true here, then uncordon); false on any node takes it out. "
        "Unset: a node an admin declared, approved.",
        json_schema_extra=base.crd(nullable=False),
    )


class MemoryStatus(base.ApiModel):
    """Unified memory as the agent reports it."""

    total: str | None = Field(
        default=None,
        max_length=32,
        description="Unified memory for people (e.g. 64Gi); the MEMORY column.",
    )
    total_bytes: int | None = Field(
        default=None, ge=0, description="Unified memory.", json_schema_extra={"format": "int64"}
    )
    allocatable_bytes: int | None = Field(
        default=None,
        ge=0,
        description="The agent's memory budget, what models may use and what placement fills: "
        "total x usable fraction - reserved, or the agent's memory_budget setting.",
        json_schema_extra={"format": "int64"},
    )
    used_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Memory of the node's slots as placement counts it: what their backends "
        "hold, a slot that is loading (or downloading its weights) at its whole estimate, a "
        "slot that runs no backend (sleeping, or failed and waiting to restart) at nothing.",
        json_schema_extra={"format": "int64"},
    )
    free: str | None = Field(
        default=None,
        max_length=32,
        description="allocatableBytes - usedBytes for people (e.g. 12.5Gi); the FREE column.",
    )
    free_bytes: int | None = Field(
        default=None,
        ge=0,
        description="What placement may still give a new replica here: allocatableBytes - "
        "usedBytes (never below 0).",
        json_schema_extra={"format": "int64"},
    )


class DiskStatus(base.ApiModel):
    free_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Free disk space for model weights.",
        json_schema_extra={"format": "int64"},
    )


class ThermalStatus(base.ApiModel):
    """The Mac's heat as its agent reports it. The level follows the agent's every poll; the
    figures are refreshed when the heartbeat is written (every --heartbeat-write-seconds) or
    the level changes, so a warm Mac does not rewrite its status on every poll."""

    level: Literal["nominal", "fair", "serious", "critical"] | None = Field(
        default=None,
        description="Thermal pressure (macOS's ProcessInfo names; on Linux from trip points and "
        "GPU thermal slowdown): no new replicas at serious or critical (ThermalPressure); "
        "placement prefers nominal over fair.",
    )
    source: str | None = Field(
        default=None, max_length=300, description="What the level was read from."
    )
    gpu_utilization_percent: int | None = Field(
        default=None, ge=0, le=100, description="GPU busy share at the last sample."
    )
    gpu_temperature_celsius: int | None = Field(
        default=None, ge=-50, le=200, description="GPU temperature (macmon, nvidia-smi, hwmon)."
    )
    cpu_temperature_celsius: int | None = Field(
        default=None, ge=-50, le=200, description="CPU temperature (macmon, thermal zones, hwmon)."
    )
    power_watts: float | None = Field(default=None, ge=0, description="Measured power.")
    power_source: str | None = Field(
        default=None,
        max_length=40,
        description="The meter: powermetrics, macmon, rapl, nvidia-smi.",
    )


class SlotStatus(base.ApiModel):
    """One model slot on the agent."""

    name: str = Field(description="Slot name (derived from the ModelDeployment).")
    served_name: str | None = Field(default=None, description="The `model` clients send.")
    source: str | None = Field(default=None, description="Model source loaded in the slot.")
    revision: str | None = Field(default=None, description="Revision loaded in the slot.")
    phase: str | None = Field(
        default=None, description="Agent slot phase: Pending, Downloading, Loading, Ready, ..."
    )
    ready: bool = Field(default=False, description="Whether the slot answers requests.")
    download: fields.DownloadStatus | None = Field(
        default=None, description="The download of the weights being prepared, while it runs."
    )


class CachedModelStatus(base.ApiModel):
    """Weights on the node's disk (placement prefers nodes that already hold them)."""

    source: str = Field(description="Model source.")
    revision: str | None = Field(default=None, description="Revision.")
    size_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Size of the weights.",
        json_schema_extra={"format": "int64"},
    )
    last_used: datetime | None = Field(default=None, description="When a slot last used them.")


class EngineStatus(base.ApiModel):
    """One engine the node's agent knows, found when the agent started."""

    name: str = Field(description="Engine name (ModelDeployment spec.engine.name).")
    available: bool = Field(description="Whether the agent can run it on this node.")
    reason: str | None = Field(
        default=None, description="Why not, or what it runs on (for example the GPUs)."
    )


INT64: base.JsonDict = {"format": "int64"}


class TransferStatus(base.ApiModel):
    """A model download in progress on the node (from peers first, then the origin)."""

    source: str = Field(description="The model being copied.")
    done_bytes: int = Field(ge=0, description="Bytes on disk so far.", json_schema_extra=INT64)
    total_bytes: int = Field(ge=0, description="Bytes of the whole model.", json_schema_extra=INT64)
    bytes_per_second: float = Field(ge=0, description="Rate over the last seconds.")
    peer_bytes: int = Field(
        default=0, ge=0, description="Bytes of doneBytes from peers.", json_schema_extra=INT64
    )
    phase: Literal["peers", "origin"] = Field(description="Where the bytes come from now.")


class InferenceNodeStatus(base.ApiModel):
    """Observed state of an InferenceNode, written only by the operator."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation this status describes."
    )
    conditions: list[cond.Condition] = Field(
        default_factory=list,
        description=cond.CONDITIONS_DESCRIPTION
        + " MemoryPressure and ThermalPressure mirror the agent; the macOS doctor's conditions "
        "(SleepEnabled, AutoRestartDisabled, FileVaultEnabled, DiskPressure, UpdatePending, "
        "ThunderboltBridgeMissing) are warnings, True when the Mac is set up in a way that "
        "takes a headless Mac down (docs/troubleshooting.md names the fix of each reason).",
        json_schema_extra=cond.CONDITIONS_EXTRA,
    )
    last_heartbeat_time: datetime | None = Field(
        default=None, description="Last successful poll of the agent's /v1/state."
    )
    agent_version: str | None = Field(default=None, description="Version of the node agent.")
    chip: str | None = Field(default=None, description="Chip (spec.hardware.chip or reported).")
    memory: MemoryStatus | None = Field(default=None, description="Unified memory.")
    disk: DiskStatus | None = Field(default=None, description="Disk for model weights.")
    thermal: ThermalStatus | None = Field(
        default=None,
        description="Heat, GPU utilisation and power (absent: the agent reports none).",
    )
    slots: list[SlotStatus] = Field(default_factory=list, description="Model slots on the agent.")
    cached_models: list[CachedModelStatus] = Field(
        default_factory=list, description="Weights on the node's disk."
    )
    engines: list[EngineStatus] = Field(
        default_factory=list,
        description="Engines the agent can run here (placement puts a deployment only on a "
        "node whose agent lists its spec.engine.name as available). Empty: an agent older than "
        "engines, which runs mlx-lm only.",
    )
    transfers: list[TransferStatus] = Field(
        default_factory=list, description="Model downloads in progress on the node."
    )
    download: str | None = Field(
        default=None,
        max_length=200,
        description="The downloads in one line (`kubectl get inode` column Download), "
        "e.g. `1.2/4.0 GiB 350 MB/s`; unset when none runs.",
    )


class InferenceNode(base.ApiModel):
    """One Mac in the fleet: `kubectl get inode`."""

    api_version: Literal["mlxfleet.io/v1alpha1"] = resources.API_VERSION
    kind: Literal["InferenceNode"] = "InferenceNode"
    metadata: base.ObjectMeta = Field(default_factory=base.ObjectMeta)
    spec: InferenceNodeSpec
    status: InferenceNodeStatus = Field(default_factory=InferenceNodeStatus)

    def approved(self) -> bool:
        """May take traffic and hold credentials: declared by an admin (`spec.approved` unset)
        or approved by a person; a node that joined itself is not until then."""
        return approved(self.spec.approved)


def approved(value: object) -> bool:
    """`spec.approved` as every part reads it (also from a raw object): only false holds."""
    return value is not False


PRINTER_COLUMNS: list[base.JsonDict] = [
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        "description": "Status of the Ready condition (heartbeat).",
    },
    {
        "name": "Status",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
        "description": "Reason of the Ready condition: HeartbeatOK, AwaitingApproval (joined, "
        "not approved yet), HeartbeatMissed, ...",
    },
    {"name": "Chip", "type": "string", "jsonPath": ".status.chip", "description": "Chip."},
    {
        "name": "Memory",
        "type": "string",
        "jsonPath": ".status.memory.total",
        "description": "Unified memory (status.memory.totalBytes for the exact figure).",
    },
    {
        "name": "Free",
        "type": "string",
        "jsonPath": ".status.memory.free",
        "description": "Memory placement may still give (status.memory.freeBytes): the budget "
        "less what the slots hold, loading ones in full, sleeping ones not at all.",
    },
    {
        "name": "Pressure",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="MemoryPressure")].reason',
        "description": "Memory pressure the agent reports (MemoryNormal, MemoryWarn, "
        "MemoryCritical): no new replicas while it is not MemoryNormal.",
        "priority": 1,
    },
    {
        "name": "Thermal",
        "type": "string",
        "jsonPath": ".status.thermal.level",
        "description": "Thermal pressure the agent reports (nominal, fair, serious, critical): "
        "no new replicas at serious or critical.",
        "priority": 1,
    },
    {
        "name": "Agent",
        "type": "string",
        "jsonPath": ".spec.agent.url",
        "description": "URL of the node agent.",
    },
    {
        "name": "Download",
        "type": "string",
        "jsonPath": ".status.download",
        "description": "Model downloads in progress: GiB done/total and rate (status.transfers).",
    },
    {
        "name": "Unschedulable",
        "type": "boolean",
        "jsonPath": ".spec.unschedulable",
        "description": "Cordoned.",
        "priority": 1,
    },
    {
        "name": "Drain",
        "type": "boolean",
        "jsonPath": ".spec.drain",
        "description": "Draining: replicas move off (make-before-break).",
        "priority": 1,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
