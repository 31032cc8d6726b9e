"""SwapPlan execution: one node at a time, each step an idempotent slot PUT to that node's agent,
progress folded from the agents' swap records (core.swapplan), written to the plan's status.
Because progress lives in status, a restarted operator resumes without repeating a step.
As soon as the plan exists, every node it will use starts copying the target weights (from peers
that hold them first: core.swapplan.prefetch; a sharded deployment: every rank's node; not with
--no-swap-prefetch), and a step waiting on that copy shows its progress. A sharded deployment's
plan swaps each group as a unit (core.swapplan.groups): its step's PUTs go to every rank's agent.

May import: kopf, pydantic, adapters, core, api, settings, `guard`, `indexes`. Called by: kopf.
"""

from __future__ import annotations

from typing import Any

import kopf
import pydantic

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import events, metrics, runtime, statuspatch
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import resources
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.core.swapplan import gate, groups, prefetch, progress, requests
from mlxfleet_operator.core.swapplan import state as st
from mlxfleet_operator.core.swapplan import status as plan_status
from mlxfleet_operator.handlers import guard, indexes

KIND = resources.SWAP_PLAN
PLANS = (resources.GROUP, resources.VERSION, KIND.plural)


async def changed(
    body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, logger: kopf.Logger, **kwargs: Any
) -> None:
    """Create, update, resume; never fails to kopf (`guard.by_timer`): `follow` retries."""
    async with guard.by_timer(logger):
        plan = swp.SwapPlan.model_validate(dict(body))
        async with guard.guarded(KIND, body, memo) as run:
            await advance(run.rt, plan, body, patch, indexes.Indexes.of(kwargs))


async def follow(body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, **kwargs: Any) -> None:
    plan = swp.SwapPlan.model_validate(dict(body))
    if plan_status.settled(plan):
        return  # finished, and its status is current: nothing to follow
    async with guard.guarded(KIND, body, memo) as run:
        await advance(run.rt, plan, body, patch, indexes.Indexes.of(kwargs))


async def advance(
    rt: runtime.Runtime,
    plan: swp.SwapPlan,
    body: kopf.Body,
    patch: kopf.Patch,
    idx: indexes.Indexes,
) -> None:
    namespace, ref = plan.metadata.namespace or "", plan.spec.deployment_ref.name
    previous = st.PlanState.of(plan)
    waiting = gate.blocked(plan, previous, idx.plans_of(namespace, ref))
    if waiting is not None:
        _write(rt, plan, waiting, body, patch)
        return
    raw = await rt.kube.get_deployment(namespace, ref)
    if raw is None:
        _write(rt, plan, gate.deployment_missing(previous, ref, now=runtime.now()), body, patch)
        return
    try:
        md = mdep.ModelDeployment.model_validate(raw)
    except pydantic.ValidationError:
        invalid = f"ModelDeployment {ref} is invalid (its Ready condition)"
        _hold(rt, plan, previous, invalid, body, patch)
        return
    clash = idx.slot_conflict(namespace, ref, md.metadata.uid or "")
    if clash is not None:  # its slot name is another deployment's: never PUT into it
        _hold(rt, plan, previous, f"ModelDeployment {ref}: {clash}", body, patch)
        return
    slot = naming.slot_name(namespace, ref)
    scope = gate.scope(plan, md, previous)
    target = ModelRef.of(plan.spec.target)
    states = rt.fleet.states()
    urls, on = rt.fleet.control_urls(), rt.config.swap_prefetch
    for ask in prefetch.wanted(previous, target, scope.prefetch, states, urls, enabled=on):
        answer = await rt.fleet.prefetch(ask.node, ask.model, ask.peers)  # failed: asked again
        if answer is not None and answer.error is not None:
            events.post(body, prefetch.refused(ask, answer.error))
    sharded = None
    if md.spec.sharding is not None:
        sharded = groups.planning(
            md,
            target,
            rt.fleet.node_facts(idx.inference_nodes(), slot=slot),
            previous.steps,
            slot=slot,
            strategy=plan.spec.strategy,
            drain_timeout_seconds=plan.spec.drain_timeout_seconds,
        )
    step = progress.advance(
        previous,
        target=target,
        nodes=scope.nodes,
        paused=plan.spec.paused,
        slots=await rt.fleet.observe(scope.watched, slot),
        now=runtime.now(),
        replicas=scope.replicas,
        allowed=scope.allowed,
        known=list(idx.nodes),
        groups=sharded,
    )
    ranks = groups.requests(sharded, step.actions) if sharded is not None else ()
    for request in (*requests.slot_requests(plan, md, step.actions), *ranks):
        sent = await rt.fleet.put_slot(slot, request)  # failed: the next run re-sends it
        events.post(body, requests.not_sent(sent))
    events.post(body, plan_status.announcement(previous, step.state))
    if step.state.phase.terminal and step.state.phase != previous.phase:
        metrics.SWAP_PLANS.labels(str(step.state.phase)).inc()
    _write(rt, plan, prefetch.annotate(step.state, target, states), body, patch)


def _hold(
    rt: runtime.Runtime,
    plan: swp.SwapPlan,
    previous: st.PlanState,
    why: str,
    body: kopf.Body,
    patch: kopf.Patch,
) -> None:
    """The deployment may not take the plan now: a plan that has not started waits, saying why."""
    waiting = gate.deployment_unusable(previous, why)
    if waiting is not None:
        _write(rt, plan, waiting, body, patch)


def _write(
    rt: runtime.Runtime,
    plan: swp.SwapPlan,
    state: st.PlanState,
    body: kopf.Body,
    patch: kopf.Patch,
) -> None:
    status = plan_status.plan_status(plan, state, now=runtime.now())
    statuspatch.write_status(patch, status, body, rt.objects)


async def gone(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Deleted: what this process kept about the plan goes with it (`guard`, `last`)."""
    async with guard.guarded(KIND, body, memo, last=True):
        pass


def register(registry: kopf.OperatorRegistry, config: opsettings.OperatorSettings) -> None:
    for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
        on(*PLANS, registry=registry)(changed)
    interval = max(0.5, config.poll_seconds / 2)  # hand-over between steps follows this timer
    kopf.timer(*PLANS, interval=interval, sharp=True, registry=registry)(follow)
    kopf.on.delete(*PLANS, optional=True, registry=registry)(gone)
