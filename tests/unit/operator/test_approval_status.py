"""What a ModelDeployment and its SwapPlan say while a change awaits manual approval.

GitOps tools wait on these conditions (Flux's kstatus, our Argo CD health check): a plan waiting
for a person must read as settled (docs/gitops.md), while a plan that runs reads as converging.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import resources
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.deployment import plan as dplan
from mlxfleet_operator.core.deployment import status as mdstatus
from mlxfleet_operator.core.kit import conditions, naming
from mlxfleet_operator.core.swapplan import state as st
from mlxfleet_operator.core.swapplan import status as plan_status
from tests.support import placement as decisions

A = "file:///models/a"
B = "file:///models/b"


def md(ready: int, *, replicas: int = 2) -> mdep.ModelDeployment:
    placements: list[dict[str, Any]] = [
        {"node": f"n{i}", "phase": "Ready", "ready": i < ready, "source": A}
        for i in range(replicas)
    ]
    return mdep.ModelDeployment.model_validate(
        {
            "metadata": {"name": "chat", "namespace": "ns", "generation": 4, "uid": "u"},
            "spec": {"model": {"source": B}, "replicas": replicas},
            "status": {"placements": placements},
        }
    )


def verdict(d: mdep.ModelDeployment, plan: dplan.PlanInfo | None) -> conditions.Verdict:
    chosen = decisions.kept(tuple(p.node for p in d.status.placements))
    return mdstatus.verdict(d, chosen, d.status.placements, {}, plan)


def plan(phase: swp.SwapPhase | None, *, paused: bool) -> dplan.PlanInfo:
    return dplan.PlanInfo(name="chat-b", target=ModelRef(B), phase=phase, paused=paused)


@pytest.mark.parametrize(
    "phase",
    [
        pytest.param(None, id="not-seen-yet"),
        pytest.param(swp.SwapPhase.PENDING, id="pending"),
        pytest.param(swp.SwapPhase.PAUSED, id="paused"),
    ],
)
def test_awaiting_approval_while_serving_is_ready_and_settled(phase: swp.SwapPhase | None) -> None:
    out = verdict(md(ready=2), plan(phase, paused=True))
    assert (out.ready, out.reason, out.reconciling, out.stalled) == (
        True,
        "AwaitingApproval",
        False,
        False,
    )
    assert "SwapPlan chat-b" in out.message
    assert "spec.paused to false" in out.message
    assert "2/2 replicas ready" in out.message


def test_awaiting_approval_with_replicas_missing_still_converges() -> None:
    out = verdict(md(ready=1), plan(swp.SwapPhase.PAUSED, paused=True))
    assert (out.ready, out.reason, out.reconciling, out.stalled) == (
        False,
        "AwaitingApproval",
        True,
        False,
    )


@pytest.mark.parametrize(
    ("phase", "paused", "reason"),
    [
        pytest.param(swp.SwapPhase.PROGRESSING, True, "AwaitingApproval", id="paused-mid-step"),
        pytest.param(swp.SwapPhase.PROGRESSING, False, "SwapInProgress", id="running"),
        pytest.param(swp.SwapPhase.PENDING, False, "SwapInProgress", id="approved"),
        pytest.param(swp.SwapPhase.ROLLING_BACK, True, "AwaitingApproval", id="rolling-back"),
    ],
)
def test_a_running_step_is_reconciling(phase: swp.SwapPhase, paused: bool, reason: str) -> None:
    out = verdict(md(ready=2), plan(phase, paused=paused))
    assert (out.ready, out.reason, out.reconciling) == (False, reason, True)


def test_paused_swap_plan_is_ready_where_its_spec_puts_it() -> None:
    state = st.PlanState(phase=swp.SwapPhase.PAUSED, message="paused: set spec.paused=false")
    out = plan_status.verdict(state)
    assert (out.ready, out.reason, out.reconciling, out.stalled) == (True, "Paused", False, False)
    running = plan_status.verdict(st.PlanState(phase=swp.SwapPhase.PROGRESSING))
    assert (running.ready, running.reconciling) == (False, True)


def test_status_carries_the_scale_selector() -> None:
    """HorizontalPodAutoscaler refuses a scale subresource without status.selector."""
    d = md(ready=2)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    out = mdstatus.unplaced_status(d, verdict(d, plan(None, paused=True)), now=now, endpoint="x")
    assert out.selector == "mlxfleet.io/deployment=chat"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("c" * 63, id="63-fits"),
        pytest.param("c" * 64, id="64"),
        pytest.param(f"{'a' * 60}.{'b' * 60}.{'c' * 60}", id="182-subdomain"),
    ],
)
def test_scale_selector_is_the_label_the_operator_puts_on_its_objects(name: str) -> None:
    """A label value holds at most 63 characters: past that the operator labels its Service,
    EndpointSlices and SwapPlans with a bounded value, and status.selector must say the same,
    or an autoscaler's selector matches nothing (or something else)."""
    d = md(ready=2).model_copy(update={"metadata": md(ready=2).metadata.model_copy(
        update={"name": name})})  # fmt: skip
    now = datetime(2026, 1, 1, tzinfo=UTC)
    out = mdstatus.unplaced_status(d, verdict(d, plan(None, paused=True)), now=now, endpoint="x")
    key, _, value = (out.selector or "").partition("=")
    assert key == resources.DEPLOYMENT_LABEL
    assert len(value) <= 63
    assert (value == name) is (len(name) <= 63)
    planned = dplan.new_plan(d, sorted(decisions.kept(("n0", "n1")).kept))
    assert planned.metadata.labels == {key: value}
    assert naming.deployment_labels(name) == {key: value}


def test_a_deployment_not_placed_yet_shows_zero_ready_not_a_blank() -> None:
    """The sharded sample's READY column was empty (issue 28 item 6): a status written before
    anything is placed (size unknown, source refused) or for an invalid spec said no
    `readyReplicas` at all; `kubectl get mdep` and scripts read 0 now."""
    d = mdep.ModelDeployment.model_validate(
        {
            "metadata": {"name": "big", "namespace": "ns", "generation": 1, "uid": "u"},
            "spec": {"model": {"source": B}, "sharding": {"size": 2}},
        }
    )
    now = datetime(2026, 1, 1, tzinfo=UTC)
    unplaced = mdstatus.unplaced_status(d, verdict(d, None), now=now, endpoint=None)
    invalid = mdstatus.invalid_status(d.status, "bad", generation=1, now=now)
    for status in (unplaced, invalid):
        assert status.ready_replicas == 0
        assert status.model_dump(by_alias=True, exclude_none=True)["readyReplicas"] == 0
