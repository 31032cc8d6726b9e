"""ModelDeployment reconcile: size the model, place replicas (core), tell agents which slots to
run or drop, hand model changes to a SwapPlan, publish the Service + EndpointSlices, write status.
Runs on create/update/resume and on a timer (convergence, failover after the configured delay).

May import: kopf, adapters, core, api, settings. Called by: kopf.
"""

from __future__ import annotations

import copy
import functools
import time
from datetime import timedelta
from typing import Any

import kopf
import pydantic

from mlxfleet_agent import contract, sizing
from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import agent, kube, metrics, runtime
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import resources
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.core import conditions, naming, placement
from mlxfleet_operator.core import deployment as dep
from mlxfleet_operator.core import deployment_status as mdstatus
from mlxfleet_operator.handlers import sharded

CONFIG = opsettings.current()
DEPLOYMENTS = (resources.GROUP, resources.VERSION, resources.MODEL_DEPLOYMENT.plural)
NODES = (resources.GROUP, resources.VERSION, resources.INFERENCE_NODE.plural)
PLANS = (resources.GROUP, resources.VERSION, resources.SWAP_PLAN.plural)
R = cond.Reason


@kopf.index(*NODES)
def inference_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, Any]:
    """Every InferenceNode by name (kopf fills it before any handler runs)."""
    return {name: copy.deepcopy(dict(body))}


def _facts(
    rt: runtime.Runtime, index: kopf.Index[str, Any]
) -> tuple[list[dep.NodeFacts], list[str]]:
    """Node facts, and the Ready nodes not polled yet (after a restart: wait, never guess)."""
    facts, unpolled = [], []
    for name in sorted(index):
        for raw in index[name]:
            node = inode.InferenceNode.model_validate(raw)
            entry = rt.fleet.get(name)
            fact = dep.NodeFacts(
                node=node,
                state=entry.state if entry else None,
                endpoint=entry.endpoint if entry else None,
            )
            if fact.ready and fact.state is None:
                unpolled.append(name)
            facts.append(fact)
    return facts, unpolled


@kopf.index(*DEPLOYMENTS)
def deployment_slots(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, dep.SlotClaim]:
    """Every ModelDeployment by its agent slot name (two names may share one: a hash collision)."""
    meta = body.get("metadata") or {}
    claim = dep.SlotClaim(
        created=str(meta.get("creationTimestamp") or ""),
        namespace=namespace or "",
        name=name,
        uid=str(meta.get("uid") or ""),
    )
    return {naming.slot_name(namespace or "", name): claim}


@kopf.index(*PLANS)
def swap_plans(namespace: str | None, body: kopf.Body, **_: Any) -> dict[tuple[str, str], Any]:
    """SwapPlans by (namespace, deployment): people may write them too."""
    ref = (body.get("spec") or {}).get("deploymentRef") or {}
    return {(namespace or "", str(ref.get("name", ""))): copy.deepcopy(dict(body))}


async def _plan(
    rt: runtime.Runtime, md: mdep.ModelDeployment, index: kopf.Index[tuple[str, str], Any]
) -> dep.PlanInfo | None:
    """The plan that governs the deployment's replicas now (see core.deployment.governing)."""
    key = (md.metadata.namespace or "", md.metadata.name or "")
    plans = [swp.SwapPlan.model_validate(raw) for raw in index.get(key, [])]
    named = md.status.swap_plan
    if named and all(p.metadata.name != named for p in plans):  # created, not yet in the index
        raw = await rt.kube.get_swap_plan(key[0], named)
        plans += [swp.SwapPlan.model_validate(raw)] if raw else []
    return dep.governing(plans, named=named)


async def _size(
    rt: runtime.Runtime, md: mdep.ModelDeployment, facts: list[dep.NodeFacts]
) -> int | conditions.Verdict:
    """The footprint, asking one eligible agent to fetch (and size) the model when nobody knows."""
    try:
        return dep.footprint(md, facts)
    except sizing.UnknownModelSize:
        pass
    candidates, probe = dep.sizing_nodes(md, facts, now=runtime.now())
    if probe.fits_nowhere:
        return conditions.Verdict(
            False, R.NO_MATCHING_NODES, probe.rejection_summary(), stalled=True
        )
    failures: list[str] = []
    for node in candidates:
        entry = rt.fleet.get(node)
        if entry is None:
            continue
        try:
            cached = await entry.client.prefetch(*dep.spec_model(md))
        except agent.AgentError as exc:
            if dep.refusal_is_permanent(exc.status):  # cannot exist as given: a person must act
                return conditions.Verdict(False, R.SOURCE_INVALID, f"{node}: {exc}", stalled=True)
            failures.append(f"{node}: {exc}")  # e.g. 502: the hub did not answer; next node
            continue
        try:
            return dep.footprint(md, facts, extra=[cached] if cached else [])
        except sizing.UnknownModelSize as exc:
            return conditions.Verdict(
                False, R.SIZE_UNKNOWN, f"fetching on {node}: {exc}", reconciling=True
            )
    if failures:  # retried on every reconcile (the timer), with the agents' own words
        text = "fetching the model failed, retrying: " + "; ".join(failures)
        return conditions.Verdict(False, R.SOURCE_UNAVAILABLE, text, reconciling=True)
    return conditions.Verdict(
        False,
        R.WAITING_FOR_CAPACITY,
        f"no Ready node may take the model to size it: {probe.rejection_summary()}",
        reconciling=True,
    )


async def _apply(
    rt: runtime.Runtime,
    md: mdep.ModelDeployment,
    facts: dict[str, dep.NodeFacts],
    decision: placement.Decision,
    desired: dict[str, dep.Model],
    plan: dep.PlanInfo | None,
    handover: dep.Handover,
) -> dict[str, dep.Outcome]:
    """PUT the desired slot where it differs; DELETE it where no replica is wanted (once a
    dropped replica's replacements serve: make-before-break)."""
    slot = naming.slot_name(md.metadata.namespace or "", md.metadata.name or "")
    outcomes: dict[str, dep.Outcome] = {}
    for node in dep.nodes_to_put(decision, plan):
        entry, fact = rt.fleet.get(node), facts.get(node)
        if entry is None or fact is None or not fact.ready:
            continue
        spec = dep.slot_spec(md, desired[node])
        observed = fact.slot(slot)
        if observed is not None and observed.spec == spec:
            continue
        outcomes[node] = await _put(entry.client, slot, spec, node)
    held = (*handover.held, *(plan.holds if plan is not None and plan.active else ()))
    for node in dep.slots_to_delete(list(facts.values()), decision, slot=slot, held=held):
        entry = rt.fleet.get(node)
        if entry is not None:
            try:
                await entry.client.delete_slot(slot)
                rt.fleet.slot_removed(node, slot)
                metrics.AGENT_CALLS.labels("delete_slot", "ok").inc()
            except agent.AgentError:
                metrics.AGENT_CALLS.labels("delete_slot", "error").inc()
    return outcomes


async def _put(
    client: agent.AgentClient, slot: str, spec: contract.SlotSpec, node: str
) -> dep.Outcome:
    try:
        await client.put_slot(slot, spec)
    except agent.AgentRefused as exc:
        metrics.AGENT_CALLS.labels("put_slot", "refused").inc()
        return dep.Outcome(node, str(exc), status=exc.status, field=exc.field)
    except agent.AgentUnreachable as exc:
        metrics.AGENT_CALLS.labels("put_slot", "unreachable").inc()
        return dep.Outcome(node, str(exc), status=exc.status, field=exc.field)
    metrics.AGENT_CALLS.labels("put_slot", "ok").inc()
    return dep.Outcome(node)


async def _create_plan(
    rt: runtime.Runtime, body: kopf.Body, md: mdep.ModelDeployment, decision: placement.Decision
) -> dep.PlanInfo:
    plan = dep.new_plan(md, decision)
    raw = plan.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"status"})
    raw["metadata"]["ownerReferences"] = [kube.owner_reference(body)]
    if await rt.kube.create_swap_plan(md.metadata.namespace or "", raw):
        kopf.event(
            body,
            type="Normal",
            reason="SwapPlanCreated",
            message=f"SwapPlan {plan.metadata.name}: {len(decision.kept)} replicas "
            f"to {plan.spec.target.source}",
        )
    return dep.PlanInfo(
        name=plan.metadata.name or "",
        target=dep.spec_model(md),
        phase=None,
        paused=plan.spec.paused,
    )


async def reconcile(
    rt: runtime.Runtime,
    md: mdep.ModelDeployment,
    body: kopf.Body,
    index: kopf.Index[str, Any],
    plans: kopf.Index[tuple[str, str], Any],
    claims: kopf.Index[str, dep.SlotClaim],
    patch: kopf.Patch,
) -> None:
    namespace, name = md.metadata.namespace or "", md.metadata.name or ""
    endpoint = kube.service_url(namespace, name)
    clash = dep.slot_conflict(claims, namespace=namespace, name=name, uid=md.metadata.uid or "")
    if clash is not None:  # another deployment's slot: never PUT, DELETE or publish for it
        verdict = conditions.Verdict(False, R.SLOT_NAME_CONFLICT, clash, stalled=True)
        status = mdstatus.unplaced_status(md, verdict, now=runtime.now(), endpoint=None)
        kube.write_status(patch, status, body)
        return
    facts, unpolled = _facts(rt, index)
    if unpolled:
        raise kopf.TemporaryError(
            f"waiting for the first poll of {', '.join(unpolled)}", delay=CONFIG.poll_seconds
        )
    if md.spec.sharding is not None:  # groups of ranks: their own placement and status
        size = await _size(rt, md, facts)
        await sharded.reconcile(rt, md, body, facts, patch, endpoint=endpoint, sized=size)
        return
    plan = await _plan(rt, md, plans)
    size = await _size(rt, md, facts)
    now = runtime.now()
    if isinstance(size, conditions.Verdict):
        status = mdstatus.unplaced_status(md, size, now=now, endpoint=endpoint)
        kube.write_status(patch, status, body)
        return
    decision = dep.place(
        md,
        facts,
        footprint_bytes=size,
        now=now,
        failover_delay=timedelta(seconds=CONFIG.failover_delay),
        moves=plan.moves if plan is not None else None,
    )
    desired = dep.desired_models(md, decision, plan)
    if dep.plan_due(md, desired, decision, plan):
        plan = await _create_plan(rt, body, md, decision)
    by_name = {f.name: f for f in facts}
    slot = naming.slot_name(namespace, name)
    handover = dep.handover(md, decision, by_name, slot=slot)
    outcomes = await _apply(rt, md, by_name, decision, desired, plan, handover)
    judge = functools.partial(
        mdstatus.status,
        md,
        decision=decision,
        facts=by_name,
        desired=desired,
        outcomes=outcomes,
        plan=plan,
        footprint_bytes=size,
        endpoint=endpoint,
        now=now,
        handover=handover,
    )
    result = judge()
    try:
        await rt.kube.publish(
            body, [kube.Endpoint.from_url(n, url, ready=ok) for n, url, ok in result.endpoints]
        )
    except kube.ServiceConflict as exc:  # someone else's Service: leave it, say so
        result = judge(conflict=str(exc))
    removing = {p.node for p in md.status.placements if p.phase == mdep.PlacementPhase.REMOVING}
    moved = [n for n in decision.dropped if n not in removing]  # once, when a move starts
    move = f"{sorted(moved)}->{sorted(decision.added)}"
    if moved and decision.added and rt.first_time(str(body.metadata.uid), move):
        kopf.event(
            body,
            type="Normal",
            reason="Rescheduled",
            message=f"replicas moved from {', '.join(moved)} to {', '.join(decision.added)}",
        )
    kube.write_status(patch, result.status, body)
    metrics.DEPLOYMENT_READY.labels(namespace, name).set(result.status.ready_replicas or 0)
    metrics.DEPLOYMENT_WANTED.labels(namespace, name).set(md.spec.replicas)


async def _guarded(
    body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, kwargs: dict[str, Any]
) -> None:
    if body.metadata.get("deletionTimestamp"):
        return  # being deleted: `teardown` owns it now; never re-create what it removes
    rt = runtime.of(memo)
    started = time.monotonic()
    try:
        md = mdep.ModelDeployment.model_validate(dict(body))
    except pydantic.ValidationError as exc:  # admitted, but beyond what the CRD can check
        metrics.RECONCILES.labels("ModelDeployment", "invalid").inc()
        _invalid(body, patch, exc)
        return
    async with rt.lock(str(body.metadata.uid)):
        try:
            await reconcile(
                rt,
                md,
                body,
                kwargs["inference_nodes"],
                kwargs["swap_plans"],
                kwargs["deployment_slots"],
                patch,
            )
        except kube.KubeError as exc:
            metrics.RECONCILES.labels("ModelDeployment", "error").inc()
            raise kopf.TemporaryError(str(exc), delay=CONFIG.poll_seconds) from exc
    metrics.RECONCILES.labels("ModelDeployment", "ok").inc()
    metrics.RECONCILE_SECONDS.labels("ModelDeployment").observe(time.monotonic() - started)


def _invalid(body: kopf.Body, patch: kopf.Patch, exc: pydantic.ValidationError) -> None:
    """Stalled `InvalidSpec` naming each field; nothing is sent to agents."""
    message = "; ".join(
        f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()[:5]
    )
    try:
        current = mdep.ModelDeploymentStatus.model_validate(body.get("status") or {})
    except pydantic.ValidationError:
        current = mdep.ModelDeploymentStatus()
    generation = body.metadata.get("generation")
    status = mdstatus.invalid_status(current, message, generation=generation, now=runtime.now())
    kube.write_status(patch, status, body)


@kopf.on.resume(*DEPLOYMENTS)
@kopf.on.create(*DEPLOYMENTS)
@kopf.on.update(*DEPLOYMENTS)
async def changed(body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, **kwargs: Any) -> None:
    await _guarded(body, memo, patch, kwargs)


@kopf.timer(*DEPLOYMENTS, interval=CONFIG.poll_seconds, sharp=True)
async def converge(body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, **kwargs: Any) -> None:
    await _guarded(body, memo, patch, kwargs)


@kopf.on.delete(*DEPLOYMENTS)
async def teardown(
    body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **kwargs: Any
) -> None:
    """Drop the slot on every agent that answers (DELETE is idempotent: ask them all, the
    cached view may lag a fresh PUT), and the Service + EndpointSlices it owns. A slot whose
    name an older deployment holds (SlotNameConflict) is that one's: left alone."""
    rt = runtime.of(memo)
    namespace = namespace or ""
    slot = naming.slot_name(namespace, name)
    rt.announced.pop(str(body.metadata.uid), None)
    claims = kwargs["deployment_slots"]
    shared = dep.slot_conflict(claims, namespace=namespace, name=name, uid=str(body.metadata.uid))
    async with rt.lock(str(body.metadata.uid)):  # let an in-flight reconcile finish first
        for node, entry in [] if shared else list(rt.fleet.entries.items()):
            try:
                await entry.client.delete_slot(slot)
                rt.fleet.slot_removed(node, slot)
            except agent.AgentUnreachable as exc:
                if entry.state is not None and any(s.name == slot for s in entry.state.slots):
                    kopf.warn(body, reason="SlotNotRemoved", message=f"{node}: {exc}")
            except agent.AgentError as exc:
                kopf.warn(body, reason="SlotNotRemoved", message=f"{node}: {exc}")
    await rt.kube.unpublish(body)
    metrics.DEPLOYMENT_READY.labels(namespace, name).set(0)
    metrics.DEPLOYMENT_WANTED.labels(namespace, name).set(0)
