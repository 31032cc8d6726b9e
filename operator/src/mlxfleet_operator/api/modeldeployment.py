"""ModelDeployment (namespaced, `mdep`): a user's intent to serve one model, and its status.

The kind (`ModelDeployment`: metadata, spec, status), its status and the printer columns. The spec
and its parts are in `deploymentspec` (model, replicas, KV-cache budget, memory, placement, server
options, engine, swap policy) and `sharding`.
Status: placements per node, sharded groups and their ranks, ready replicas, the endpoint,
conditions (Ready/Reconciling/Stalled), preemptions (evicted for / evicting).
May import: pydantic, the standard library, the sibling api modules and `mlxfleet_agent.contract`.
Called by: core (placement, planning), handlers and adapters, api.crdgen, the gateway.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from mlxfleet_operator.api import base, deploymentspec, fields, modelref, resources
from mlxfleet_operator.api import conditions as cond


class PlacementPhase(StrEnum):
    PENDING = "Pending"
    LOADING = "Loading"
    READY = "Ready"
    SWAPPING = "Swapping"
    FAILED = "Failed"
    REMOVING = "Removing"


class PlacementStatus(base.ApiModel):
    """One replica: where it runs and what it serves."""

    node: str = Field(description="InferenceNode carrying the replica.")
    phase: PlacementPhase = Field(description="Phase of the agent slot serving the replica.")
    ready: bool = Field(default=False, description="Whether the replica answers requests.")
    source: str | None = Field(default=None, description="Model source the replica serves.")
    revision: str | None = Field(default=None, description="Revision the replica serves.")
    endpoint: str | None = Field(
        default=None, description="The agent's data-plane URL serving the replica."
    )
    slot: str | None = Field(
        default=None,
        description="The agent slot serving the replica; the gateway names it in the "
        "x-mlxfleet-slot header, so equal served names of two namespaces never mix.",
    )
    message: str | None = Field(default=None, description="Why the replica is not ready.")
    download: fields.DownloadStatus | None = Field(
        default=None,
        description="While the replica's weights download: bytes done and total, and the rate.",
    )


class RankStatus(base.ApiModel):
    """One rank of a sharded group."""

    rank: int = Field(ge=0, description="Rank in the group (0 serves requests).")
    node: str = Field(description="InferenceNode running the rank.")
    ready: bool = Field(default=False, description="Whether the rank runs (rank 0: serves).")
    endpoint: str | None = Field(
        default=None, description="Rank 0: the agent's data-plane URL; others: their ring address."
    )
    memory_bytes: int | None = Field(
        default=None, ge=0, description="Memory placed for this rank (its share).",
        json_schema_extra=base.crd(int_format="int64"),
    )  # fmt: skip
    message: str | None = Field(default=None, description="Why the rank is not ready.")


class GroupStatus(base.ApiModel):
    """One replica of a sharded deployment: a group of ranks."""

    index: int = Field(ge=0, description="Replica (group) number.")
    id: str = Field(description="Id of this formation; a re-formed group gets a new one.")
    ready: bool = Field(default=False, description="Every rank is ready.")
    source: str | None = Field(default=None, description="Model source the group serves.")
    revision: str | None = Field(default=None, description="Revision the group serves.")
    broken_at: str | None = Field(
        default=None, description="When a rank of this formation was lost (RFC 3339)."
    )
    ranks: list[RankStatus] = Field(default_factory=list, description="Ranks by number.")


class ScaleReason(StrEnum):
    """Why the autoscaler chose status.desiredReplicas."""

    START = "Start"  # spec.replicas: a new deployment, or spec.replicas changed
    LOAD = "Load"  # requests in flight and queued per replica
    IDLE = "Idle"  # no requests for spec.idleTimeout: down to spec.minReplicas (0: sleeping)
    DEMAND = "Demand"  # a request waits at a gateway for a sleeping deployment: woken


class AutoscalingStatus(base.ApiModel):
    """The operator's autoscaler (spec.minReplicas / spec.maxReplicas set): its last decision."""

    reason: ScaleReason = Field(description="Why status.desiredReplicas is what it is.")
    message: str | None = Field(default=None, description="The figures behind the decision.")
    last_scale_time: datetime | None = Field(
        default=None, description="When status.desiredReplicas last changed."
    )
    from_replicas: int = Field(
        ge=0,
        description="The spec.replicas the decision started from: a new value starts again "
        "from it.",
    )


class PreemptionStatus(base.ApiModel):
    """One replica evicted from a node for a deployment of higher priority."""

    node: str = Field(description="The InferenceNode the replica was evicted from.")
    deployment: str = Field(
        description="The other deployment (namespace/name): in preempting, the one evicted; in "
        "preemptedBy, the one it was evicted for."
    )
    priority: int = Field(description="The other deployment's spec.priority.")
    at: datetime = Field(description="When the eviction was decided.")
    backoff_until: datetime | None = Field(
        default=None,
        description="preemptedBy: no replica goes back to the node before this time (the "
        "back-off doubles with each eviction).",
    )


class ModelDeploymentStatus(base.ApiModel):
    """Observed state of a ModelDeployment, written only by the operator."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation this status describes."
    )
    conditions: list[cond.Condition] = Field(
        default_factory=list,
        description=cond.CONDITIONS_DESCRIPTION,
        json_schema_extra=cond.CONDITIONS_EXTRA,
    )
    served_name: str | None = Field(
        default=None, description="The `model` value clients send (spec or metadata.name)."
    )
    replicas: int | None = Field(default=None, ge=0, description="Replicas placed on nodes.")
    desired_replicas: int | None = Field(
        default=None,
        ge=0,
        description="Replicas the operator places now: spec.replicas, or with spec.minReplicas "
        "/ spec.maxReplicas the autoscaler's decision between them (0: sleeping).",
    )
    autoscaling: AutoscalingStatus | None = Field(
        default=None,
        description="The autoscaler's last decision (spec.minReplicas or spec.maxReplicas set).",
        json_schema_extra=base.crd(nullable=False),
    )
    ready_replicas: int | None = Field(default=None, ge=0, description="Replicas serving.")
    placements: list[PlacementStatus] = Field(
        default_factory=list, description="One entry per placed replica."
    )
    swap_plan: str | None = Field(
        default=None, description="Name of the SwapPlan rolling out the current model, if any."
    )
    groups: list[GroupStatus] = Field(
        default_factory=list,
        description="Sharded deployments: one entry per group (replica) with its ranks.",
    )
    estimated_memory_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Memory per replica used for placement (spec.resources.memory or estimate).",
        json_schema_extra=base.crd(int_format="int64"),
    )
    endpoint: str | None = Field(
        default=None,
        description="In-cluster address of the OpenAI-compatible endpoint (the Service).",
    )
    preempting: list[PreemptionStatus] = Field(
        default_factory=list,
        max_length=64,
        description="Replicas of lower-priority deployments this one evicts (waiting for their "
        "memory) or evicted (while it holds their node).",
    )
    preempted_by: list[PreemptionStatus] = Field(
        default_factory=list,
        max_length=64,
        description="This deployment's replicas evicted for higher-priority deployments (recent "
        "ones, kept while they count towards the back-off).",
    )
    selector: str | None = Field(
        default=None,
        description="Label selector of the objects serving this deployment (its Service and "
        "EndpointSlices), for the scale subresource: HorizontalPodAutoscaler and KEDA require one.",
    )


class ModelDeployment(base.ApiModel):
    """A model served by one or more Macs: `kubectl get mdep`."""

    api_version: Literal["mlxfleet.io/v1alpha1"] = resources.API_VERSION
    kind: Literal["ModelDeployment"] = "ModelDeployment"
    metadata: base.ObjectMeta = Field(default_factory=base.ObjectMeta)
    spec: deploymentspec.ModelDeploymentSpec
    status: ModelDeploymentStatus = Field(default_factory=ModelDeploymentStatus)

    def model_ref(self) -> modelref.ModelRef:
        """The model the spec asks for (spec.model's source and revision)."""
        return modelref.ModelRef.of(self.spec.model)

    def served_name(self) -> str:
        """What clients send as `model`: spec.model.servedName, else metadata.name."""
        name = self.spec.model.served_name or self.metadata.name
        if not name:
            raise ValueError("ModelDeployment has neither spec.model.servedName nor metadata.name")
        return name


PRINTER_COLUMNS: list[base.JsonDict] = [
    {
        "name": "Model",
        "type": "string",
        "jsonPath": ".status.servedName",
        "description": "The `model` value clients send.",
    },
    {
        "name": "Replicas",
        "type": "integer",
        "jsonPath": ".spec.replicas",
        "description": "Desired replicas.",
    },
    {
        "name": "Desired",
        "type": "integer",
        "jsonPath": ".status.desiredReplicas",
        "description": "Replicas placed now (the autoscaler's decision; 0: sleeping).",
    },
    {
        "name": "Ready",
        "type": "integer",
        "jsonPath": ".status.readyReplicas",
        "description": "Replicas serving.",
    },
    {
        "name": "Status",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
        "description": "Reason of the Ready condition.",
    },
    {
        "name": "Priority",
        "type": "integer",
        "jsonPath": ".spec.priority",
        "description": "spec.priority: higher may evict lower when memory is short.",
    },
    {
        "name": "Min",
        "type": "integer",
        "jsonPath": ".spec.minReplicas",
        "description": "Fewest replicas the autoscaler keeps (0: may sleep).",
        "priority": 1,
    },
    {
        "name": "Max",
        "type": "integer",
        "jsonPath": ".spec.maxReplicas",
        "description": "Most replicas the autoscaler places.",
        "priority": 1,
    },
    {
        "name": "Idle",
        "type": "string",
        "jsonPath": ".spec.idleTimeout",
        "description": "Time without requests before scaling to the minimum.",
        "priority": 1,
    },
    {
        "name": "Source",
        "type": "string",
        "jsonPath": ".spec.model.source",
        "description": "Model source.",
        "priority": 1,
    },
    {
        "name": "Message",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].message',
        "description": "Message of the Ready condition (download progress while loading).",
        "priority": 1,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
