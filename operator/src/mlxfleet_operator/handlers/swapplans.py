"""SwapPlan execution: one node at a time, each step an idempotent slot PUT to that node's agent,
progress folded from the agent's swap records (core.swapplan), written to the plan's status.
Because progress lives in status, a restarted operator resumes without repeating a step.

May import: kopf, adapters, core, api, settings. Called by: kopf.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import kopf
import pydantic

from mlxfleet_agent import contract
from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import agent, kube, metrics, runtime
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import fields, resources
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.core import conditions, naming
from mlxfleet_operator.core import deployment as dep
from mlxfleet_operator.core import swapplan as core

CONFIG = opsettings.current()
PLANS = (resources.GROUP, resources.VERSION, resources.SWAP_PLAN.plural)
R = cond.Reason


async def _observe(rt: runtime.Runtime, nodes: list[str], slot: str) -> dict[str, core.NodeSlot]:
    """Fresh slot state and swap records from each node's agent (not the poller's copy)."""
    out: dict[str, core.NodeSlot] = {}
    for node in nodes:
        entry = rt.fleet.get(node)
        if entry is None:
            out[node] = core.NodeSlot(reachable=False)
            continue
        try:
            state = await entry.client.state()
            swaps = await entry.client.swaps(slot)
        except agent.AgentError:
            out[node] = core.NodeSlot(reachable=False)
            continue
        found = next((s for s in state.slots if s.name == slot), None)
        out[node] = core.NodeSlot(
            reachable=True,
            source=found.source if found else None,
            revision=found.revision if found else None,
            ready=bool(found and found.ready),
            active_swap=found.active_swap if found else None,
            swaps=tuple(swaps),
            failed=(found.last_error or "backend failed")
            if found and found.phase == contract.SlotPhase.FAILED
            else None,
        )
    return out


def _verdict(state: core.PlanState) -> conditions.Verdict:
    phase = state.phase
    text = state.message or f"{phase} {state.progress}"
    if phase == core.PlanPhase.COMPLETED:
        return conditions.Verdict(True, R.COMPLETED, f"all steps done ({state.progress})")
    if phase in (core.PlanPhase.ROLLED_BACK, core.PlanPhase.FAILED):
        return conditions.Verdict(False, str(state.reason or phase), text, stalled=True)
    if phase == core.PlanPhase.PAUSED:  # Ready: where its spec puts it (GitOps syncs finish)
        return conditions.Verdict(True, R.PAUSED, text)
    if phase == core.PlanPhase.ROLLING_BACK:
        return conditions.Verdict(False, R.ROLLING_BACK, text, reconciling=True)
    return conditions.Verdict(False, R.STEP_RUNNING, text, reconciling=True)


async def _act(
    rt: runtime.Runtime,
    body: kopf.Body,
    plan: swp.SwapPlan,
    md: mdep.ModelDeployment,
    actions: tuple[core.Action, ...],
) -> None:
    slot = naming.slot_name(md.metadata.namespace or "", md.metadata.name or "")
    strategy = plan.spec.strategy
    for action in actions:
        entry = rt.fleet.get(action.node)
        if entry is None:
            continue
        if isinstance(action, core.PutTarget):
            model: dep.Model = (plan.spec.target.source, plan.spec.target.revision)
        else:
            model = (action.source, action.revision)
        spec = dep.slot_spec(
            md,
            model,
            strategy=fields.to_agent_strategy(strategy) if strategy is not None else None,
            drain_timeout_seconds=plan.spec.drain_timeout_seconds,
        )
        try:
            await entry.client.put_slot(slot, spec)
            metrics.AGENT_CALLS.labels("put_slot", "ok").inc()
        except agent.AgentError as exc:  # the next tick re-sends (declarative)
            metrics.AGENT_CALLS.labels("put_slot", "error").inc()
            kopf.warn(
                body,
                reason="StepRequestFailed",
                message=f"{action.node}: {exc}",
            )


@kopf.index(*PLANS)
def plans_by_deployment(
    namespace: str | None, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], tuple[str, str | None, str | None]]:
    """(namespace, deployment) -> (plan name, creationTimestamp, phase)."""
    ref = (body.get("spec") or {}).get("deploymentRef") or {}
    meta = body.get("metadata") or {}
    phase = (body.get("status") or {}).get("phase")
    key = (namespace or "", str(ref.get("name", "")))
    return {key: (str(meta.get("name")), meta.get("creationTimestamp"), phase)}


def _others(
    plan: swp.SwapPlan, index: kopf.Index[tuple[str, str], Any]
) -> list[tuple[str, datetime | None, bool]]:
    key = (plan.metadata.namespace or "", plan.spec.deployment_ref.name)
    out = []
    for name, created, phase in index.get(key, []):
        when = datetime.fromisoformat(created.replace("Z", "+00:00")) if created else None
        out.append((name, when, phase not in {str(p) for p in core.TERMINAL}))
    return out


def _waiting(body: kopf.Body, plan: swp.SwapPlan, patch: kopf.Patch, message: str) -> None:
    """A plan that has not started and may not start yet: Pending, saying why."""
    _write(body, plan, core.PlanState(phase=core.PlanPhase.PENDING, message=message), patch)


async def advance(
    rt: runtime.Runtime,
    body: kopf.Body,
    patch: kopf.Patch,
    index: kopf.Index[tuple[str, str], Any],
    nodes_index: kopf.Index[str, Any],
    claims: kopf.Index[str, dep.SlotClaim],
) -> None:
    plan = swp.SwapPlan.model_validate(dict(body))
    namespace = plan.metadata.namespace or ""
    ready = cond.find(plan.status.conditions, cond.ConditionType.READY)
    terminal = plan.status.phase is not None and plan.status.phase.terminal
    # a finished plan keeps saying why it ended (status has no message field of its own)
    previous = core.PlanState.from_status(
        plan.status, ready.message if ready and terminal else None
    )
    if previous.phase not in core.TERMINAL and not core.started(previous):
        blocker = core.waiting_for(
            plan.metadata.name or "", plan.metadata.creation_timestamp, _others(plan, index)
        )
        if blocker is not None:
            _waiting(body, plan, patch, f"waiting for SwapPlan {blocker} to finish")
            return
    raw = await rt.kube.get_deployment(namespace, plan.spec.deployment_ref.name)
    if raw is None:
        message = f"ModelDeployment {plan.spec.deployment_ref.name} not found"
        state = (
            previous
            if previous.phase in core.TERMINAL
            else core.PlanState(
                phase=core.PlanPhase.FAILED,
                steps=previous.steps,
                completed_at=runtime.now(),
                message=message,
            )
        )
        reason = R.DEPLOYMENT_NOT_FOUND if previous.phase not in core.TERMINAL else None
        _write(body, plan, state, patch, reason=reason)
        return
    ref = plan.spec.deployment_ref.name
    try:
        md = mdep.ModelDeployment.model_validate(raw)
    except pydantic.ValidationError:
        if previous.phase not in core.TERMINAL and not core.started(previous):
            _waiting(body, plan, patch, f"ModelDeployment {ref} is invalid (its Ready condition)")
        return
    clash = dep.slot_conflict(claims, namespace=namespace, name=ref, uid=md.metadata.uid or "")
    if clash is not None:  # its slot name is another deployment's: never PUT into it
        if previous.phase not in core.TERMINAL and not core.started(previous):
            _waiting(body, plan, patch, f"ModelDeployment {ref}: {clash}")
        return
    carrying = [p.node for p in md.status.placements if p.phase != mdep.PlacementPhase.REMOVING]
    nodes = list(plan.spec.nodes or sorted(carrying))
    slot = naming.slot_name(namespace, md.metadata.name or "")
    # a person's plan may name nodes without a replica: those get one moved there
    replicas = carrying if plan.spec.nodes else None
    allowed = md.spec.placement.nodes
    moved = [s.replaces for s in previous.steps if s.replaces]
    watched = list(dict.fromkeys([*nodes, *carrying, *(s.node for s in previous.steps), *moved]))
    observed = await _observe(rt, watched, slot) if previous.phase not in core.TERMINAL else {}
    target = core.Target(plan.spec.target.source, plan.spec.target.revision)
    step = core.advance(
        previous,
        target=target,
        nodes=nodes,
        paused=plan.spec.paused,
        slots=observed,
        now=runtime.now(),
        replicas=replicas,
        allowed=allowed,
        known=list(nodes_index),
    )
    await _act(rt, body, plan, md, step.actions)
    if step.state.phase != previous.phase:
        kopf.event(
            body,
            type="Warning"
            if step.state.phase
            in (core.PlanPhase.ROLLING_BACK, core.PlanPhase.ROLLED_BACK, core.PlanPhase.FAILED)
            else "Normal",
            reason=f"SwapPlan{step.state.phase}",
            message=step.state.message or f"{step.state.phase} {step.state.progress}",
        )
        if step.state.phase in core.TERMINAL:
            metrics.SWAP_PLANS.labels(str(step.state.phase)).inc()
    _write(body, plan, step.state, patch)


def _write(
    body: kopf.Body,
    plan: swp.SwapPlan,
    state: core.PlanState,
    patch: kopf.Patch,
    *,
    reason: str | None = None,
) -> None:
    verdict = _verdict(state)
    if reason is not None:
        verdict = conditions.Verdict(False, reason, state.message or "", stalled=True)
    finished = state.phase in core.TERMINAL and plan.status.phase == state.phase
    if reason is None and finished and plan.status.conditions:
        # A finished plan keeps the verdict it ended with (e.g. DeploymentNotFound): later
        # reconciles refresh observedGeneration only, never why it ended.
        new_conditions = [
            c.model_copy(update={"observed_generation": plan.metadata.generation})
            for c in plan.status.conditions
        ]
    else:
        new_conditions = conditions.apply_verdict(
            plan.status.conditions, verdict, generation=plan.metadata.generation, now=runtime.now()
        )
    status = swp.SwapPlanStatus(
        observed_generation=plan.metadata.generation,
        conditions=new_conditions,
        phase=state.phase,
        progress=state.progress,
        steps=list(state.steps),
        started_at=state.started_at,
        completed_at=state.completed_at,
    )
    kube.write_status(patch, status, body)


async def _guarded(
    body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, kwargs: dict[str, Any]
) -> None:
    rt = runtime.of(memo)
    started = time.monotonic()
    async with rt.lock(str(body.metadata.uid)):
        await advance(
            rt,
            body,
            patch,
            kwargs["plans_by_deployment"],
            kwargs["inference_nodes"],
            kwargs["deployment_slots"],
        )
    metrics.RECONCILES.labels("SwapPlan", "ok").inc()
    metrics.RECONCILE_SECONDS.labels("SwapPlan").observe(time.monotonic() - started)


@kopf.on.resume(*PLANS)
@kopf.on.create(*PLANS)
@kopf.on.update(*PLANS)
async def changed(body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, **kwargs: Any) -> None:
    await _guarded(body, memo, patch, kwargs)


@kopf.timer(*PLANS, interval=max(0.5, CONFIG.poll_seconds / 2), sharp=True)
async def follow(body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, **kwargs: Any) -> None:
    phase = (body.get("status") or {}).get("phase")
    if phase in {str(p) for p in core.TERMINAL} and (body.get("status") or {}).get(
        "observedGeneration"
    ) == body.get("metadata", {}).get("generation"):
        return
    await _guarded(body, memo, patch, kwargs)
