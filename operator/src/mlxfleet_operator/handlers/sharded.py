"""Sharded ModelDeployment reconcile: place groups (core.fleet.groupplacement), tell each chosen
agent its rank (slot spec with rank, world size and the ring hostfile), stop the ranks of broken
groups, publish rank 0 of each group (ready only when every rank is), write status with the groups.

Between reconciles (every --poll-seconds) the group watch (`watch_groups`: a kopf daemon on
every sharded ModelDeployment, which kopf stops when the object is deleted or stops being
sharded) asks the agents of every ready group's ranks for their state every WATCH_INTERVAL_S
(0.15 s): a rank that is not ready any more (rank 0's agent saw a peer lost) or whose agent
stops answering takes its group's rank 0 out of the EndpointSlice at once, writing only the
slices (the issue's bound is 1 s; the poll alone would take up to two poll periods). The next
reconcile treats such a group as broken and decides the rest (re-forming); each reconcile hands
the watch its own ready groups (`ObjectState.groups`; none: the watch idles). A model change
creates a SwapPlan (core.sharded.plan_due); the groups a running step swaps are the plan's: no
PUT from here, published ready while rank 0's agent serves. The withdrawal is not taken under
the object's lock (a reconcile under load may hold it long): a reconcile running meanwhile
checks `ObjectState.withdrawn` before it publishes. The watch acts only while this process
leads (`leader.may_act`; kopf itself runs only in the leader).

May import: kopf, adapters, core, api. Called by: handlers.deployments (reconcile of a
ModelDeployment whose spec.sharding is set, and the registration of `watch_groups`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import kopf

from mlxfleet_operator.adapters import (
    agent,
    events,
    kube,
    leader,
    metrics,
    objects,
    publishing,
    runtime,
    statuspatch,
)
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core import sharded
from mlxfleet_operator.core.deployment import plan as plans
from mlxfleet_operator.core.deployment import status as mdstatus
from mlxfleet_operator.core.fleet import facts as dep
from mlxfleet_operator.core.fleet import groupplacement
from mlxfleet_operator.core.kit import conditions, naming
from mlxfleet_operator.core.kit import events as core_events
from mlxfleet_operator.core.swapplan import prefetch

log = logging.getLogger(__name__)
WATCH_INTERVAL_S = 0.15
WATCH_MISSES = 2  # consecutive unanswered state requests that count as a lost rank


def _fresh(rt: runtime.Runtime, facts: list[dep.NodeFacts]) -> frozenset[str]:
    """Nodes whose agent answered the latest poll (a rank's node that stopped answering takes
    its group out of the endpoints at once, before the heartbeat misses add up)."""
    now = runtime.now()
    limit = timedelta(seconds=rt.config.poll_seconds * 1.5 + 0.5)
    out = set()
    for f in facts:
        entry = rt.fleet.get(f.name)
        if entry is None or not entry.answering or entry.polled_at is None:
            continue
        if now - entry.polled_at <= limit:
            out.add(f.name)
    return frozenset(out)


async def reconcile(
    rt: runtime.Runtime,
    md: mdep.ModelDeployment,
    body: kopf.Body,
    facts: list[dep.NodeFacts],
    patch: kopf.Patch,
    *,
    endpoint: str,
    sized: int | conditions.Verdict,
    plan: plans.PlanInfo | None,
) -> None:
    namespace, name = md.metadata.namespace or "", md.metadata.name or ""
    slot = naming.slot_name(namespace, name)
    now = runtime.now()
    uid = str(body.metadata.uid)
    cached = sharded.cached_model(md, facts)
    if isinstance(sized, conditions.Verdict) or cached is None:
        verdict = sized if isinstance(sized, conditions.Verdict) else conditions.Verdict(
            False, cond.Reason.SIZE_UNKNOWN, "waiting for the model's shape", reconciling=True
        )  # fmt: skip
        status = mdstatus.unplaced_status(md, verdict, now=now, endpoint=endpoint)
        events.announce_ready(rt, body, md.status.conditions, status.conditions)
        statuspatch.write_status(patch, status, body, rt.objects)
        return
    by_name = {f.name: f for f in facts}
    fresh = _fresh(rt, facts)
    views = [
        sharded.node_view(
            f,
            slot=slot,
            fresh=f.name in fresh,
            last_seen=e.polled_at if (e := rt.fleet.get(f.name)) is not None else None,
        )
        for f in facts
    ]
    request = sharded.group_request(md, cached)
    governed = sharded.Governed.of(md, plan)
    broken = sharded.broken_groups(md, by_name, fresh, slot=slot, governed=governed)
    kept = rt.objects.of(uid)
    withdrawn, kept.withdrawn = kept.withdrawn, set()  # lost between reconciles: broken too
    broken |= {g.index for g in md.status.groups if g.id in withdrawn} - governed.swapping
    decision = groupplacement.place_groups(
        request,
        views,
        sharded.current(md),
        now=now,
        failover_delay=timedelta(seconds=rt.config.failover_delay),
    )
    forms = sharded.formations(md, decision, by_name, broken, slot=slot, governed=governed)
    if sharded.plan_due(md, forms, plan):
        create = sharded.new_plan(md, forms)
        if await rt.kube.create_swap_plan(namespace, plans.wire(create)):
            events.post(body, plans.created_event(create))
        plan = plans.created(md, create)
    forming = sharded.forming(forms, by_name, fresh, governed, slot=slot, broken=broken)
    await _prefetch(rt, body, forming)
    outcomes: dict[str, dep.Outcome] = {}
    wanted: set[str] = set()
    for form in forms:
        for rank in form.plan.ranks:
            wanted.add(rank.node)
            fact = by_name.get(rank.node)
            if fact is None or rank.node not in fresh or governed.writes(form, broken):
                continue  # a SwapPlan writes this group's ranks
            spec = sharded.rank_spec(md, form, rank)
            observed = fact.slot(slot)
            if observed is not None and observed.spec == spec:
                continue
            put = dep.SlotRequest(rank.node, spec)
            if (outcome := await rt.fleet.put_slot(slot, put)) is not None:
                outcomes[rank.node] = outcome
    # survivors of broken groups not re-formed yet, and nodes no group wants: stop their ranks
    for f in facts:
        if f.name in wanted or f.name not in fresh or f.slot(slot) is None:
            continue
        await rt.fleet.delete_slot(f.name, slot)
    result = sharded.status(
        md,
        decision=decision,
        forms=forms,
        facts=by_name,
        fresh=fresh,
        outcomes=outcomes,
        endpoint=endpoint,
        now=now,
        reforming=broken,
        slot=slot,
        plan=plan,
    )
    lost_now = kept.withdrawn  # the watch withdrew a group while this ran
    gone = {g.ranks[0].node for g in result.status.groups if g.id in lost_now and g.ranks}
    await rt.publisher.publish(
        body,
        [
            publishing.Endpoint.from_url(n, url, ready=ok and n not in gone)
            for n, url, ok in result.endpoints
        ],
    )
    for index in sorted(broken):
        if rt.first_time(
            str(body.metadata.uid),
            f"broken-{index}-{md.status.groups[0].id if md.status.groups else ''}",
        ):
            lost = f"group {index} lost a rank: re-forming"
            events.post(body, core_events.Event(cond.Reason.GROUP_REFORMING, lost, warning=True))
    events.announce_ready(rt, body, md.status.conditions, result.status.conditions)
    statuspatch.write_status(patch, result.status, body, rt.objects)
    watched = {g.id: [r.node for r in g.ranks] for g in result.status.groups if g.ready and g.ranks}
    # none ready (e.g. swapping): a watch of an old formation must not withdraw the new
    kept.groups = (
        objects.GroupWatch(dict(body), watched, result.endpoints, by_name, slot=slot)
        if watched
        else None
    )
    metrics.observe_deployment(
        namespace,
        name,
        ready=cond.is_true(result.status.conditions, cond.ConditionType.READY),
        ready_replicas=result.status.ready_replicas or 0,
        replicas=md.spec.replicas,
    )


async def _prefetch(rt: runtime.Runtime, body: kopf.Body, forming: Mapping[str, ModelRef]) -> None:
    """Before a new formation's ranks are PUT: every rank's node that lacks the model starts
    copying it, from peers that hold it first (a rank's slot then joins that copy)."""
    states, urls = rt.fleet.states(), rt.fleet.control_urls()
    for node, model in forming.items():
        for ask in prefetch.asks(model, [node], states, urls):
            answer = await rt.fleet.prefetch(ask.node, ask.model, ask.peers)
            if answer is not None and answer.error is not None:
                events.post(body, prefetch.refused(ask, answer.error))


def is_sharded(spec: kopf.Spec, **_: Any) -> bool:
    """The group watch's filter: kopf runs `watch_groups` while spec.sharding is set."""
    return spec.get("sharding") is not None


async def watch_groups(
    body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    """The group watch of one sharded deployment (a kopf daemon; see the module docstring):
    every WATCH_INTERVAL_S, the ranks of the groups its last reconcile found ready; a group
    that lost one is withdrawn (rank 0 out of the slices, `ObjectState.withdrawn` for the next
    reconcile) and not watched again until a reconcile hands it over anew."""
    rt, uid = runtime.of(memo), str(body.metadata.uid)
    seen: objects.GroupWatch | None = None
    misses: dict[str, int] = {}
    while not stopped:
        await asyncio.sleep(WATCH_INTERVAL_S)
        kept = rt.objects.get(uid)
        target = kept.groups if kept is not None else None
        if target is not seen:  # a reconcile handed over other groups: count misses anew
            seen, misses = target, {}
        if kept is None or target is None or not leader.may_act():
            continue
        lost = await _lost(rt, target, misses)
        if not lost or stopped or kept.groups is not target:
            continue  # nothing lost, or stopping, or a reconcile replaced what it checked
        await _withdraw(rt, kept, target, lost)


async def _lost(
    rt: runtime.Runtime, target: objects.GroupWatch, misses: dict[str, int]
) -> set[str]:
    """The watched groups one of whose ranks is lost now (`misses`: unanswered requests in a
    row, per node, kept between calls)."""

    async def rank_lost(node: str, group: str) -> bool:
        entry, fact = rt.fleet.get(node), target.facts.get(node)
        if entry is None or fact is None:
            return False
        try:
            state = await entry.client.state()
        except agent.AgentError:
            misses[node] = misses.get(node, 0) + 1
            if misses[node] < WATCH_MISSES:
                return False
            rt.fleet.record(node, None, now=runtime.now())
            return True
        misses[node] = 0
        rt.fleet.record(node, state, now=runtime.now())
        seen = dataclasses.replace(fact, state=state)
        return sharded.rank_lost(seen, slot=target.slot, group_id=group, fresh=True)

    checks = [(g, n) for g, nodes in target.watched.items() for n in nodes]
    answers = await asyncio.gather(*(rank_lost(n, g) for g, n in checks))
    return {g for (g, _), gone in zip(checks, answers, strict=True) if gone}


async def _withdraw(
    rt: runtime.Runtime, kept: objects.ObjectState, target: objects.GroupWatch, lost: set[str]
) -> None:
    """Take the rank 0 of each `lost` group out of the slices (not under the object's lock: a
    reconcile may hold it), tell the next reconcile, and stop watching until it hands over."""
    leaders = {target.watched[g][0] for g in lost}
    kept.withdrawn.update(lost)  # the next reconcile: broken
    kept.groups = None
    try:
        await rt.publisher.publish_slices(
            target.body,
            [
                publishing.Endpoint.from_url(n, url, ready=ok and n not in leaders)
                for n, url, ok in target.endpoints
            ],
        )
    except kube.KubeError as exc:  # the next reconcile publishes it as broken
        log.warning("sharded group lost a rank; withdrawing rank 0 failed: %s", exc)
        return
    log.warning("sharded group lost a rank: rank 0 withdrawn", extra={"groups": sorted(lost)})
