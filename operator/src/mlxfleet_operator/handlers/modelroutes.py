"""ModelRoute status: each backend's readiness and the split in force, from the ModelDeployments
of the route's namespace. Runs on create/update/resume and on a timer; never writes spec.

May import: kopf, adapters, core, api, settings. Called by: kopf.
"""

from __future__ import annotations

from typing import Any

import kopf

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import kube, runtime
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.api import resources
from mlxfleet_operator.core import modelroute as core

CONFIG = opsettings.current()
ROUTES = (resources.GROUP, resources.VERSION, resources.MODEL_ROUTE.plural)
DEPLOYMENTS = (resources.GROUP, resources.VERSION, resources.MODEL_DEPLOYMENT.plural)


@kopf.index(*DEPLOYMENTS)
def ready_replicas(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Ready replicas of every ModelDeployment, by (namespace, name)."""
    return {(namespace or "", name): int((body.get("status") or {}).get("readyReplicas") or 0)}


def _write(body: kopf.Body, patch: kopf.Patch, index: kopf.Index[Any, Any]) -> None:
    mr = mroute.ModelRoute.model_validate(dict(body))
    namespace = mr.metadata.namespace or ""
    ready = {
        name: max(index[(ns, name)]) for ns, name in index if ns == namespace and index[(ns, name)]
    }
    kube.write_status(patch, core.status(mr, ready_replicas=ready, now=runtime.now()), body)


@kopf.on.resume(*ROUTES)
@kopf.on.create(*ROUTES)
@kopf.on.update(*ROUTES)
async def changed(body: kopf.Body, patch: kopf.Patch, **kwargs: Any) -> None:
    _write(body, patch, kwargs["ready_replicas"])


@kopf.timer(*ROUTES, interval=CONFIG.poll_seconds, sharp=True)
async def converge(body: kopf.Body, patch: kopf.Patch, **kwargs: Any) -> None:
    _write(body, patch, kwargs["ready_replicas"])
