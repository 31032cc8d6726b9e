"""ModelDemand: wake the sleeping ModelDeployments a gateway holds requests for, at once.

The autoscaler reads the requests gateways hold from the `model_demand` index whenever a
deployment reconciles (`convergeskip.count`); alone, a sleeping deployment would notice them
at its next timer tick (--poll-seconds). This handler makes that reconcile happen now: for a fresh
entry naming a deployment with no ready replica (`autoscale.to_wake`), it sets the deployment's
annotation `resources.WAKE_ANNOTATION` to the time of the oldest held request, and the watch
event that write causes runs the deployment's reconcile (its event handler). A failed write is
logged and left to the timer.

May import: kopf, adapters, core, api, `indexes`. Called by: kopf.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pydantic

from mlxfleet_operator.adapters import kube, runtime
from mlxfleet_operator.api import modeldemand as mdemand
from mlxfleet_operator.api import resources
from mlxfleet_operator.core.deployment import autoscale
from mlxfleet_operator.handlers import indexes

log = logging.getLogger(__name__)
DEMANDS = (resources.GROUP, resources.VERSION, resources.MODEL_DEMAND.plural)


async def observed(
    body: kopf.Body, namespace: str | None, type: str | None, memo: kopf.Memo, **kwargs: Any
) -> None:
    rt = runtime.of(memo)
    if type == "DELETED" or namespace != rt.config.demand_namespace:
        return
    try:
        demand = mdemand.ModelDemand.model_validate(dict(body))
    except pydantic.ValidationError as exc:
        log.warning("ModelDemand %s/%s ignored: %s", namespace, body.metadata.name, exc)
        return
    idx = indexes.Indexes.of(kwargs)
    due = autoscale.to_wake(
        autoscale.wants_of(demand),
        ready=lambda key: idx.ready_of(*key),
        told=rt.woken,
        now=runtime.now(),
    )
    for (ns, name), since in due:
        rt.woken[(ns, name)] = since
        stamp = since.isoformat().replace("+00:00", "Z")
        log.info("waking %s/%s: a gateway holds requests for it since %s", ns, name, stamp)
        try:
            await rt.kube.annotate_deployment(ns, name, {resources.WAKE_ANNOTATION: stamp})
        except kube.KubeError as exc:
            log.warning("wake %s/%s: %s (the timer wakes it)", ns, name, exc)


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.event(*DEMANDS, registry=registry)(observed)
