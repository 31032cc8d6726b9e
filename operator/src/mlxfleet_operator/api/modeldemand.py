"""ModelDemand (namespaced, `mdemand`): what one gateway replica holds requests for.

A request for a sleeping ModelDeployment (spec.minReplicas 0) waits at the gateway while the
operator loads a replica. Each gateway replica says so in one ModelDemand of its own, in its own
namespace, named after itself: the deployments it holds requests for, how many and since when.
It writes the object when that set changes and renews `spec.renewTime` while it holds any; it
deletes it when it shuts down. The operator reads them (a watch), wakes the deployments they
name, and ignores an object not renewed for `STALE_S` (a gateway that died). The gateway's
identity may write only this kind (least privilege): the worst a stolen gateway token can do with
it is wake deployments, which any API key can do too.
May import: pydantic, the standard library and the sibling api modules. Called by: the gateway
(writes it), the operator's index and wake handler, api.crdgen.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from mlxfleet_operator.api import base, fields, resources

RENEW_S = 10.0  # a gateway holding requests rewrites its object at least this often
STALE_S = 30.0  # the operator ignores an object not renewed for this long
MAX_DEPLOYMENTS = 1000


class Held(base.ApiModel):
    """Requests one gateway replica holds for one ModelDeployment."""

    namespace: fields.NamespaceName = Field(description="The ModelDeployment's namespace.")
    name: fields.ObjectName = Field(description="The ModelDeployment's name.")
    waiting: int = Field(ge=0, description="Requests held now, waiting for a replica.")
    since: datetime = Field(description="When the oldest of them arrived.")


class ModelDemandSpec(base.ApiModel):
    """What the gateway replica holds requests for (written only by that gateway)."""

    gateway: str = Field(
        min_length=1, max_length=253, description="The gateway replica (its --name)."
    )
    renew_time: datetime = Field(
        description=f"When the gateway last wrote this object; it rewrites it at least every "
        f"{RENEW_S:.0f}s while it holds requests. Older than {STALE_S:.0f}s: ignored."
    )
    deployments: list[Held] = Field(
        default_factory=list,
        max_length=MAX_DEPLOYMENTS,
        description="Each ModelDeployment it holds requests for.",
    )


class ModelDemand(base.ApiModel):
    """Requests a gateway replica holds for sleeping models: `kubectl get mdemand -A`."""

    api_version: Literal["mlxfleet.io/v1alpha1"] = resources.API_VERSION
    kind: Literal["ModelDemand"] = "ModelDemand"
    metadata: base.ObjectMeta = Field(default_factory=base.ObjectMeta)
    spec: ModelDemandSpec


PRINTER_COLUMNS: list[base.JsonDict] = [
    {
        "name": "Gateway",
        "type": "string",
        "jsonPath": ".spec.gateway",
        "description": "The gateway replica.",
    },
    {
        "name": "Renewed",
        "type": "date",
        "jsonPath": ".spec.renewTime",
        "description": "When the gateway last wrote it.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
