"""Condition types, reasons and the metav1.Condition model shared by all four kinds.

kstatus conventions (what Flux and our Argo CD health check read): `Ready` summarises,
`Reconciling=True` while converging, `Stalled=True` on an error that needs a human. Each reason
is CamelCase as metav1.Condition requires. `core.kit.conditions` decides them; handlers write them.
May import: pydantic, the standard library and `base`. Called by: core, handlers, adapters.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from mlxfleet_operator.api import base

REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)


class ConditionType(StrEnum):
    """Condition types; `Ready` is the summary, the others follow kstatus."""

    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    MEMORY_PRESSURE = "MemoryPressure"
    """InferenceNode only: the agent reports memory pressure (warn or critical)."""
    THERMAL_PRESSURE = "ThermalPressure"
    """InferenceNode only: the agent reports thermal pressure serious or critical."""
    # InferenceNode, the macOS doctor (`core.node.doctor`): True when the Mac is set up in a way
    # that takes a headless Mac down; warnings: Ready does not depend on them
    SLEEP_ENABLED = "SleepEnabled"
    AUTO_RESTART_DISABLED = "AutoRestartDisabled"
    FILEVAULT_ENABLED = "FileVaultEnabled"
    DISK_PRESSURE = "DiskPressure"
    UPDATE_PENDING = "UpdatePending"
    THUNDERBOLT_BRIDGE_MISSING = "ThunderboltBridgeMissing"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Reason(StrEnum):
    """Machine-readable reasons; STATUS printer column of ModelDeployment shows Ready's reason."""

    # summaries
    READY = "Ready"
    PROGRESSING = "Progressing"
    # ModelDeployment
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    PREEMPTING = "Preempting"  # waiting for lower-priority replicas it evicts to free memory
    PREEMPTED = "Preempted"  # replicas evicted for a higher-priority deployment, waiting to return
    INSUFFICIENT_MEMORY = "InsufficientMemory"
    NO_MATCHING_NODES = "NoMatchingNodes"
    ENGINE_UNAVAILABLE = "EngineUnavailable"  # no node's agent can run spec.engine (Stalled)
    SOURCE_INVALID = "SourceInvalid"  # the source cannot exist as given (Stalled)
    SOURCE_UNAVAILABLE = "SourceUnavailable"  # it could not be fetched now (retried)
    SPEC_REJECTED = "SpecRejected"  # an agent refused another field of the slot (Stalled)
    INVALID_SPEC = "InvalidSpec"  # admitted by the API server, refused by the operator's model
    SERVICE_CONFLICT = "ServiceConflict"  # a Service/EndpointSlice of that name is not ours
    SLOT_NAME_CONFLICT = "SlotNameConflict"  # an older deployment has the same agent slot name
    # no node may take a replica: another deployment serves the same name on each node that could
    SERVED_NAME_CONFLICT = "ServedNameConflict"
    SIZE_UNKNOWN = "SizeUnknown"
    LOADING = "Loading"
    PARTIALLY_READY = "PartiallyReady"
    SCALED_TO_ZERO = "ScaledToZero"
    SLEEPING = "Sleeping"  # no requests for spec.idleTimeout: no replica until the next request
    WAKING = "Waking"  # a request woke a sleeping deployment: its replicas load (cold start)
    SWAP_IN_PROGRESS = "SwapInProgress"
    AWAITING_APPROVAL = "AwaitingApproval"
    BACKEND_FAILED = "BackendFailed"
    NODE_LOST = "NodeLost"
    SHARDING_UNSUPPORTED = "ShardingUnsupported"  # the model cannot be split so (Stalled)
    GROUP_REFORMING = "GroupReforming"  # a rank of a sharded group was lost; re-forming
    # InferenceNode
    HEARTBEAT_OK = "HeartbeatOK"
    HEARTBEAT_MISSED = "HeartbeatMissed"
    AGENT_UNREACHABLE = "AgentUnreachable"
    UNAUTHORIZED = "Unauthorized"
    SECRET_NOT_FOUND = "SecretNotFound"  # noqa: S105 - a reason, not a secret
    SECRET_NOT_ALLOWED = "SecretNotAllowed"  # noqa: S105 - a reason, not a secret
    SECRET_INVALID = "SecretInvalid"  # noqa: S105 - a reason, not a secret
    CORDONED = "Cordoned"
    MEMORY_NORMAL = "MemoryNormal"
    MEMORY_WARN = "MemoryWarn"
    MEMORY_CRITICAL = "MemoryCritical"
    THERMAL_NOMINAL = "ThermalNominal"
    THERMAL_FAIR = "ThermalFair"
    THERMAL_SERIOUS = "ThermalSerious"
    THERMAL_CRITICAL = "ThermalCritical"
    # InferenceNode, the macOS doctor: the finding (True) and all-clear (False) of each check
    SYSTEM_SLEEP_ENABLED = "SystemSleepEnabled"
    DISPLAY_SLEEP_ENABLED = "DisplaySleepEnabled"
    SLEEP_DISABLED = "SleepDisabled"
    AUTO_RESTART_OFF = "AutoRestartOff"
    AUTO_RESTART_ON = "AutoRestartOn"
    FILEVAULT_ON = "FileVaultOn"
    FILEVAULT_OFF = "FileVaultOff"
    MODEL_STORE_DISK_LOW = "ModelStoreDiskLow"
    MODEL_STORE_DISK_OK = "ModelStoreDiskOK"
    RESTART_UPDATE_PENDING = "RestartUpdatePending"
    NO_UPDATE_PENDING = "NoUpdatePending"
    THUNDERBOLT_BRIDGE_ABSENT = "ThunderboltBridgeAbsent"
    THUNDERBOLT_BRIDGE_PRESENT = "ThunderboltBridgePresent"
    DOCTOR_CHECK_FAILED = "DoctorCheckFailed"  # Unknown: the agent could not read the setting
    # SwapPlan
    PAUSED = "Paused"
    STEP_RUNNING = "StepRunning"
    ROLLING_BACK = "RollingBack"
    COMPLETED = "Completed"
    ROLLED_BACK = "RolledBack"
    FAILED = "Failed"
    DEPLOYMENT_NOT_FOUND = "DeploymentNotFound"
    PLACEMENT_CONFLICT = "PlacementConflict"
    NOTHING_TO_DO = "NothingToDo"  # every step was skipped: the plan changed nothing
    SUPERSEDED = "Superseded"
    # ModelRoute
    BACKEND_NOT_FOUND = "BackendNotFound"
    NO_READY_BACKEND = "NoReadyBackend"
    FALLBACK_ONLY = "FallbackOnly"


class Condition(base.ApiModel):
    """One status condition, in the shape of metav1.Condition."""

    type: str = Field(
        min_length=1,
        max_length=316,
        pattern=TYPE_PATTERN,
        description="Type of condition in CamelCase: Ready, Reconciling, Stalled, MemoryPressure, "
        "ThermalPressure, and the macOS doctor's (SleepEnabled, AutoRestartDisabled, "
        "FileVaultEnabled, DiskPressure, UpdatePending, ThunderboltBridgeMissing).",
    )
    status: ConditionStatus = Field(description="Status of the condition: True, False or Unknown.")
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="The .metadata.generation that the condition was set based upon.",
    )
    last_transition_time: datetime = Field(
        description="Last time the condition's status changed (not when its reason or message "
        "did).",
    )
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=REASON_PATTERN,
        description="Machine-readable CamelCase reason for the condition's last transition.",
    )
    message: str = Field(
        default="",
        max_length=32768,
        description="Human-readable message with details about the transition (may be empty).",
    )


CONDITIONS_EXTRA = base.crd(list_type="map", list_map_keys=("type",))
CONDITIONS_DESCRIPTION = (
    "Current state in metav1.Condition form: Ready summarises, Reconciling is True while the "
    "operator converges, Stalled is True on an error that needs a person."
)


def find(conditions: list[Condition], kind: ConditionType | str) -> Condition | None:
    """The condition of type `kind`, if present."""
    wanted = str(kind)
    return next((c for c in conditions if c.type == wanted), None)


def is_true(conditions: list[Condition], kind: ConditionType | str) -> bool:
    found = find(conditions, kind)
    return found is not None and found.status is ConditionStatus.TRUE
