"""SwapPlan status from a `PlanState`: the phase -> condition mapping (one verdict), the whole
status object, the Event a phase change posts, and whether a finished plan needs a run at all.

May import: the standard library, `api`, `core.kit.conditions`, `core.kit.events`, `state`.
Called by: the SwapPlan handler (it writes what `plan_status` returns, posts `announcement`).
"""

from __future__ import annotations

from datetime import datetime

from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.core.kit import conditions, events
from mlxfleet_operator.core.swapplan import state as st

Phase = swp.SwapPhase
R = cond.Reason
_WARNINGS = frozenset({Phase.ROLLING_BACK, Phase.ROLLED_BACK, Phase.FAILED})


def verdict(state: st.PlanState) -> conditions.Verdict:
    """Ready / Reconciling / Stalled of a plan in `state` (a failure's reason, if the core gave
    one, else its phase)."""
    phase = state.phase
    text = state.message or f"{phase} {state.progress}"
    if phase == Phase.COMPLETED:
        return conditions.Verdict(True, R.COMPLETED, f"all steps done ({state.progress})")
    if phase in (Phase.ROLLED_BACK, Phase.FAILED):
        return conditions.Verdict(False, str(state.reason or phase), text, stalled=True)
    if phase == Phase.PAUSED:  # Ready: where its spec puts it (GitOps syncs finish)
        return conditions.Verdict(True, R.PAUSED, text)
    if phase == Phase.ROLLING_BACK:
        return conditions.Verdict(False, R.ROLLING_BACK, text, reconciling=True)
    return conditions.Verdict(False, R.STEP_RUNNING, text, reconciling=True)


def plan_status(plan: swp.SwapPlan, state: st.PlanState, *, now: datetime) -> swp.SwapPlanStatus:
    """The whole status for `state`. A plan that had already ended in this phase keeps the
    conditions it ended with (e.g. DeploymentNotFound): later runs refresh observedGeneration
    only, never why it ended."""
    generation = plan.metadata.generation
    finished = state.phase.terminal and plan.status.phase == state.phase
    if state.reason is None and finished and plan.status.conditions:
        kept = [
            c.model_copy(update={"observed_generation": generation}) for c in plan.status.conditions
        ]
    else:
        kept = conditions.apply_verdict(
            plan.status.conditions, verdict(state), generation=generation, now=now
        )
    return swp.SwapPlanStatus(
        observed_generation=generation,
        conditions=kept,
        phase=state.phase,
        progress=state.progress,
        steps=list(state.steps),
        started_at=state.started_at,
        completed_at=state.completed_at,
    )


def announcement(before: st.PlanState, after: st.PlanState) -> events.Event | None:
    """The Event a phase change posts (none when the phase stayed)."""
    if after.phase == before.phase:
        return None
    return events.Event(
        reason=f"SwapPlan{after.phase}",
        message=after.message or f"{after.phase} {after.progress}",
        warning=after.phase in _WARNINGS,
    )


def settled(plan: swp.SwapPlan) -> bool:
    """Finished, and its status already describes this generation: nothing to follow."""
    phase = plan.status.phase
    done = phase is not None and phase.terminal
    return done and plan.status.observed_generation == plan.metadata.generation
