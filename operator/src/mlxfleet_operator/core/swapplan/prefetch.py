"""Weights ahead of need: which nodes of a SwapPlan should start copying the target model now,
from which peers, and what a step that waits on that copy says.

`wanted` runs as soon as the plan exists (and on every follow-up while it is open): each node the
plan will use (a sharded deployment: every rank's node) that neither holds the target
(`cachedModels`) nor is copying it (`transfers`) gets a prefetch (`asks`), with the control URLs
of up to `MAX_PEERS` other nodes that hold the target as its peers (the agent verifies every file
against the origin; none: it fetches from the origin). A sharded group about to form asks the same
for its ranks' nodes (`asks`, from the sharded deployment handler) before their slots are PUT, so
a rank's slot joins a copy from peers instead of fetching from the origin.
Re-asking is harmless (the agent joins a copy in progress), so nothing is remembered here.
`peers_for` is also what a sizing prefetch (a ModelDeployment whose model no node has sized)
passes. `annotate` puts a node's download progress (bytes done/total, rate, share from peers)
into the message of a step on that node that waits on it.
A prefetch the agent refuses posts a `PrefetchFailed` warning (`refused`); the step's own slot
request then fetches the model itself, or says why it cannot.
May import: the standard library, `api`, the agent `contract`, `core.kit.events`, `state`.
Called by: the SwapPlan and ModelDeployment handlers (the sharded one too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from mlxfleet_agent import contract
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.kit import events
from mlxfleet_operator.core.swapplan import state as st

MAX_PEERS = 3
GIB = 1024**3
WAITING = (swp.StepPhase.PENDING, swp.StepPhase.LOADING)
"""Step phases that may be waiting on the node's download (a later step's node copies ahead)."""


@dataclass(frozen=True)
class Prefetch:
    """Ask `node`'s agent to copy `model` now, from `peers` (control URLs) first."""

    node: str
    model: ModelRef
    peers: tuple[str, ...]


def holds(state: contract.AgentState, model: ModelRef) -> bool:
    return any(ModelRef.of(c) == model for c in state.cached_models)


def copying(state: contract.AgentState, model: ModelRef) -> contract.Transfer | None:
    return next((t for t in state.transfers if t.source == model.source), None)


def wanted(
    plan: st.PlanState,
    target: ModelRef,
    nodes: Sequence[str],
    states: Mapping[str, contract.AgentState | None],
    urls: Mapping[str, str],
    *,
    enabled: bool = True,
) -> list[Prefetch]:
    """The prefetches to send now for an open plan (see the module docstring). `states`: the
    last polled agent state per node (None: not polled yet); `urls`: control URLs per node;
    `enabled` False (`--no-swap-prefetch`): none, each step's slot request fetches the model."""
    if not enabled or plan.phase.terminal:
        return []
    return asks(target, nodes, states, urls)


def asks(
    model: ModelRef,
    nodes: Sequence[str],
    states: Mapping[str, contract.AgentState | None],
    urls: Mapping[str, str],
) -> list[Prefetch]:
    """A prefetch of `model` for each of `nodes` whose (polled) agent neither holds nor copies
    it."""
    out = []
    for node in dict.fromkeys(nodes):
        state = states.get(node)
        if state is None or holds(state, model) or copying(state, model) is not None:
            continue
        out.append(Prefetch(node, model, peers_for(node, model, states, urls)))
    return out


def peers_for(
    node: str,
    model: ModelRef,
    states: Mapping[str, contract.AgentState | None],
    urls: Mapping[str, str],
) -> tuple[str, ...]:
    """Control URLs of up to `MAX_PEERS` other nodes whose agents hold `model`, by node name."""
    held = [n for n in sorted(states) if (s := states[n]) is not None and holds(s, model)]
    return tuple(urls[n] for n in held if n != node and n in urls)[:MAX_PEERS]


def refused(ask: Prefetch, error: str) -> events.Event:
    """The warning for a prefetch the node's agent did not take (asked again next run)."""
    text = f"{ask.node}: prefetch of {ask.model} refused: {error}"
    return events.Event(reason="PrefetchFailed", message=text, warning=True)


def describe(t: contract.Transfer) -> str:
    """`downloading 1.2/4.0 GiB at 350 MB/s (0.9 GiB from peers)`."""
    text = f"downloading {t.done_bytes / GIB:.1f}/{t.total_bytes / GIB:.1f} GiB"
    text += f" at {t.bytes_per_second / 1e6:.0f} MB/s"
    if t.peer_bytes:
        text += f" ({t.peer_bytes / GIB:.1f} GiB from peers)"
    return text


def annotate(
    plan: st.PlanState, target: ModelRef, states: Mapping[str, contract.AgentState | None]
) -> st.PlanState:
    """The plan with each pending or loading step whose node is copying the target saying how
    far the copy is (the step waits on the download, not on loading)."""
    changed = []
    for step in plan.steps:
        state = states.get(step.node)
        transfer = copying(state, target) if state is not None else None
        if step.phase in WAITING and transfer is not None:
            step = st.update(step, message=describe(transfer))
        changed.append(step)
    return replace(plan, steps=tuple(changed))
