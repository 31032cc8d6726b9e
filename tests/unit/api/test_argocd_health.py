"""The Argo CD health checks we ship, run in real Lua 5.1 (lupa) against sample statuses."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import argocd

pytest.importorskip("lupa.lua51", reason="the lupa package (real Lua) is a dev dependency")

KINDS = ("ModelDeployment", "InferenceNode", "SwapPlan", "ModelRoute")
health = argocd.health


def cond(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def obj(
    *conditions: dict[str, Any],
    generation: int = 2,
    observed: int | None = 2,
    status: bool = True,
    **extra_status: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "x", "generation": generation}, "spec": {}}
    if status:
        body["status"] = {"observedGeneration": observed, "conditions": list(conditions)}
        body["status"].update(extra_status)
    return body


READY = cond("Ready", "True", "Ready", "2/2 replicas ready")
NOT_READY = cond("Ready", "False", "WaitingForCapacity", "no node has 48Gi free")
RECONCILING = cond("Reconciling", "True", "Progressing", "loading on mac-1")
STALLED = cond("Stalled", "True", "SourceInvalid", "hf://x: repository not found")
UNKNOWN = cond("Ready", "Unknown", "Progressing")
STALLED_FALSE = cond("Stalled", "False", "Ready")


def test_the_config_map_covers_the_three_kinds() -> None:
    assert sorted(argocd.scripts()) == sorted(KINDS)


COMMON = [
    pytest.param(obj(status=False), "Progressing", "report status", id="no-status"),
    pytest.param(obj(READY, observed=1), "Progressing", "generation 2", id="old-generation"),
    pytest.param(obj(READY, observed=None), "Progressing", "generation 2", id="no-observed-gen"),
    pytest.param(obj(), "Progressing", "Waiting", id="no-conditions"),
    pytest.param(obj(READY), "Healthy", "2/2 replicas ready", id="ready"),
    pytest.param(obj(READY, STALLED_FALSE), "Healthy", "Ready", id="ready-stalled-false"),
    pytest.param(obj(NOT_READY), "Degraded", "WaitingForCapacity", id="not-ready"),
    pytest.param(obj(UNKNOWN), "Progressing", "Progressing", id="ready-unknown"),
    pytest.param(obj(NOT_READY, RECONCILING), "Progressing", "loading on mac-1", id="reconciling"),
    pytest.param(obj(NOT_READY, STALLED), "Degraded", "SourceInvalid: hf://x", id="stalled"),
    pytest.param(obj(READY, RECONCILING, STALLED), "Degraded", "SourceInvalid", id="stalled-wins"),
]


@pytest.mark.parametrize("kind", ["ModelDeployment", "InferenceNode", "ModelRoute"])
@pytest.mark.parametrize(("body", "expected", "message"), COMMON)
def test_conditions_map_to_health(
    kind: str, body: dict[str, Any], expected: str, message: str
) -> None:
    status, text = health(kind, body)
    assert status == expected
    assert message in text


def test_inference_node_reports_memory_pressure_and_missed_heartbeats() -> None:
    pressure = cond("MemoryPressure", "True", "MemoryWarn", "12% free")
    status, text = health("InferenceNode", obj(READY, pressure))
    assert (status, "MemoryWarn: 12% free" in text) == ("Healthy", True)
    missed = cond("Ready", "False", "HeartbeatMissed", "no answer for 30s")
    assert health("InferenceNode", obj(missed)) == (
        "Degraded",
        "HeartbeatMissed: no answer for 30s",
    )
    assert health("InferenceNode", obj())[1] == "Waiting for the first heartbeat"


def _plan(
    phase: str | None, *conditions: dict[str, Any], paused: bool = False, owned: bool = False
) -> dict[str, Any]:
    body = obj(*conditions, phase=phase, progress="1/2")
    body["spec"]["paused"] = paused
    if owned:  # made by the operator for a ModelDeployment (no sync task)
        body["metadata"]["ownerReferences"] = [
            {"apiVersion": "mlxfleet.io/v1alpha1", "kind": "ModelDeployment", "name": "chat"}
        ]
    return body


@pytest.mark.parametrize(
    ("body", "expected", "message"),
    [
        pytest.param(_plan("Pending"), "Progressing", "Pending (1/2)", id="pending"),
        pytest.param(_plan("Progressing"), "Progressing", "Progressing (1/2)", id="progressing"),
        pytest.param(_plan("Paused", paused=True), "Healthy", "Paused (1/2)", id="paused-from-git"),
        pytest.param(_plan("Pending", paused=True), "Healthy", "spec.paused", id="awaiting-git"),
        pytest.param(
            _plan("Paused", paused=True, owned=True), "Suspended", "Paused (1/2)", id="paused-owned"
        ),
        pytest.param(
            _plan("Pending", paused=True, owned=True), "Suspended", "approval", id="awaiting-owned"
        ),
        pytest.param(_plan("Completed", READY), "Healthy", "Completed (1/2)", id="completed"),
        pytest.param(
            _plan("Completed", paused=True), "Healthy", "Completed", id="completed-paused"
        ),
        pytest.param(_plan("Failed", NOT_READY), "Degraded", "Failed (1/2)", id="failed"),
        pytest.param(
            _plan("RolledBack", cond("Ready", "False", "RolledBack", "mac-1: warm-up failed")),
            "Degraded",
            "RolledBack (1/2): RolledBack: mac-1: warm-up failed",
            id="rolled-back",
        ),
        pytest.param(
            _plan("RollingBack", cond("Ready", "False", "RollingBack", "step on mac-2 failed")),
            "Progressing",
            "RollingBack (1/2): RollingBack: step on mac-2 failed",
            id="rolling-back",
        ),
        pytest.param(
            _plan("RollingBack", paused=True),
            "Progressing",
            "RollingBack",
            id="rolling-back-paused",
        ),
        pytest.param(_plan("Progressing", STALLED), "Degraded", "SourceInvalid", id="stalled"),
        pytest.param(_plan(None, READY), "Healthy", "Ready", id="no-phase-ready"),
        pytest.param(_plan(None, RECONCILING), "Progressing", "loading", id="no-phase-reconciling"),
    ],
)
def test_swap_plan_phases_map_to_health(body: dict[str, Any], expected: str, message: str) -> None:
    status, text = health("SwapPlan", body)
    assert status == expected
    assert message in text


def test_model_route_that_only_has_its_fallback_is_degraded() -> None:
    fallback = cond("Ready", "False", "FallbackOnly", "rule default: no ready backend")
    assert health("ModelRoute", obj(fallback)) == (
        "Degraded",
        "FallbackOnly: rule default: no ready backend",
    )
    assert health("ModelRoute", obj())[1] == "Waiting for the Ready condition"


def test_swap_plan_without_status() -> None:
    body = obj(status=False)
    assert health("SwapPlan", body)[0] == "Progressing"
    body["spec"]["paused"] = True
    assert health("SwapPlan", body)[0] == "Progressing"  # from Git: the operator has not seen it
    body["metadata"]["ownerReferences"] = [{"kind": "ModelDeployment", "name": "chat"}]
    assert health("SwapPlan", body) == (
        "Suspended",
        "Paused: awaiting approval, set spec.paused to false to continue",
    )


def test_deployment_awaiting_approval_is_healthy_while_it_serves() -> None:
    waiting = cond("Ready", "True", "AwaitingApproval", "SwapPlan p to b awaits approval")
    assert health("ModelDeployment", obj(waiting)) == (
        "Healthy",
        "AwaitingApproval: SwapPlan p to b awaits approval",
    )


def test_old_generation_wins_over_paused() -> None:
    body = _plan("Paused", paused=True)
    body["status"]["observedGeneration"] = 1
    assert health("SwapPlan", body)[0] == "Progressing"
