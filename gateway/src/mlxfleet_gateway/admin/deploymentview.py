"""Deployments and routes as the console's deployments page shows them, built from the watched
objects (pure).

Per deployment: replicas, where (each placement's phase and download progress), why not Ready,
its SwapPlan, live figures through this gateway; per route: rules with the split in force and
each backend's readiness. Objects are read raw, as viewkit says why.
May import: the standard library, admin.viewkit. Called by: admin.api, admin.live (`Live`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mlxfleet_gateway.admin import viewkit

JsonDict = viewkit.JsonDict
# the shared readers of raw values, short: the parsers below are dense with them
_d, _l, _int, _num = viewkit.as_mapping, viewkit.as_list, viewkit.as_int, viewkit.as_float


@dataclass(frozen=True, slots=True)
class Placement:
    node: str
    phase: str
    ready: bool
    message: str
    download: viewkit.Progress | None


@dataclass(frozen=True, slots=True)
class Live:
    """Live figures of one model name through this gateway (console.live)."""

    tokens_per_s: float
    ttft_ms: float | None
    requests_per_s: float


@dataclass(frozen=True, slots=True)
class Deployment:
    namespace: str
    name: str
    served: str
    source: str
    engine: str
    replicas: int
    ready_replicas: int
    ready: viewkit.Condition | None
    placements: list[Placement]
    swap_plan: str
    live: Live | None

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"


def deployments(raw: Iterable[JsonDict], live: Mapping[str, Live]) -> list[Deployment]:
    out = []
    for md in raw:
        spec, status = _d(md.get("spec")), _d(md.get("status"))
        model = _d(spec.get("model"))
        served = str(status.get("servedName") or model.get("servedName") or viewkit.name_of(md))
        placements = [
            Placement(
                node=str(_d(p).get("node") or ""),
                phase=str(_d(p).get("phase") or ""),
                ready=bool(_d(p).get("ready")),
                message=str(_d(p).get("message") or ""),
                download=viewkit.progress(_d(p).get("download")),
            )
            for p in _l(status.get("placements"))
        ]
        out.append(
            Deployment(
                namespace=viewkit.namespace_of(md),
                name=viewkit.name_of(md),
                served=served,
                source=str(model.get("source") or ""),
                engine=str(_d(spec.get("engine")).get("name") or "mlx-lm"),
                replicas=_int(spec.get("replicas")) or 0,
                ready_replicas=_int(status.get("readyReplicas")) or 0,
                ready=viewkit.ready_of(md),
                placements=placements,
                swap_plan=str(status.get("swapPlan") or ""),
                live=live.get(served),
            )
        )
    return sorted(out, key=lambda d: (d.namespace, d.name))


@dataclass(frozen=True, slots=True)
class RouteBackend:
    rule: str
    name: str
    weight: int
    percent: float | None  # the split in force (status.split)
    ready: bool | None
    message: str


@dataclass(frozen=True, slots=True)
class Route:
    namespace: str
    name: str
    names: list[str]
    ready: viewkit.Condition | None
    backends: list[RouteBackend]
    live: Live | None

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"


def _backend_name(b: JsonDict) -> str:
    return str(b.get("name") or b.get("deployment") or "external")


def routes(raw: Iterable[JsonDict], live: Mapping[str, Live]) -> list[Route]:
    out = []
    for r in raw:
        spec, status = _d(r.get("spec")), _d(r.get("status"))
        split = {
            (str(_d(s).get("rule")), str(_d(s).get("backend"))): _num(_d(s).get("percent"))
            for s in _l(status.get("split"))
        }
        ready = {
            (str(_d(b).get("rule")), str(_d(b).get("name"))): _d(b)
            for b in _l(status.get("backends"))
        }
        backends = []
        rules = [
            (str(_d(x).get("name") or ""), _l(_d(x).get("backends"))) for x in _l(spec.get("rules"))
        ]
        fallback = _d(spec.get("fallback"))
        if fallback:
            rules.append(("fallback", _l(fallback.get("backends"))))
        for rule, items in rules:
            for b in items:
                b = _d(b)
                bn = _backend_name(b)
                st = ready.get((rule, bn), {})
                backends.append(
                    RouteBackend(
                        rule=rule,
                        name=bn,
                        weight=_int(b.get("weight")) or 0 if "weight" in b else 1,
                        percent=split.get((rule, bn)),
                        ready=bool(st["ready"]) if "ready" in st else None,
                        message=str(st.get("message") or ""),
                    )
                )
        names = [str(n) for n in _l(status.get("names")) or _l(spec.get("names"))] or [
            viewkit.name_of(r)
        ]
        out.append(
            Route(
                namespace=viewkit.namespace_of(r),
                name=viewkit.name_of(r),
                names=names,
                ready=viewkit.ready_of(r),
                backends=backends,
                live=next((live[n] for n in names if n in live), None),
            )
        )
    return sorted(out, key=lambda r: (r.namespace, r.name))
