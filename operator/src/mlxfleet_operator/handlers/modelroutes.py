"""ModelRoute status: each backend's readiness and the split in force, from the ModelDeployments
of the route's namespace (the `deployments` index) and, for external backends, the type and
annotations of the provider-key Secrets they name (a GET by name in the operator's namespace,
answered as a table row: never the key). Runs on create/update/resume and on a timer; never
writes spec.

May import: kopf, adapters, core, api, settings, `guard`, `indexes`. Called by: kopf.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import runtime, statuspatch
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.api import resources
from mlxfleet_operator.core.modelroute import status as core
from mlxfleet_operator.handlers import guard, indexes

KIND = resources.MODEL_ROUTE
ROUTES = (resources.GROUP, resources.VERSION, KIND.plural)


async def route_status(body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, **kwargs: Any) -> None:
    mr = mroute.ModelRoute.model_validate(dict(body))
    async with guard.guarded(KIND, body, memo):
        ready = indexes.Indexes.of(kwargs).ready_replicas(mr.metadata.namespace or "")
        rt = runtime.of(memo)
        where = rt.config.provider_keys_namespace
        names = list(core.key_refs(mr))  # one lookup per named key, all at once
        found = await asyncio.gather(
            *(rt.kube.provider_key_seen(namespace=where, name=name) for name in names)
        )
        keys = core.ProviderKeys(namespace=where, seen=dict(zip(names, found, strict=True)))
        status = core.status(mr, ready_replicas=ready, keys=keys, now=runtime.now())
        statuspatch.write_status(patch, status, body, rt.objects)


async def gone(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Deleted: what this process kept about the route goes with it (`guard`, `last`)."""
    async with guard.guarded(KIND, body, memo, last=True):
        pass


async def route_changed(
    body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, logger: kopf.Logger, **kwargs: Any
) -> None:
    """Create, update, resume; never fails to kopf (`guard.by_timer`): the timer retries."""
    async with guard.by_timer(logger):
        await route_status(body, memo, patch, **kwargs)


def register(registry: kopf.OperatorRegistry, config: opsettings.OperatorSettings) -> None:
    for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
        on(*ROUTES, registry=registry)(route_changed)
    kopf.timer(*ROUTES, interval=config.poll_seconds, sharp=True, registry=registry)(route_status)
    kopf.on.delete(*ROUTES, optional=True, registry=registry)(gone)
