"""ModelRoute status (pure): each backend's readiness, the traffic split in force, the verdict.

A deployment backend is ready when its ModelDeployment has ready replicas; an external backend is
assumed usable (the operator never calls providers; the gateway ejects one that fails). Ready is
True when every rule has a ready backend; False with FallbackOnly when some rule can only be
served by the fallback chain, NoReadyBackend when not even that, BackendNotFound when a rule names
a ModelDeployment that does not exist in the route's namespace.
May import: the standard library, `api`, `core.conditions`. Called by: handlers.modelroutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.core import conditions

R = cond.Reason
FALLBACK = "fallback"


def _backend(
    rule: str, index: int, spec: mroute.RouteBackend, ready_replicas: Mapping[str, int]
) -> mroute.BackendStatus:
    name = spec.display_name(index)
    if spec.external is not None:
        return mroute.BackendStatus(
            name=name, rule=rule, kind=mroute.BackendKind.EXTERNAL, ready=True
        )
    assert spec.deployment is not None
    replicas = ready_replicas.get(spec.deployment)
    if replicas is None:
        message: str | None = f"ModelDeployment {spec.deployment} not found"
    else:
        message = (
            None if replicas > 0 else f"ModelDeployment {spec.deployment} has no ready replica"
        )
    return mroute.BackendStatus(
        name=name,
        rule=rule,
        kind=mroute.BackendKind.DEPLOYMENT,
        ready=bool(replicas),
        ready_replicas=replicas,
        message=message,
    )


def status(
    mr: mroute.ModelRoute, *, ready_replicas: Mapping[str, int], now: datetime
) -> mroute.ModelRouteStatus:
    """The whole status; `ready_replicas` maps deployment name (route's namespace) -> ready."""
    spec = mr.spec
    backends: list[mroute.BackendStatus] = []
    split: list[mroute.SplitEntry] = []
    missing: list[str] = []
    unserved: list[str] = []
    for rule in spec.rules:
        rows = [_backend(rule.name, i, b, ready_replicas) for i, b in enumerate(rule.backends)]
        backends += rows
        ready = {r.name for r in rows if r.ready}
        shares = mroute.split(rule.backends, ready=ready)
        split += [
            mroute.SplitEntry(rule=rule.name, backend=name, percent=round(pct, 2))
            for name, pct in shares.items()
        ]
        missing += [
            r.message or ""
            for r in rows
            if r.ready_replicas is None and r.kind is mroute.BackendKind.DEPLOYMENT
        ]
        if not ready:
            unserved.append(rule.name)
    fallback = spec.fallback.backends if spec.fallback is not None else []
    fb_rows = [_backend(FALLBACK, i, b, ready_replicas) for i, b in enumerate(fallback)]
    backends += fb_rows
    ready_count = sum(r.ready for r in backends)
    if missing:
        verdict = conditions.Verdict(False, R.BACKEND_NOT_FOUND, "; ".join(missing))
    elif not unserved:
        verdict = conditions.Verdict(True, R.READY, f"{ready_count}/{len(backends)} backends ready")
    elif any(r.ready for r in fb_rows):
        verdict = conditions.Verdict(
            False,
            R.FALLBACK_ONLY,
            f"rules {', '.join(unserved)} have no ready backend: served by the fallback",
        )
    else:
        verdict = conditions.Verdict(
            False, R.NO_READY_BACKEND, f"rules {', '.join(unserved)} have no ready backend"
        )
    generation = mr.metadata.generation
    return mroute.ModelRouteStatus(
        observed_generation=generation,
        conditions=conditions.apply_verdict(
            mr.status.conditions, verdict, generation=generation, now=now
        ),
        names=mr.names(),
        backends_ready=f"{ready_count}/{len(backends)}",
        backends=backends,
        split=split,
    )
