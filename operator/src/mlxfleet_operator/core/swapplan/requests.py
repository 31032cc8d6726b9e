"""The agent slot each SwapPlan action asks for: the deployment's slot with the plan's model,
and the plan's strategy and drain timeout where it sets them.

May import: `api`, `state`, `core.kit.events`, `core.deployment` (`facts`, `slots`). Called by: the
SwapPlan handler, which sends each request to its node's agent.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlxfleet_operator.api import fields
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.deployment import slots
from mlxfleet_operator.core.fleet import facts
from mlxfleet_operator.core.kit import events
from mlxfleet_operator.core.swapplan import state as st


def slot_requests(
    plan: swp.SwapPlan, md: mdep.ModelDeployment, actions: Sequence[st.Action]
) -> tuple[facts.SlotRequest, ...]:
    strategy = plan.spec.strategy
    out = []
    for action in actions:
        if isinstance(action, st.PutGroup):
            continue  # a group's ranks: `groups.requests`
        model = ModelRef.of(plan.spec.target) if isinstance(action, st.PutTarget) else action.model
        spec = slots.slot_spec(
            md,
            model,
            strategy=fields.to_agent_strategy(strategy) if strategy is not None else None,
            drain_timeout_seconds=plan.spec.drain_timeout_seconds,
        )
        out.append(facts.SlotRequest(action.node, spec, action.request_id))
    return tuple(out)


def not_sent(outcome: facts.Outcome | None) -> events.Event | None:
    """The warning for a step's request the agent did not take (the next run re-sends it)."""
    if outcome is None or outcome.error is None:
        return None
    text = f"{outcome.node}: {outcome.error}"
    return events.Event(reason="StepRequestFailed", message=text, warning=True)
