"""ModelDeployment reconcile: size the model, take the count (the autoscaler's, for deployments
with spec.minReplicas / spec.maxReplicas, decided in `convergeskip`), decide (core), create a
SwapPlan for a model change, PUT and DELETE agent slots, publish the Service + EndpointSlices,
write status. Runs on first sight, on a change of spec, labels or annotations, and every
--poll-seconds (convergence, failover after --failover-delay), unless `convergeskip` finds
nothing changed; on delete, drops the slot everywhere and unpublishes.

May import: kopf, pydantic, adapters, core, api, settings, `guard`, `indexes`, `sharded`,
`convergeskip`. Called by: kopf.
"""

from __future__ import annotations

import functools
import time
from datetime import datetime, timedelta
from typing import Any

import kopf
import pydantic

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import events, metrics, publishing, runtime, statuspatch
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import resources
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.core.deployment import (
    autoscale,
    evictions,
    footprint,
    intent,
    preemption,
    replicas,
    slots,
)
from mlxfleet_operator.core.deployment import plan as plans
from mlxfleet_operator.core.deployment import status as mdstatus
from mlxfleet_operator.core.fleet import facts, placement
from mlxfleet_operator.core.kit import conditions, naming
from mlxfleet_operator.core.swapplan import effects, prefetch
from mlxfleet_operator.handlers import convergeskip, guard, indexes, sharded

KIND = resources.MODEL_DEPLOYMENT
DEPLOYMENTS = (resources.GROUP, resources.VERSION, KIND.plural)


async def changed(
    event: kopf.RawEvent,
    body: kopf.Body,
    memo: kopf.Memo,
    patch: kopf.Patch,
    logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    """The object's first sight in this process (created, or the operator started), and every
    change of its spec, labels or annotations (kopf's own left out): a full reconcile, skipped
    like a timer tick while its inputs are those of the last run. Status and finalizer writes
    (ours, mostly) are the timer's to notice, which takes several at once. Never fails to kopf
    (`guard.by_timer`): the timer retries. This handler of watch events leaves no record on the
    object, where kopf's create/update/resume handlers wrote `last-handled-configuration` and
    `kopf-managed` on every ModelDeployment (at 500 x 1,000: 1,543 PATCHes of the objects
    while converging, and 967 in the 60 s after, kopf catching up), remembering in memory
    what it ran for instead (`ObjectState.handled`)."""
    if event.get("type") == "DELETED" or body.metadata.get("deletionTimestamp"):
        return  # being deleted, or gone: `teardown` owns it (and forgets its record)
    meta = body.metadata
    seen = (
        meta.get("generation"),
        tuple(sorted(meta.labels.items())),
        tuple(sorted((k, v) for k, v in meta.annotations.items() if not _kopfs(k))),
    )
    kept = runtime.of(memo).objects.of(str(meta.uid))
    if kept.handled == seen:
        return
    kept.handled = seen
    async with guard.by_timer(logger):
        await converge(body, memo, patch, logger=logger, **kwargs)


def _kopfs(annotation: str) -> bool:
    """An annotation kopf keeps (ours on objects an earlier release handled)."""
    return annotation.startswith(f"{resources.ANNOTATION_PREFIX}/")


async def converge(body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, **kwargs: Any) -> None:
    """The timer: a full reconcile, skipped while none of its inputs changed since the last one
    (the deployment object, the InferenceNodes, the agents' answers, its SwapPlans; only the
    nodes it is placed on once all its replicas are placed; only those and room for its
    footprint while it waits for room), at most `convergeskip.CONVERGE_RESYNC_S` seconds; never
    skipped while a node it uses is not Ready (failover is timed). Checked before the object's
    lock (cheap, not counted) and again under it (a run that waited for the lock may find its
    work done): `convergeskip` reads the inputs and the autoscaler's count they include."""
    if body.metadata.get("deletionTimestamp"):
        return  # being deleted: `teardown` owns it now; never re-create what it removes
    rt, uid, idx = runtime.of(memo), str(body.metadata.uid), indexes.Indexes.of(kwargs)
    convergeskip.count(rt, body, idx)
    if convergeskip.due(rt, body, idx) is None:
        return
    async with guard.guarded(KIND, body, memo) as run:
        seen = convergeskip.due(rt, body, idx)
        if seen is None:
            run.skipped()
            return
        rt.settle(uid, None, at=0)
        try:
            md = mdep.ModelDeployment.model_validate(dict(body))
        except pydantic.ValidationError as exc:  # admitted, but beyond what the CRD can check
            run.invalid()
            statuspatch.write_status(patch, _invalid(body, exc), body, rt.objects)
        else:
            await reconcile(run.rt, md, body, patch, idx)
        rt.settle(uid, seen.inputs, at=time.monotonic())


async def reconcile(
    rt: runtime.Runtime,
    md: mdep.ModelDeployment,
    body: kopf.Body,
    patch: kopf.Patch,
    idx: indexes.Indexes,
) -> None:
    namespace, name = md.metadata.namespace or "", md.metadata.name or ""
    md = _scaled(rt, _as_sent(rt, md, body), body)
    kept = rt.objects.of(md.metadata.uid or "")
    kept.waiting = None  # set again below if it still finds no room
    clash = idx.slot_conflict(namespace, name, md.metadata.uid or "")
    if clash is not None:  # another deployment's slot: never PUT, DELETE or publish for it
        status = mdstatus.slot_conflict_status(md, clash, now=runtime.now())
        events.announce_ready(rt, body, md.status.conditions, status.conditions)
        statuspatch.write_status(patch, status, body, rt.objects)
        return
    view, slot = rt.fleet.version, naming.slot_name(namespace, name)
    found = _found(rt, idx, slot)
    if unpolled := facts.unpolled(found):
        waiting = f"waiting for the first poll of {', '.join(unpolled)}"
        raise kopf.TemporaryError(waiting, delay=rt.config.poll_seconds)
    endpoint = publishing.service_url(namespace, name)
    plan = await _plan(rt, md, idx)
    if md.spec.sharding is None:  # (no longer) sharded: nothing for a group watch
        kept.groups, kept.withdrawn = None, set()
    else:  # groups of ranks: their own placement and status
        size = await _size(rt, md, found)
        await sharded.reconcile(
            rt, md, body, found, patch, endpoint=endpoint, sized=size, plan=plan
        )
        return
    size = await _size(rt, md, found)
    now = runtime.now()
    if isinstance(size, conditions.Verdict):
        status = mdstatus.unplaced_status(md, size, now=now, endpoint=endpoint)
        events.announce_ready(rt, body, md.status.conditions, status.conditions)
        statuspatch.write_status(patch, status, body, rt.objects)
        return
    failover = timedelta(seconds=rt.config.failover_delay)
    if rt.fleet.version != view:  # others decided (or agents answered) while this one waited
        found = _found(rt, idx, slot)
    # from here to the slot reservations nothing awaits: the next decision sees this one's
    me = preemption.tenant(md)
    victim = evictions.as_victim(
        me,
        rt.fleet.evicting(slot),
        current=list(rt.fleet.placed(slot)),
        records=md.status.preempted_by,
        now=now,
        base=timedelta(seconds=rt.config.preemption_backoff),
    )
    want = intent.intent(
        md,
        found,
        plan=plan,
        footprint_bytes=size,
        now=now,
        failover_delay=failover,
        index=rt.fleet.placement_index(found),
        leave=victim.leave,
    )
    nominations = _nominate(rt, md, idx, want.decision, found, slot=slot, size=size, now=now)
    standing = evictions.standing(
        me,
        nominations=nominations,
        preempting_before=md.status.preempting,
        victim=victim,
        decision=want.decision,
        now=now,
    )
    uid = md.metadata.uid or ""
    for event in evictions.events_of(me, nominations, md.status.preempting, victim):
        if rt.first_time(uid, event.message, about=f"{event.reason}/{event.message}"):
            events.post(body, event)  # once: a reconcile may read a status older than its own
    if want.decision.missing and not want.decision.fits_nowhere:
        kept.waiting = size  # no room now: wait for room (`convergeskip.inputs`)
    for request in want.puts:  # before any await: the next decision sees this one's memory
        rt.fleet.reserve(slot, request, size)
    outcomes = await _perform(rt, body, want, slot=slot)
    judge = functools.partial(
        mdstatus.status,
        md,
        decision=want.decision,
        facts={f.name: f for f in found},
        desired=want.desired,
        outcomes=outcomes,
        plan=want.plan,
        footprint_bytes=size,
        endpoint=endpoint,
        now=now,
        handover=want.handover,
        standing=standing,
        stall_after=timedelta(seconds=rt.config.capacity_stall_seconds),
    )
    result = judge()
    try:
        await rt.publisher.publish(
            body,
            [publishing.Endpoint.from_url(n, url, ready=ok) for n, url, ok in result.endpoints],
        )
    except publishing.ServiceConflict as exc:  # someone else's Service: leave it, say so
        result = judge(conflict=str(exc))
    moved = want.rescheduled
    if moved is not None and rt.first_time(str(body.metadata.uid), moved.message):
        events.post(body, moved)
    events.announce_ready(rt, body, md.status.conditions, result.status.conditions)
    statuspatch.write_status(patch, result.status, body, rt.objects)
    metrics.observe_deployment(
        namespace,
        name,
        ready=cond.is_true(result.status.conditions, cond.ConditionType.READY),
        ready_replicas=result.status.ready_replicas or 0,
        replicas=autoscale.wanted(md),
    )


def _found(rt: runtime.Runtime, idx: indexes.Indexes, slot: str) -> list[facts.NodeFacts]:
    """Every node's facts as the deployment `slot` reads them, the same list as the last
    reconcile's while no node object changed in what decisions read (`NodeChanges.version`),
    none was deleted and no agent answer changed (`Fleet.all_facts`)."""
    key = (rt.nodes.version, len(idx.nodes))
    return rt.fleet.all_facts(idx.inference_nodes, key=key, slot=slot)


def _as_sent(
    rt: runtime.Runtime, md: mdep.ModelDeployment, body: kopf.Body
) -> mdep.ModelDeployment:
    """`md` with the placements this process last wrote, while kopf's body is still the version
    that write was computed against (its watch lags our writes under load). Else a reconcile
    reads where the replicas were before a failover: a lost Mac that comes back is still
    listed there (and its agent still lists the slot), so the replica moved back to it and
    the node it had failed over to was dropped (2 of 114 failed-over deployments at 200 x 400,
    62 of 249 at 500 x 1,000, each one a reload)."""
    kept = rt.objects.get(md.metadata.uid or "")
    sent = kept.sent if kept is not None else None
    if sent is None or sent.version != body.metadata.get("resourceVersion"):
        return md
    if "placements" not in sent.patch:
        return md
    placed = mdep.ModelDeploymentStatus.model_validate(
        {"placements": sent.patch["placements"] or []}
    ).placements
    return md.model_copy(update={"status": md.status.model_copy(update={"placements": placed})})


def _scaled(rt: runtime.Runtime, md: mdep.ModelDeployment, body: kopf.Body) -> mdep.ModelDeployment:
    """`md` with the autoscaler's decision in its status (what placement and the new status
    read), and the Event of a changed count, posted once."""
    kept = rt.objects.of(md.metadata.uid or "")
    scale = kept.scale
    before = md.status.desired_replicas
    scaled = autoscale.attach(md, scale)
    told = autoscale.scaled_event(before, scale) if scale is not None else None
    if told is not None and scale is not None and kept.scale_told != scale.changed_at:
        kept.scale_told = scale.changed_at
        events.post(body, told)
    return scaled


def _nominate(
    rt: runtime.Runtime,
    md: mdep.ModelDeployment,
    idx: indexes.Indexes,
    decision: placement.Decision,
    found: list[facts.NodeFacts],
    *,
    slot: str,
    size: int,
    now: datetime,
) -> tuple[preemption.Nomination, ...]:
    """The nodes this deployment takes from lower priorities for replicas that found none
    (core.deployment.preemption), held by the fleet at once (`nominate`: the next decision,
    the victims' included, counts them). None when every replica is placed."""
    by_name = {fact.name: fact for fact in found}
    nominations = preemption.landing(rt.fleet.nominated(slot), decision, by_name, slot=slot)
    me, tenants = preemption.tenant(md), {}
    if preemption.need_nodes(decision):
        memory = placement.Reason.MEMORY
        refused = [
            by_name[r.node] for r in decision.rejections if r.reason == memory and r.node in by_name
        ]
        listed = {s.name for fact in refused if fact.state for s in fact.state.slots}
        tenants = idx.evictable(listed, below=me.priority)
    if tenants:  # someone of lower priority holds memory where memory alone was missing
        sites = preemption.sites(decision, by_name, slot=slot, tenants=tenants)
        victims = {o.tenant for site in sites for o in site.occupants if o.tenant is not None}
        placed = {
            t.key: len(rt.fleet.placed(naming.slot_name(t.namespace, t.name))) for t in victims
        }
        nominations += preemption.choose(
            me,
            slot=slot,
            footprint=size,
            missing=decision.missing,
            sites=sites,
            spare=preemption.spare(victims, placed=placed, others=rt.fleet.nominations(but=slot)),
            previous=evictions.previous(md.status.preempting, holding=decision.nodes),
            now=now,
        )
    rt.fleet.nominate(slot, nominations)
    return nominations


async def _perform(
    rt: runtime.Runtime, body: kopf.Body, want: intent.Intent, *, slot: str
) -> dict[str, facts.Outcome]:
    """Create the SwapPlan, PUT and DELETE the slots core decided on; the agents' answers to
    the PUTs, by node (a node without a client yet gets none)."""
    if want.create is not None:
        namespace = want.create.metadata.namespace or ""
        if await rt.kube.create_swap_plan(namespace, plans.wire(want.create)):
            events.post(body, plans.created_event(want.create))
    outcomes: dict[str, facts.Outcome] = {}
    for request in want.puts:
        if (outcome := await rt.fleet.put_slot(slot, request)) is not None:
            outcomes[request.node] = outcome
    for node in want.deletes:
        await rt.fleet.delete_slot(node, slot)
    return outcomes


async def _plan(
    rt: runtime.Runtime, md: mdep.ModelDeployment, idx: indexes.Indexes
) -> plans.PlanInfo | None:
    """The plan that governs the deployment's replicas now (see core.deployment.plan)."""
    namespace, named = md.metadata.namespace or "", md.status.swap_plan
    found = idx.plans_of(namespace, md.metadata.name or "")
    if named and all(p.metadata.name != named for p in found):  # created, not yet indexed
        raw = await rt.kube.get_swap_plan(namespace, named)
        found += [swp.SwapPlan.model_validate(raw)] if raw else []
    return effects.governing(found, named=named)


async def _size(
    rt: runtime.Runtime, md: mdep.ModelDeployment, found: list[facts.NodeFacts]
) -> int | conditions.Verdict:
    """The footprint, asking eligible agents one by one to fetch (and size) the model when
    nobody knows it yet (core.deployment.footprint decides what their answers mean)."""
    known = footprint.known(md, found)
    if known is not None:
        return known
    candidates, probe = replicas.sizing_nodes(md, found, now=runtime.now())
    answers: list[facts.Prefetch] = []
    states, urls = rt.fleet.states(), rt.fleet.control_urls()
    for node in () if probe.fits_nowhere else candidates:
        peers = prefetch.peers_for(node, md.model_ref(), states, urls)
        answer = await rt.fleet.prefetch(node, md.model_ref(), peers)
        if answer is not None:
            answers.append(answer)
            if answer.settled:
                break
    return footprint.sized(md, found, probe=probe, answers=answers)


def _invalid(body: kopf.Body, exc: pydantic.ValidationError) -> mdep.ModelDeploymentStatus:
    """Stalled `InvalidSpec` naming each field; nothing is sent to agents."""
    message = "; ".join(
        f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()[:5]
    )
    try:
        current = mdep.ModelDeploymentStatus.model_validate(body.get("status") or {})
    except pydantic.ValidationError:
        current = mdep.ModelDeploymentStatus()
    generation = body.metadata.get("generation")
    return mdstatus.invalid_status(current, message, generation=generation, now=runtime.now())


async def teardown(
    body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **kwargs: Any
) -> None:
    """Drop the slot on every agent that answers (DELETE is idempotent: ask them all, the
    cached view may lag a fresh PUT), and the Service + EndpointSlices it owns. A slot whose
    name an older deployment holds (SlotNameConflict) is that one's: left alone."""
    namespace, uid = namespace or "", str(body.metadata.uid)
    slot = naming.slot_name(namespace, name)
    shared = indexes.Indexes.of(kwargs).slot_conflict(namespace, name, uid)
    # an in-flight reconcile finishes first; the object's record goes when this run ends (kopf
    # stopped its group watch when the deletion began)
    async with guard.guarded(KIND, body, memo, last=True) as run:
        rt = run.rt
        rt.woken.pop((namespace, name), None)
        rt.fleet.nominate(slot, ())  # the nodes it waited for are promised no more
        for node in [] if shared else list(rt.fleet.entries):
            gone = await rt.fleet.delete_slot(node, slot)
            if gone is not None:
                events.post(body, slots.not_removed(gone, reported=rt.fleet.runs(node, slot)))
        await rt.publisher.unpublish(body)
    metrics.forget_deployment(namespace, name)


def register(registry: kopf.OperatorRegistry, config: opsettings.OperatorSettings) -> None:
    kopf.on.event(*DEPLOYMENTS, registry=registry)(changed)
    kopf.timer(*DEPLOYMENTS, interval=config.poll_seconds, sharp=True, registry=registry)(converge)
    kopf.on.delete(*DEPLOYMENTS, registry=registry)(teardown)
    # the group watch of sharded deployments; kopf cancels it at once when it stops (deleted,
    # no longer sharded, the operator stopping): it holds nothing to clean up
    kopf.daemon(
        *DEPLOYMENTS,
        id="groups",
        when=sharded.is_sharded,
        cancellation_timeout=1.0,
        backoff=config.poll_seconds,
        registry=registry,
    )(sharded.watch_groups)
