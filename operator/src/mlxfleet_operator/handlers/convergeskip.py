"""The ModelDeployment converge tick's skip check, its inputs read from the object, the fleet
view and the indexes: what a reconcile of a deployment reads, as one comparable value (`inputs`;
which of them count is decided in core, `core.deployment.skip`), whether a run may be skipped
because it would see what the last one saw (`due`), and the autoscaler's count those inputs
include (`count`, `wanted`), decided on every tick before the check.

May import: kopf, pydantic, adapters, core, api, `indexes`. Called by: `deployments`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import kopf
import pydantic

from mlxfleet_operator.adapters import runtime
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.deployment import autoscale, skip
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.handlers import indexes

CONVERGE_RESYNC_S = 60.0  # the timer runs a full reconcile at least this often


def count(rt: runtime.Runtime, body: kopf.Body, idx: indexes.Indexes) -> None:
    """The autoscaler's decision for a deployment whose count it owns (spec.minReplicas or
    spec.maxReplicas set), from the load its agents and the gateways report now, kept in
    the object's record (`ObjectState.scale`): taken on every run and timer tick (its windows
    sample the load), before the skip check, which reads the count it decided."""
    uid, spec = str(body.metadata.uid), body.get("spec") or {}
    if spec.get("minReplicas") is None and spec.get("maxReplicas") is None:
        if (kept := rt.objects.get(uid)) is not None:
            kept.scale = None
        return
    try:
        md = mdep.ModelDeployment.model_validate(dict(body))
    except pydantic.ValidationError:
        return  # the reconcile says why (Stalled)
    namespace, name = md.metadata.namespace or "", md.metadata.name or ""
    now, config = runtime.now(), rt.config
    load = autoscale.load_of(
        rt.fleet.observed(naming.slot_name(namespace, name)),
        idx.demand_of(namespace, name),
        now=now,
    )
    windows = autoscale.Windows(
        up=timedelta(seconds=config.scale_up_window),
        down=timedelta(seconds=config.scale_down_window),
    )
    kept = rt.objects.of(uid)
    last = kept.scale or autoscale.resume(md.status)
    bounds = autoscale.Bounds.of(md.spec)
    kept.scale = autoscale.decide(bounds, load, last, now=now, windows=windows)


def wanted(rt: runtime.Runtime, uid: str, spec: Mapping[str, Any]) -> int:
    """The count a reconcile places: the autoscaler's, else spec.replicas."""
    kept = rt.objects.get(uid)
    scale = kept.scale if kept is not None else None
    return scale.desired if scale is not None else int(spec.get("replicas", 1))


@dataclasses.dataclass(frozen=True)
class Due:
    inputs: object | None  # what the run will have seen (None: always run)


def due(rt: runtime.Runtime, body: kopf.Body, idx: indexes.Indexes) -> Due | None:
    """None when a run just decided on these inputs (skip); else what this run will see."""
    seen = inputs(rt, body, idx)
    uid = str(body.metadata.uid)
    if seen is not None and rt.unchanged(uid, seen, at=time.monotonic(), resync=CONVERGE_RESYNC_S):
        return None
    return Due(seen)


def not_ready_since(body: kopf.Body) -> datetime | None:
    """When the deployment's Ready condition turned False (None: it is not False, or the time
    does not parse)."""
    for c in (body.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "False":
            try:
                return datetime.fromisoformat(str(c.get("lastTransitionTime")))
            except ValueError:
                return None
    return None


def inputs(rt: runtime.Runtime, body: kopf.Body, idx: indexes.Indexes) -> object | None:
    """What a reconcile of `body` reads, as a comparable value (None: always reconcile).

    Which inputs count is decided in core (`core.deployment.skip.reads`); here they are read:
    a settled deployment's nodes (of their agents' answers, its own slot and the node's part,
    `Fleet.placed_reads`; of their objects, what decisions read, `NodeChanges`); for one
    waiting for room (`Runtime.waiting`: its footprint) also whatever could give it room: a
    node that may now take its footprint (`Fleet.room_version`) or a node added, back Ready,
    relabelled, uncordoned (`runtime.NodeChanges.shape`); else the whole fleet's versions."""
    view = rt.nodes  # kept by the node index: no scan of every node per deployment per tick
    meta, spec = body.metadata, body.get("spec") or {}
    uid, slot = str(meta.uid), naming.slot_name(meta.namespace or "", meta.name or "")
    plans = idx.plans_of(meta.namespace or "", meta.name or "")
    want = wanted(rt, uid, spec)
    own = (
        meta.get("resourceVersion"),
        tuple((p.metadata.name, p.metadata.resource_version) for p in plans),
        want,
    )
    placed = rt.fleet.placed(slot)
    status = body.get("status") or {}
    listed = [p.get("node") for p in status.get("placements") or []]
    kept = rt.objects.get(uid)
    need = kept.waiting if kept is not None else None
    scaled = kept is not None and kept.scale is not None  # the autoscaler owns the count
    reads = skip.reads(
        skip.Readings(
            sharded=spec.get("sharding") is not None,
            plans_finished=all(
                p.status.phase is not None and p.status.phase.terminal for p in plans
            ),
            settles_at=want if scaled else int(spec.get("replicas") or 1),
            placed=placed,
            listed=listed,
            not_ready=view.not_ready,
            known=idx.nodes,
            preempting=bool(rt.fleet.nominated(slot) or rt.fleet.evicting(slot)),
            preemption_in_status=bool(status.get("preempting") or status.get("preemptedBy")),
            waiting=need is not None,
        )
    )
    if reads is skip.Reads.ALWAYS:
        return None
    if reads is skip.Reads.PLACED:
        return (*own, rt.fleet.placed_reads(slot), view.versions(placed))
    if reads is skip.Reads.ROOM and need is not None:
        return (
            *own,
            tuple(placed.items()),
            view.versions([*placed, *(n for n in listed if n not in placed)]),
            rt.fleet.room_version(need),
            view.shape,
            len(idx.nodes),
            skip.stall_due(  # Stalled is due: decide again
                not_ready_since(body),
                now=runtime.now(),
                after=timedelta(seconds=rt.config.capacity_stall_seconds),
            ),
        )
    return (
        *own,
        rt.fleet.version,
        view.version,
        len(idx.nodes),  # a deleted node leaves the index without an event the view sees
    )
