"""Group, version, kinds, plurals and short names of mlxfleet's custom resources.

The one source of truth: kopf decorators (`kopf.on.create(resources.GROUP, resources.VERSION,
resources.MODEL_DEPLOYMENT.plural)`), adapters and the CRD generator all read these constants.
May import: the standard library only. Called by: every operator layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

GROUP = "mlxfleet.io"
VERSION = "v1alpha1"
API_VERSION: Final = "mlxfleet.io/v1alpha1"  # f"{GROUP}/{VERSION}", as a Literal type
CATEGORY = "mlxfleet"
OPERATOR_NAMESPACE = "mlxfleet-system"
AGENT_SECRETS_NAMESPACE = "mlxfleet-agents"
"""Where agents' token Secrets live by default: not the operator's (and gateway's) namespace, so
the gateway's identity, which may read Secrets there, cannot read them (chart
operator.agentSecretsNamespace)."""
OPERATOR_SERVICE_ACCOUNT = "mlxfleet-operator"
GATEWAY_SERVICE_ACCOUNT = "mlxfleet-gateway"
FINALIZER = f"{GROUP}/finalizer"
ANNOTATION_PREFIX = GROUP
DEPLOYMENT_LABEL = f"{GROUP}/deployment"
"""On objects made for a ModelDeployment: its name, or a bounded form of it (core.naming)."""
DEPLOYMENT_ANNOTATION = f"{GROUP}/deployment-name"
"""On objects made for a ModelDeployment: its whole name."""
AGENT_CREDENTIALS_LABEL = f"{GROUP}/agent-credentials"
"""Only Secrets with this label set to "true" are used (and sent) as agent credentials."""
REQUESTED_LABELS_ANNOTATION = f"{GROUP}/requested-labels"
"""On an InferenceNode that joined itself: the labels join would have set (JSON object), which
the join identity may not set; `kubectl mlxfleet approve node` applies them once approved."""
EXPIRES_AT_ANNOTATION = f"{GROUP}/expires-at"
"""On an agent token Secret: when the token stops being valid (RFC 3339, with a zone). The
operator exports it (mlxfleet_operator_agent_token_expiry_timestamp_seconds) so that an alert
asks for a rotation in time; the agent decides what it accepts."""


class Scope(StrEnum):
    NAMESPACED = "Namespaced"
    CLUSTER = "Cluster"


@dataclass(frozen=True, slots=True)
class Resource:
    """Names of one custom resource kind, as the API server and kubectl know them."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    scope: Scope

    @property
    def crd_name(self) -> str:
        """`<plural>.<group>`: the CustomResourceDefinition's metadata.name."""
        return f"{self.plural}.{GROUP}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def namespaced(self) -> bool:
        return self.scope is Scope.NAMESPACED


MODEL_DEPLOYMENT = Resource(
    kind="ModelDeployment",
    plural="modeldeployments",
    singular="modeldeployment",
    short_names=("mdep",),
    scope=Scope.NAMESPACED,
)
INFERENCE_NODE = Resource(
    kind="InferenceNode",
    plural="inferencenodes",
    singular="inferencenode",
    short_names=("inode",),
    scope=Scope.CLUSTER,
)
SWAP_PLAN = Resource(
    kind="SwapPlan",
    plural="swapplans",
    singular="swapplan",
    short_names=("swp",),
    scope=Scope.NAMESPACED,
)

MODEL_ROUTE = Resource(
    kind="ModelRoute",
    plural="modelroutes",
    singular="modelroute",
    short_names=("mroute",),
    scope=Scope.NAMESPACED,
)

MODEL_DEMAND = Resource(
    kind="ModelDemand",
    plural="modeldemands",
    singular="modeldemand",
    short_names=("mdemand",),
    scope=Scope.NAMESPACED,
)
"""One per gateway replica, in the gateway's namespace: the sleeping ModelDeployments it holds
requests for (the gateway writes it; the operator wakes them)."""

ALL: tuple[Resource, ...] = (
    MODEL_DEPLOYMENT,
    INFERENCE_NODE,
    SWAP_PLAN,
    MODEL_ROUTE,
    MODEL_DEMAND,
)
WAKE_ANNOTATION = f"autoscaling.{GROUP}/wake-requested"
"""On a sleeping ModelDeployment, set by the operator when a gateway holds a request for it: the
time of the oldest held request. Writing it runs the deployment's reconcile at once (a watch
event; its resourceVersion is among what the reconcile reads) instead of at its next timer
tick. Not under `mlxfleet.io/`: kopf leaves every annotation of its own prefix
(ANNOTATION_PREFIX) out of what it compares on the kinds it keeps a record of."""
