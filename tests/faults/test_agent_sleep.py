"""Scenario 4: an agent's Mac "sleeps": the agent and its backends are SIGSTOPped for 30 s, then
SIGCONTed, while clients stream through the EndpointSlices.

The node goes NotReady after its missed polls, its replica is re-placed after the failover delay
(clients fail only on the sleeping agent, only until its endpoint is withdrawn); when it wakes
it is Ready again, its stale slot is removed and the replica stays where it moved."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from mlxfleet_operator.core.kit import naming
from tests.faults.steps import Fleet, assert_routed_around, lose_and_return

pytestmark = [
    pytest.mark.faults,
    pytest.mark.cluster,
    pytest.mark.mlx,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]

SLEEP = 30.0


def test_sleeping_agent_is_routed_around_then_welcomed_back(
    fleet: Fleet, figures: dict[str, object], model_a: Path
) -> None:
    sleeper, kept = fleet.agents.start("a"), fleet.agents.start("b")
    fleet.e2e.register(sleeper)
    nb = fleet.e2e.register(kept)
    fleet.elect_two()
    fleet.deploy("chat", model_a)
    spare, nc = fleet.add_node("c")
    assert sleeper.proc is not None
    group = sleeper.proc.pid
    try:
        out = lose_and_return(
            fleet,
            lost=sleeper,
            lose=lambda: os.killpg(group, signal.SIGSTOP),
            restore=lambda: os.killpg(group, signal.SIGCONT),
            away=SLEEP,
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGCONT)
    figures.update(
        scenario="4 agent SIGSTOP 30 s, then SIGCONT",
        **out.figures(),
        requests_ok=out.load.ok,
        requests_failed=out.load.failed,
    )
    slot = naming.slot_name(fleet.e2e.namespace, "chat")
    assert_routed_around(
        out, lost=sleeper, pool=[sleeper, kept, spare], slot=slot, moved_to=[nb, nc]
    )
