"""SwapPlan decisions around `advance`: waiting, a missing or unusable deployment, the nodes a plan
covers, the phase -> condition mapping, the status it writes, its Events and agent requests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.swapplan import gate, requests
from mlxfleet_operator.core.swapplan import state as st
from mlxfleet_operator.core.swapplan import status as plan_status

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OLD = "file:///models/a"
NEW = "file:///models/b"
Phase = swp.SwapPhase


def plan(
    name: str = "p",
    *,
    created: datetime = NOW,
    phase: str | None = None,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
) -> swp.SwapPlan:
    return swp.SwapPlan.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "generation": 2,
                "creationTimestamp": created.isoformat(),
            },
            "spec": {"deploymentRef": {"name": "chat"}, "target": {"source": NEW}, **(spec or {})},
            "status": {**({"phase": phase} if phase else {}), **(status or {})},
        }
    )


def deployment(*nodes: str, removing: tuple[str, ...] = (), **spec: Any) -> mdep.ModelDeployment:
    placements = [{"node": n, "phase": "Ready", "source": OLD} for n in nodes]
    placements += [{"node": n, "phase": "Removing", "source": OLD} for n in removing]
    return mdep.ModelDeployment.model_validate(
        {
            "metadata": {"name": "chat", "namespace": "ns", "uid": "u"},
            "spec": {"model": {"source": NEW}, "replicas": len(nodes), **spec},
            "status": {"placements": placements},
        }
    )


STARTED = st.PlanState(
    phase=Phase.PROGRESSING,
    steps=(swp.SwapStep(node="a", phase=swp.StepPhase.LOADING, started_at=NOW),),
)


# ----------------------------------------------------------------------------------- gate


def test_a_plan_waits_for_an_older_running_plan_of_its_deployment() -> None:
    mine = plan("new", created=NOW)
    older = plan("old", created=NOW - timedelta(minutes=1), phase="Progressing")
    waiting = gate.blocked(mine, st.PlanState(), [older, mine])
    assert waiting == st.PlanState(
        phase=Phase.PENDING, message="waiting for SwapPlan old to finish"
    )


@pytest.mark.parametrize(
    ("older_phase", "previous"),
    [
        pytest.param("Completed", st.PlanState(), id="older-finished"),
        pytest.param("Progressing", STARTED, id="this-one-started"),
        pytest.param("Progressing", st.PlanState(phase=Phase.FAILED), id="this-one-finished"),
    ],
)
def test_a_plan_goes_on_when_nothing_older_runs_or_it_already_started(
    older_phase: str, previous: st.PlanState
) -> None:
    older = plan("old", created=NOW - timedelta(minutes=1), phase=older_phase)
    assert gate.blocked(plan("new"), previous, [older]) is None


def test_a_missing_deployment_fails_a_running_plan_and_leaves_a_finished_one() -> None:
    failed = gate.deployment_missing(STARTED, "chat", now=NOW)
    assert (failed.phase, failed.reason) == (Phase.FAILED, "DeploymentNotFound")
    assert failed.message == "ModelDeployment chat not found"
    assert (failed.steps, failed.completed_at) == (STARTED.steps, NOW)
    done = st.PlanState(phase=Phase.COMPLETED, message="all done")
    assert gate.deployment_missing(done, "chat", now=NOW) is done


def test_an_unusable_deployment_holds_only_a_plan_that_has_not_started() -> None:
    held = gate.deployment_unusable(st.PlanState(phase=Phase.PAUSED), "why")
    assert held == st.PlanState(phase=Phase.PENDING, message="why")
    assert gate.deployment_unusable(STARTED, "why") is None


def test_scope_of_an_operator_plan_is_the_replicas_in_name_order() -> None:
    scope = gate.scope(plan(), deployment("n2", "n1", removing=("n9",)), st.PlanState())
    assert scope == gate.Scope(
        nodes=("n1", "n2"),
        replicas=None,
        allowed=None,
        watched=("n1", "n2"),
        prefetch=("n1", "n2"),
    )


def test_scope_of_a_persons_plan_moves_replicas_and_watches_every_node_involved() -> None:
    previous = st.PlanState(
        steps=(swp.SwapStep(node="n3", phase=swp.StepPhase.LOADING, replaces="n2"),)
    )
    md = deployment("n1", "n2", placement={"nodes": ["n1", "n2", "n3"]})
    scope = gate.scope(plan(spec={"nodes": ["n3", "n1"]}), md, previous)
    assert scope.nodes == ("n3", "n1")
    assert scope.replicas == ("n1", "n2")
    assert scope.allowed == ("n1", "n2", "n3")
    assert scope.watched == ("n3", "n1", "n2")


def test_a_finished_plan_watches_no_node() -> None:
    finished = st.PlanState(phase=Phase.COMPLETED)
    assert gate.scope(plan(), deployment("n1"), finished).watched == ()


# --------------------------------------------------------------------------------- status


@pytest.mark.parametrize(
    ("state", "ready", "reason", "reconciling", "stalled"),
    [
        pytest.param(st.PlanState(phase=Phase.COMPLETED), True, "Completed", False, False,
                     id="completed"),
        pytest.param(st.PlanState(phase=Phase.ROLLED_BACK, message="boom"), False, "RolledBack",
                     False, True, id="rolled-back"),
        pytest.param(st.PlanState(phase=Phase.FAILED, reason=cond.Reason.NOTHING_TO_DO),
                     False, "NothingToDo", False, True, id="failed-with-core-reason"),
        pytest.param(st.PlanState(phase=Phase.PAUSED), True, "Paused", False, False,
                     id="paused"),  # Ready where its spec puts it: GitOps syncs finish
        pytest.param(st.PlanState(phase=Phase.ROLLING_BACK), False, "RollingBack", True, False,
                     id="rolling-back"),
        pytest.param(st.PlanState(phase=Phase.PROGRESSING), False, "StepRunning", True, False,
                     id="progressing"),
        pytest.param(st.PlanState(), False, "StepRunning", True, False, id="pending"),
    ],
)  # fmt: skip
def test_each_phase_maps_to_one_verdict(
    state: st.PlanState, ready: bool, reason: str, reconciling: bool, stalled: bool
) -> None:
    judged = plan_status.verdict(state)
    assert (judged.ready, judged.reason, judged.reconciling, judged.stalled) == (
        ready,
        reason,
        reconciling,
        stalled,
    )


def test_a_plan_that_ended_keeps_why_it_ended() -> None:
    missing = gate.deployment_missing(STARTED, "chat", now=NOW)
    first = plan_status.plan_status(plan(phase="Progressing"), missing, now=NOW)
    ready = {c.type: c for c in first.conditions}["Ready"]
    assert (ready.reason, ready.message) == ("DeploymentNotFound", "ModelDeployment chat not found")
    assert first.observed_generation == 2
    ended = plan(phase="Failed", status=first.model_dump(by_alias=True, mode="json"))
    later = st.PlanState.of(ended)  # what the next run reads back
    assert later.message == "ModelDeployment chat not found"
    again = plan_status.plan_status(ended, later, now=NOW + timedelta(hours=1))
    assert again.conditions == first.conditions


def test_a_phase_change_posts_one_event_warning_on_failure() -> None:
    assert plan_status.announcement(STARTED, STARTED) is None
    done = plan_status.announcement(
        STARTED, st.PlanState(phase=Phase.COMPLETED, steps=STARTED.steps)
    )
    assert done is not None
    assert (done.type, done.reason, done.message) == (
        "Normal",
        "SwapPlanCompleted",
        "Completed 0/1",
    )
    back = plan_status.announcement(STARTED, st.PlanState(phase=Phase.ROLLING_BACK, message="x"))
    assert back is not None
    assert (back.type, back.reason, back.message) == ("Warning", "SwapPlanRollingBack", "x")


@pytest.mark.parametrize(
    ("phase", "observed", "settled"),
    [
        pytest.param("Completed", 2, True, id="finished-and-current"),
        pytest.param("Completed", 1, False, id="finished-new-generation"),
        pytest.param("Progressing", 2, False, id="running"),
    ],
)
def test_only_a_finished_current_plan_is_settled(phase: str, observed: int, settled: bool) -> None:
    found = plan(phase=phase, status={"observedGeneration": observed})
    assert plan_status.settled(found) is settled


# ----------------------------------------------------------------------- observations, requests


def test_an_observed_slot_becomes_a_node_slot() -> None:
    ok = contract.SlotStatus(name="s", served_name="chat", source=OLD, phase="Ready", ready=True)
    assert st.NodeSlot.observed(ok, []) == st.NodeSlot(
        reachable=True, model=ModelRef(OLD), ready=True
    )
    broken = ok.model_copy(update={"phase": "Failed", "ready": False, "last_error": "oom"})
    assert st.NodeSlot.observed(broken, []).failed == "oom"
    assert st.NodeSlot.observed(None, []) == st.NodeSlot(reachable=True)


def test_requests_carry_the_plans_model_strategy_and_drain_timeout() -> None:
    found = plan(spec={"strategy": "Hold", "drainTimeoutSeconds": 7})
    md = deployment("a", "b")
    out = requests.slot_requests(
        found, md, [st.PutTarget("a"), st.PutPrevious("b", ModelRef(OLD, "v1"))]
    )
    assert [(r.node, r.spec.source, r.spec.revision) for r in out] == [
        ("a", NEW, None),
        ("b", OLD, "v1"),
    ]
    assert {(r.spec.swap.strategy, r.spec.swap.drain_timeout_seconds) for r in out} == {
        (contract.SwapStrategy.HOLD, 7)
    }
    plain = requests.slot_requests(plan(), md, [st.PutTarget("a")])
    assert plain[0].spec.swap == md.spec.swap.to_agent()
