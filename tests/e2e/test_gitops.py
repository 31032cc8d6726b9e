"""A model change that awaits manual approval does not hold a GitOps sync: Flux's kstatus and
our Argo CD health check, fed the live objects the real operator writes, call the deployment
settled while its replicas serve; once approved, the swap reads as in progress until it is done."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import E2E, Agents, Operator, condition, wait_for
from tests.e2e.test_swap import change_model, plan_phase, ready_deployment
from tests.support import argocd
from tests.support.tools import Kstatus

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]


def verdicts(kstatus: Kstatus, e2e: E2E, plan: str) -> dict[str, tuple[str, str]]:
    """kind -> (Flux status, Argo CD health) of the live deployment and plan."""
    md, swp = e2e.get("mdep", "chat"), e2e.get("swp", plan)
    flux = kstatus.judge_all(md, swp)
    return {
        "ModelDeployment": (flux[0]["status"], argocd.health("ModelDeployment", md)[0]),
        "SwapPlan": (flux[1]["status"], argocd.health("SwapPlan", swp)[0]),
    }


def settled(obj: dict[str, Any]) -> bool:
    return bool(obj) and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]


def test_approval_does_not_hold_a_sync(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, model_b: Path, kstatus: Kstatus
) -> None:
    manual = {"swap": {"approval": "Manual"}}
    _, started = ready_deployment(e2e, agents, model_a, **manual)
    plan = change_model(e2e, model_b, **manual)
    wait_for(
        "deployment observed the change and awaits approval",
        lambda: (
            settled(md := e2e.get("mdep", "chat"))
            and condition(md, "Ready").get("reason") == "AwaitingApproval"
            and plan_phase(e2e, plan) == "Paused"
        ),
    )
    md = e2e.get("mdep", "chat")
    assert condition(md, "Ready")["status"] == "True"
    assert condition(md, "Reconciling")["status"] == "False"
    assert condition(md, "Stalled")["status"] == "False"
    assert all(p["source"] == f"file://{model_a}" for p in md["status"]["placements"])
    assert verdicts(kstatus, e2e, plan) == {
        "ModelDeployment": ("Current", "Healthy"),
        "SwapPlan": ("Current", "Suspended"),  # operator-made: a child, never a sync task
    }
    # what a pipeline without Flux runs returns too
    e2e.kubectl("-n", e2e.namespace, "wait", "--for=condition=Ready", "mdep/chat", "--timeout=30s")

    e2e.kubectl(
        "-n", e2e.namespace, "patch", "swp", plan, "--type=merge", "-p", '{"spec":{"paused":false}}'
    )
    seen: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 300
    while plan_phase(e2e, plan) != "Completed" and time.monotonic() < deadline:
        seen.add(verdicts(kstatus, e2e, plan)["ModelDeployment"])
        time.sleep(0.1)
    assert plan_phase(e2e, plan) == "Completed"
    assert ("InProgress", "Progressing") in seen  # the approved swap is waited for
    new = f"file://{model_b}"
    wait_for(
        "deployment settled on the new model",
        lambda: (
            settled(d := e2e.get("mdep", "chat"))
            and condition(d, "Ready").get("reason") == "Ready"
            and all(p["source"] == new for p in d["status"]["placements"])
        ),
    )
    assert verdicts(kstatus, e2e, plan) == {
        "ModelDeployment": ("Current", "Healthy"),
        "SwapPlan": ("Current", "Healthy"),
    }
    assert len(started) == 2
    operator.assert_alive()
