"""SwapPlan (namespaced, `swp`): the record and driver of one model transition.

Created by the operator when a ModelDeployment's model changes, or written by a person (a planned
migration). Steps run one node at a time; progress lives in status so a plan survives an operator
restart; `spec.paused` lets a person approve before it runs; failure rolls back.
May import: pydantic, the standard library and the sibling api modules.
Called by: core (swap-plan progress), handlers and adapters.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from mlxfleet_operator.api import base, deploymentspec, fields, resources
from mlxfleet_operator.api import conditions as cond


class DeploymentRef(base.ApiModel):
    """The ModelDeployment (in the SwapPlan's namespace) that the plan changes."""

    model_config = ConfigDict(
        json_schema_extra=base.crd(
            base.rule(
                "self == oldSelf",
                "spec.deploymentRef is immutable: create a new SwapPlan",
            )
        )
    )

    name: fields.ObjectName = Field(description="Name of the ModelDeployment.")


class SwapTarget(base.ApiModel):
    """The model the deployment moves to (`spec.target`; as a value: `modelref.ModelRef.of`)."""

    model_config = ConfigDict(
        json_schema_extra=base.crd(
            base.rule("self == oldSelf", "spec.target is immutable: create a new SwapPlan")
        )
    )

    source: fields.ModelSource = Field(
        description="New model source: hf://<org>/<repo>, s3://<bucket>/<prefix> or "
        "file:///<absolute path>.",
    )
    revision: fields.Revision | None = Field(default=None, description="New revision.")


class SwapPlanSpec(base.ApiModel):
    """Desired transition of one ModelDeployment."""

    deployment_ref: DeploymentRef = Field(description="The ModelDeployment to change.")
    target: SwapTarget = Field(description="The model to move to.")
    nodes: list[fields.ObjectName] | None = Field(
        default=None,
        max_length=deploymentspec.REPLICAS_MAX,
        description="Order in which nodes swap, one at a time. Unset: the deployment's "
        "placements in name order. A listed node without a replica gets one (with the target) "
        "in place of a replica on a node not listed here, removed once the new one serves; "
        "replicas on unlisted nodes are otherwise left as they are.",
        json_schema_extra=base.crd(list_type="set"),
    )
    strategy: fields.SwapStrategy | None = Field(
        default=None,
        description="Auto, Surge or Hold. Unset: the deployment's spec.swap.strategy.",
    )
    drain_timeout_seconds: int | None = Field(
        default=None,
        ge=fields.DRAIN_TIMEOUT_MIN,
        le=fields.DRAIN_TIMEOUT_MAX,
        description="Seconds (1-3600) in-flight requests may take on the old model. Unset: the "
        "deployment's spec.swap.drainTimeoutSeconds.",
    )
    paused: bool = Field(
        default=False,
        description="While true no further step starts; set it to false to approve the plan.",
    )

    @model_validator(mode="after")
    def _unique_nodes(self) -> SwapPlanSpec:
        if self.nodes is not None and len(set(self.nodes)) != len(self.nodes):
            raise ValueError("spec.nodes must not repeat a node")
        return self


class SwapPhase(StrEnum):
    PENDING = "Pending"
    PAUSED = "Paused"
    PROGRESSING = "Progressing"
    ROLLING_BACK = "RollingBack"  # a step failed: completed steps are being reverted
    COMPLETED = "Completed"
    FAILED = "Failed"
    ROLLED_BACK = "RolledBack"

    @property
    def terminal(self) -> bool:
        """A final phase: the plan does nothing more (the one definition of "finished")."""
        return self in (SwapPhase.COMPLETED, SwapPhase.FAILED, SwapPhase.ROLLED_BACK)


class StepPhase(StrEnum):
    """Phase of one step; `Skipped`: the step could do nothing (no replica on the node, no such
    InferenceNode), its message says why."""

    PENDING = "Pending"
    LOADING = "Loading"
    WARMING = "Warming"
    SWITCHING = "Switching"
    DRAINING = "Draining"
    COMPLETED = "Completed"
    FAILED = "Failed"
    ROLLED_BACK = "RolledBack"
    REVERTING = "Reverting"  # a completed step going back to its previous model
    REVERTED = "Reverted"
    SKIPPED = "Skipped"


class StepRevert(base.ApiModel):
    """The swap that took a completed step's node back to its previous model."""

    started_at: datetime | None = Field(default=None, description="When the revert started.")
    finished_at: datetime | None = Field(default=None, description="When the revert ended.")
    requests_served: int | None = Field(
        default=None, ge=0, description="Requests served on the node during the revert."
    )
    requests_failed: int | None = Field(
        default=None, ge=0, description="Requests that failed on the node during the revert."
    )
    request_id: str | None = Field(
        default=None,
        max_length=128,
        description="Id the operator sent with the revert; the agent's record of it echoes it.",
    )


class SwapStep(base.ApiModel):
    """One node's swap: its timeline and what clients saw during it."""

    node: str = Field(description="InferenceNode swapping in this step.")
    phase: StepPhase = Field(default=StepPhase.PENDING, description="Phase of the step.")
    strategy: fields.SwapStrategy | None = Field(
        default=None, description="What the step used: Surge or Hold (Auto resolved)."
    )
    started_at: datetime | None = Field(default=None, description="When the step started.")
    warm_at: datetime | None = Field(default=None, description="When the new model was warm.")
    switched_at: datetime | None = Field(
        default=None, description="When new requests went to the new model."
    )
    drained_at: datetime | None = Field(
        default=None, description="When the old model's last request finished."
    )
    finished_at: datetime | None = Field(default=None, description="When the step ended.")
    requests_served: int | None = Field(
        default=None, ge=0, description="Requests served on the node during the step."
    )
    requests_failed: int | None = Field(
        default=None, ge=0, description="Requests that failed on the node during the step."
    )
    max_queue_wait_ms: float | None = Field(
        default=None, ge=0, description="Longest time a request waited in the Hold queue (ms)."
    )
    message: str | None = Field(default=None, description="Details, such as why it failed.")
    replaces: str | None = Field(
        default=None,
        description="Set when the node carried no replica: the node whose replica this step "
        "moves here (the new replica starts with the target; the one on `replaces` is removed "
        "once the new one serves).",
    )
    from_source: str | None = Field(
        default=None,
        description="Model source the node (or `replaces`) served before this step: what a "
        "rollback of the plan returns to.",
    )
    from_revision: str | None = Field(
        default=None, description="Revision the node served before this step."
    )
    request_id: str | None = Field(
        default=None,
        max_length=128,
        description="Id the operator sends with the step's swap (the plan's uid and the step's "
        "index: any operator sends the same); the agent's record of that swap echoes it.",
    )
    revert: StepRevert | None = Field(
        default=None,
        description="Set when a later step failed and this completed step was swapped back.",
    )
    group: int | None = Field(
        default=None,
        ge=0,
        description="Sharded deployments: the group (replica) this step swaps as a unit; `node` "
        "is its rank 0.",
    )
    ranks: list[str] | None = Field(
        default=None,
        max_length=16,
        description="Sharded deployments: the group's nodes by rank (rank 0 first).",
    )
    group_id: str | None = Field(
        default=None,
        max_length=128,
        description="Sharded deployments: the id of the group's new formation, whose ranks load "
        "the target (the old formation serves until it has taken over, or was drained: Hold).",
    )
    strategy_reason: str | None = Field(
        default=None,
        description="Why the step swaps with its strategy: for a sharded group, Surge when every "
        "node of the group has room for its old and new rank at once, else Hold (naming each "
        "node short of room), or what spec.strategy asked for.",
    )


class SwapPlanStatus(base.ApiModel):
    """Observed progress of a SwapPlan, written only by the operator."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation this status describes."
    )
    conditions: list[cond.Condition] = Field(
        default_factory=list,
        description=cond.CONDITIONS_DESCRIPTION,
        json_schema_extra=cond.CONDITIONS_EXTRA,
    )
    phase: SwapPhase | None = Field(
        default=None,
        description="Pending, Paused, Progressing, RollingBack (a step failed; completed steps "
        "are being swapped back), Completed, Failed or RolledBack.",
    )
    progress: str | None = Field(
        default=None, description="Steps finished out of all steps, such as 1/2."
    )
    steps: list[SwapStep] = Field(default_factory=list, description="One entry per node.")
    started_at: datetime | None = Field(default=None, description="When the first step started.")
    completed_at: datetime | None = Field(
        default=None, description="When the plan reached a final phase."
    )


class SwapPlan(base.ApiModel):
    """One model transition of a ModelDeployment: `kubectl get swp`."""

    api_version: Literal["mlxfleet.io/v1alpha1"] = resources.API_VERSION
    kind: Literal["SwapPlan"] = "SwapPlan"
    metadata: base.ObjectMeta = Field(default_factory=base.ObjectMeta)
    spec: SwapPlanSpec
    status: SwapPlanStatus = Field(default_factory=SwapPlanStatus)


PRINTER_COLUMNS: list[base.JsonDict] = [
    {
        "name": "Deployment",
        "type": "string",
        "jsonPath": ".spec.deploymentRef.name",
        "description": "The ModelDeployment being changed.",
    },
    {
        "name": "Target",
        "type": "string",
        "jsonPath": ".spec.target.source",
        "description": "The model source moved to.",
    },
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Phase."},
    {
        "name": "Progress",
        "type": "string",
        "jsonPath": ".status.progress",
        "description": "Steps finished out of all steps.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
