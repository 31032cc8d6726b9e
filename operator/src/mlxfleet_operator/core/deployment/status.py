"""ModelDeployment status (pure): placements as the agents report them (with the download
progress of weights being fetched), the kstatus verdict (Ready / Reconciling / Stalled and the
reason; while loading its message carries that progress), and the whole status object.

Every reason is decided from typed facts (node readiness, slot phases, the agents' HTTP
statuses, the plan's phase), never from the text of a message written earlier.
May import: the standard library, `api`, the agent `contract`, `core.kit.conditions`,
`core.kit.naming`, `core.fleet` (`placement`, `facts`), `autoscale`, `plan`, `evictions`,
`slots`.
Called by: the ModelDeployment handler after placement and the slot requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import fields
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.deployment import autoscale, evictions, slots
from mlxfleet_operator.core.deployment.plan import PlanInfo
from mlxfleet_operator.core.fleet import facts as f
from mlxfleet_operator.core.fleet import placement
from mlxfleet_operator.core.kit import conditions, naming

_PHASES = {
    contract.SlotPhase.PENDING: mdep.PlacementPhase.PENDING,
    contract.SlotPhase.DOWNLOADING: mdep.PlacementPhase.LOADING,
    contract.SlotPhase.LOADING: mdep.PlacementPhase.LOADING,
    contract.SlotPhase.WARMING: mdep.PlacementPhase.LOADING,
    contract.SlotPhase.READY: mdep.PlacementPhase.READY,
    contract.SlotPhase.SWAPPING: mdep.PlacementPhase.SWAPPING,
    contract.SlotPhase.FAILED: mdep.PlacementPhase.FAILED,
}


@dataclass(frozen=True)
class Result:
    status: mdep.ModelDeploymentStatus
    verdict: conditions.Verdict
    endpoints: tuple[tuple[str, str, bool], ...] = field(default=())  # (node, data URL, ready)


def lost_nodes(facts: Mapping[str, f.NodeFacts], nodes: Iterable[str]) -> tuple[str, ...]:
    """Of `nodes`, those whose InferenceNode is known and not Ready (their replicas are lost
    until the node returns or failover moves them)."""
    return tuple(n for n in nodes if (fact := facts.get(n)) is not None and not fact.ready)


def placements(
    facts: Mapping[str, f.NodeFacts],
    desired: Mapping[str, ModelRef],
    outcomes: Mapping[str, f.Outcome],
    *,
    slot: str,
    plan: PlanInfo | None = None,
) -> list[mdep.PlacementStatus]:
    """One entry per chosen node: `source`/`revision` is what the replica should serve, `ready`
    says it does (slot ready and serving that model), `phase` is the agent's slot phase."""
    out = []
    for node, model in desired.items():
        source, revision = model.source, model.revision
        fact = facts.get(node)
        observed = fact.slot(slot) if fact is not None else None
        ready = slots.serves(fact, slot, model, plan)
        phase = _PHASES[observed.phase] if observed is not None else mdep.PlacementPhase.PENDING
        message = outcomes[node].error if node in outcomes and outcomes[node].error else None
        if message is None and observed is not None and observed.busy:
            message = f"busy, out of routing: {observed.busy}"
        if message is None and observed is not None and not observed.ready:
            message = observed.last_error
        download = _download(observed, model)
        if message is None and download is not None:
            message = _preparing(observed, download)
        if message is None and observed is not None and observed.ready and not ready:
            message = f"serving {observed.source}, converging to {source}"
        if fact is not None and not fact.ready:
            message = f"node {node} is not Ready"
        out.append(
            mdep.PlacementStatus(
                node=node,
                phase=phase,
                ready=ready,
                source=source,
                revision=revision,
                endpoint=fact.endpoint if fact is not None else None,
                slot=slot,
                message=message,
                download=download,
            )
        )
    return out


def _download(
    observed: contract.SlotStatus | None, model: ModelRef
) -> fields.DownloadStatus | None:
    """The slot's download when it fetches the model this replica should serve."""
    if observed is None or observed.download is None or observed.spec is None:
        return None
    if ModelRef.of(observed.spec) != model:
        return None
    return fields.DownloadStatus.of(observed.download)


def _preparing(observed: contract.SlotStatus | None, download: fields.DownloadStatus) -> str:
    """What the agent does with the weights: still fetching them, or loading what it fetched."""
    complete = 0 < download.bytes_total <= download.bytes_done
    phase = observed.phase if observed is not None else None
    swapping = phase == contract.SlotPhase.SWAPPING and not complete
    if phase == contract.SlotPhase.DOWNLOADING or swapping:
        return f"downloading {download.describe()}"
    return f"loading ({download.done_text()} downloaded)"


def progress_text(placed: Sequence[mdep.PlacementStatus]) -> str:
    """`; downloading 1.20/4.00 GiB (30%, 52.0 MiB/s) on mac-1` for each replica still getting
    its weights ready (empty when none is): what the Ready condition adds while it loads."""
    parts = [f"{p.message} on {p.node}" for p in placed if p.download is not None and p.message]
    return "".join(f"; {part}" for part in parts)


def removing(
    md: mdep.ModelDeployment,
    handover: slots.Handover,
    decision: placement.Decision,
    facts: Mapping[str, f.NodeFacts],
) -> list[mdep.PlacementStatus]:
    """Replicas on their way out (after the kept and new ones, so placement keeps those first)."""
    before = {p.node: p for p in md.status.placements}
    replacing = ", ".join(decision.added) or "the remaining replicas"
    out = []
    for node in handover.held:
        prev = before.get(node)
        fact = facts.get(node)
        leaving = node in handover.leaving
        out.append(
            mdep.PlacementStatus(
                node=node,
                phase=mdep.PlacementPhase.REMOVING,
                ready=leaving,
                source=prev.source if prev is not None else None,
                revision=prev.revision if prev is not None else None,
                endpoint=fact.endpoint if fact is not None else None,
                slot=naming.slot_name(md.metadata.namespace or "", md.metadata.name or ""),
                message=f"serving until {replacing} serve"
                if leaving
                else "out of the endpoints; its slot is removed next",
            )
        )
    return out


CAPACITY_STALL_AFTER = timedelta(minutes=2)
"""How long replicas may wait for a node before the deployment says Stalled (the operator's
`--capacity-stall-seconds`; docs/operator.md)."""


def _span(wait: timedelta) -> str:
    seconds = int(wait.total_seconds())
    return f"{seconds // 60} minutes" if seconds % 60 == 0 and seconds >= 120 else f"{seconds}s"


def not_ready_for(md: mdep.ModelDeployment, now: datetime) -> timedelta:
    """How long the deployment's Ready condition has been False (zero when True or absent)."""
    ready = cond.find(md.status.conditions, cond.ConditionType.READY)
    if ready is None or ready.status != cond.ConditionStatus.FALSE:
        return timedelta(0)
    return now - ready.last_transition_time


def awaiting_approval(plan: PlanInfo) -> bool:
    """The plan is paused with no step running (before its first step or between two)."""
    return plan.paused and plan.phase in (None, swp.SwapPhase.PENDING, swp.SwapPhase.PAUSED)


def verdict(
    md: mdep.ModelDeployment,
    decision: placement.Decision,
    placed: Sequence[mdep.PlacementStatus],
    outcomes: Mapping[str, f.Outcome],
    plan: PlanInfo | None,
    *,
    lost: Sequence[str] = (),
    conflict: str | None = None,
    standing: evictions.Standing | None = None,
    now: datetime | None = None,
    stall_after: timedelta | None = None,
) -> conditions.Verdict:
    """The deployment's summary. `lost`: placed nodes whose InferenceNode is not Ready;
    `standing`: the evictions it waits for (Preempting) or that keep a replica away
    (Preempted). `now`: replicas that no node can take for `stall_after` (fewer matching Macs
    than replicas, every one busy) make the deployment Stalled, still `WaitingForCapacity`:
    GitOps tools and `kubectl wait --for=condition=Stalled` stop waiting; it is placed (and
    Stalled clears) as soon as a node can take it."""
    R = cond.Reason
    want = autoscale.wanted(md)
    ready = sum(1 for p in placed if p.ready)
    if conflict is not None:
        return conditions.Verdict(False, R.SERVICE_CONFLICT, conflict, stalled=True)
    if decision.fits_nowhere:
        reason = placement.nowhere_reason(decision)
        return conditions.Verdict(False, reason, decision.rejection_summary(), stalled=True)
    refused = [o for o in outcomes.values() if o.refused]
    if refused and len(refused) >= len(decision.added or decision.nodes):
        text = "; ".join(f"{o.node}: {o.error}" for o in refused)
        reason = R.SOURCE_INVALID if any(o.source_problem for o in refused) else R.SPEC_REJECTED
        return conditions.Verdict(False, reason, text, stalled=True)
    if want == 0:
        return _zero(md)
    if plan is not None and plan.active and awaiting_approval(plan):
        # Nothing runs until a person approves: serving what it serves now is all the spec allows,
        # so kstatus says Current and Argo CD Healthy and no GitOps sync waits on the approval.
        text = (
            f"SwapPlan {plan.name} to {plan.target.source} awaits approval (set its spec.paused to "
            f"false); {ready}/{want} replicas ready"
        )
        return conditions.Verdict(
            ready >= want, R.AWAITING_APPROVAL, text, reconciling=ready < want
        )
    if plan is not None and plan.active:
        reason = R.AWAITING_APPROVAL if plan.paused else R.SWAP_IN_PROGRESS
        text = f"SwapPlan {plan.name} to {plan.target.source}: {plan.phase or 'Pending'}"
        return conditions.Verdict(False, reason, text, reconciling=True)
    if plan is not None and plan.failed_after_start and plan.target == md.model_ref():
        why = plan.message or f"SwapPlan {plan.name} failed"
        text = f"{why}; still serving the previous model"
        return conditions.Verdict(False, R.ROLLED_BACK, text, stalled=True)
    if ready >= want:
        text = f"{ready}/{want} replicas ready"
        if decision.held:  # serving, but a drain waits on it: say why (`kubectl mlxfleet drain`)
            text += f"; {decision.rejection_summary()}"
        return conditions.Verdict(True, R.READY, text)
    if standing is not None and standing.waiting and decision.missing:
        text = (
            f"{ready}/{want} ready, {decision.missing} unplaced: {standing.waiting}; "
            f"{decision.rejection_summary()}"
        )
        return conditions.Verdict(False, R.PREEMPTING, text, reconciling=True)
    if standing is not None and standing.evicted:
        text = f"{ready}/{want} ready: {standing.evicted}"
        if decision.missing:
            text += f"; {decision.missing} unplaced: {decision.rejection_summary()}"
        return conditions.Verdict(False, R.PREEMPTED, text, reconciling=True)
    if decision.missing:
        text = f"{ready}/{want} ready, {decision.missing} unplaced: {decision.rejection_summary()}"
        if ready == 0 and any(
            r.reason == placement.Reason.SERVED_NAME for r in decision.rejections
        ):  # a person must rename (spec.model.servedName) or add a node; routes need the name
            return conditions.Verdict(False, R.SERVED_NAME_CONFLICT, text, stalled=True)
        wait = CAPACITY_STALL_AFTER if stall_after is None else stall_after
        if now is not None and not_ready_for(md, now) >= wait:
            text += (
                f"; Stalled: no node could take it for {_span(wait)} (it is placed as soon as "
                "one can)"
            )
            return conditions.Verdict(False, R.WAITING_FOR_CAPACITY, text, stalled=True)
        return conditions.Verdict(False, R.WAITING_FOR_CAPACITY, text, reconciling=True)
    no_fit = [o for o in outcomes.values() if o.no_fit]
    if no_fit:
        text = "; ".join(f"{o.node}: {o.error}" for o in no_fit)
        return conditions.Verdict(False, R.WAITING_FOR_CAPACITY, text, reconciling=True)
    if lost:
        return conditions.Verdict(
            False, R.NODE_LOST, f"{ready}/{want} ready; lost: {', '.join(lost)}", reconciling=True
        )
    failed = [p for p in placed if p.phase == mdep.PlacementPhase.FAILED]
    if failed:
        text = "; ".join(f"{p.node}: {p.message or 'backend failed'}" for p in failed)
        return conditions.Verdict(False, R.BACKEND_FAILED, text, reconciling=True)
    reason = R.PARTIALLY_READY if ready else R.WAKING if _waking(md) else R.LOADING
    text = f"{ready}/{want} replicas ready{progress_text(placed)}"
    return conditions.Verdict(False, reason, text, reconciling=True)


def _zero(md: mdep.ModelDeployment) -> conditions.Verdict:
    """No replica wanted: off (spec.replicas 0), or asleep (the autoscaler's decision after
    spec.idleTimeout). Both are what the spec asks for: Ready, so kstatus says Current and Argo
    CD Healthy, and a GitOps sync never waits for a request to wake it."""
    found = md.status.autoscaling
    if md.spec.replicas > 0 and found is not None:
        why = found.message or "no requests for spec.idleTimeout"
        text = f"{why}; the next request through the gateway wakes it"
        return conditions.Verdict(True, cond.Reason.SLEEPING, text)
    return conditions.Verdict(True, cond.Reason.SCALED_TO_ZERO, "spec.replicas is 0")


def _waking(md: mdep.ModelDeployment) -> bool:
    """A request woke it and no replica serves yet (a cold start)."""
    found = md.status.autoscaling
    return found is not None and found.reason == mdep.ScaleReason.DEMAND


def status(
    md: mdep.ModelDeployment,
    *,
    decision: placement.Decision,
    facts: Mapping[str, f.NodeFacts],
    desired: Mapping[str, ModelRef],
    outcomes: Mapping[str, f.Outcome],
    plan: PlanInfo | None,
    footprint_bytes: int | None,
    endpoint: str,
    now: datetime,
    handover: slots.Handover | None = None,
    conflict: str | None = None,
    standing: evictions.Standing | None = None,
    stall_after: timedelta | None = None,
) -> Result:
    """The whole status; `conflict`: why the Service cannot be published (then the status
    names no endpoint: that address is someone else's); `standing`: its preemption records
    (none given: those of the status kept); `stall_after`: see `verdict`."""
    slot = naming.slot_name(md.metadata.namespace or "", md.metadata.name or "")
    placed = placements(facts, desired, outcomes, slot=slot, plan=plan)
    gone = lost_nodes(facts, desired)
    judged = verdict(
        md,
        decision,
        placed,
        outcomes,
        plan,
        lost=gone,
        conflict=conflict,
        standing=standing,
        now=now,
        stall_after=stall_after,
    )
    going = removing(md, handover, decision, facts) if handover is not None else []
    new = mdep.ModelDeploymentStatus(
        observed_generation=md.metadata.generation,
        conditions=conditions.apply_verdict(
            md.status.conditions, judged, generation=md.metadata.generation, now=now
        ),
        served_name=md.served_name(),
        replicas=len(placed),
        desired_replicas=autoscale.wanted(md),
        autoscaling=md.status.autoscaling if md.spec.autoscaled else None,
        ready_replicas=sum(1 for p in placed if p.ready),
        placements=[*placed, *going],
        swap_plan=plan.name if plan is not None else md.status.swap_plan,
        estimated_memory_bytes=footprint_bytes,
        endpoint=endpoint if conflict is None else None,
        preempting=list(standing.preempting) if standing else md.status.preempting,
        preempted_by=list(standing.preempted_by) if standing else md.status.preempted_by,
        selector=naming.deployment_selector(md.metadata.name or ""),
    )
    eps = tuple((p.node, p.endpoint, p.ready) for p in [*placed, *going] if p.endpoint)
    return Result(status=new, verdict=judged, endpoints=eps)


def invalid_status(
    current: mdep.ModelDeploymentStatus, message: str, *, generation: int | None, now: datetime
) -> mdep.ModelDeploymentStatus:
    """Status of a deployment the API server admitted but the operator's model refuses (a bound
    the CRD cannot express, such as the depth of a free-form object): Stalled, nothing done."""
    judged = conditions.Verdict(False, cond.Reason.INVALID_SPEC, message, stalled=True)
    return current.model_copy(
        update={
            "observed_generation": generation,
            "ready_replicas": current.ready_replicas or 0,  # the READY column: 0, not blank
            "conditions": conditions.apply_verdict(
                current.conditions, judged, generation=generation, now=now
            ),
        }
    )


def unplaced_status(
    md: mdep.ModelDeployment, judged: conditions.Verdict, *, now: datetime, endpoint: str | None
) -> mdep.ModelDeploymentStatus:
    """Status when placement could not even run (size unknown, source refused): keep what runs."""
    return md.status.model_copy(
        update={
            "observed_generation": md.metadata.generation,
            "conditions": conditions.apply_verdict(
                md.status.conditions, judged, generation=md.metadata.generation, now=now
            ),
            "served_name": md.served_name(),
            "ready_replicas": md.status.ready_replicas or 0,  # the READY column: 0, not blank
            "endpoint": endpoint,
            "selector": naming.deployment_selector(md.metadata.name or ""),
        }
    )


def slot_conflict_status(
    md: mdep.ModelDeployment, conflict: str, *, now: datetime
) -> mdep.ModelDeploymentStatus:
    """Another deployment had the agent slot name first: Stalled, nothing sent to agents, and
    no endpoint (nothing is published for a slot that is not this deployment's)."""
    judged = conditions.Verdict(False, cond.Reason.SLOT_NAME_CONFLICT, conflict, stalled=True)
    return unplaced_status(md, judged, now=now, endpoint=None)
