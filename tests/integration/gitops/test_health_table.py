"""What Flux and Argo CD see for our objects in each state, judged by their own logic.

Conditions come from the operator's decision functions (core verdicts, the SwapPlan handler's
verdict, `apply_verdict`), not from hand-written fixtures. Flux's verdict is kstatus'
`status.Compute` (scripts/kstatus, built on sigs.k8s.io/cli-utils, identical to the fork Flux's
kustomize-controller uses); Argo CD's is our shipped Lua. docs/gitops.md carries the same table,
and this test fails when it says something else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_operator.api import conditions as api
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.deployment import autoscale
from mlxfleet_operator.core.deployment import plan as dplan
from mlxfleet_operator.core.deployment import status as mdstatus
from mlxfleet_operator.core.kit import conditions
from mlxfleet_operator.core.swapplan import state as st
from mlxfleet_operator.core.swapplan import status as plan_status
from tests.support import argocd
from tests.support import placement as decisions
from tests.support.tools import Kstatus

pytestmark = pytest.mark.tools

DOC = Path(__file__).resolve().parents[3] / "docs" / "gitops.md"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
A, B = "file:///models/a", "file:///models/b"
OWNER = {"apiVersion": "mlxfleet.io/v1alpha1", "kind": "ModelDeployment", "name": "chat"}


def deployment(
    *,
    ready: int = 2,
    plan: dplan.PlanInfo | None = None,
    fits_nowhere: bool = False,
    observed: int | None = 4,
    conflict: str | None = None,
) -> dict[str, Any]:
    """A ModelDeployment (2 replicas, generation 4) with the status the operator writes."""
    md = _model_deployment(ready)
    chosen = decisions.kept(("n0", "n1"), fits_nowhere=fits_nowhere)
    verdict = mdstatus.verdict(md, chosen, md.status.placements, {}, plan, conflict=conflict)
    return _object(md.kind, verdict, observed=observed)


def _model_deployment(ready: int) -> mdep.ModelDeployment:
    placements = [
        {"node": f"n{i}", "phase": "Ready", "ready": i < ready, "source": A} for i in range(2)
    ]
    return mdep.ModelDeployment.model_validate(
        {
            "metadata": {"name": "chat", "namespace": "ns", "generation": 4},
            "spec": {"model": {"source": B}, "replicas": 2},
            "status": {"placements": placements},
        }
    )


def autoscaled(*, awake: bool) -> dict[str, Any]:
    """A deployment with `minReplicas: 0` as the autoscaler leaves it: asleep after its
    idleTimeout, or woken by a request held at a gateway, its replica loading."""
    bounds = autoscale.Bounds(
        start=1, low=0, high=1, capacity=4, idle_timeout=timedelta(seconds=15)
    )
    windows = autoscale.Windows()
    start = autoscale.decide(bounds, autoscale.Load(), None, now=NOW, windows=windows)
    idle = autoscale.Load(idle_for=timedelta(seconds=15))
    later = NOW + timedelta(seconds=15)
    scale = autoscale.decide(bounds, idle, start, now=later, windows=windows)
    if awake:
        woken = later + timedelta(seconds=60)
        scale = autoscale.decide(
            bounds, autoscale.Load(waiting=1), scale, now=woken, windows=windows
        )
    loading = [{"node": "n0", "phase": "Loading", "ready": False, "source": B}] if awake else []
    md = mdep.ModelDeployment.model_validate(
        {
            "metadata": {"name": "chat", "namespace": "ns", "generation": 4},
            "spec": {"model": {"source": B}, "replicas": 1, "minReplicas": 0, "idleTimeout": "15s"},
            "status": {"placements": loading},
        }
    )
    md = autoscale.attach(md, scale)
    chosen = decisions.kept(("n0",) if awake else ())
    verdict = mdstatus.verdict(md, chosen, md.status.placements, {}, None)
    return _object(md.kind, verdict, observed=4)


def invalid_deployment() -> dict[str, Any]:
    """A ModelDeployment the API server admitted and the operator's model refuses."""
    md = _model_deployment(0)
    message = "spec.server.chatTemplateArgs: deeper than 8 levels"
    status = mdstatus.invalid_status(md.status, message, generation=4, now=NOW)
    return _body(md.kind, status.conditions, observed=4, generation=4)


def plan_info(phase: swp.SwapPhase | None, *, paused: bool, failed: bool = False) -> dplan.PlanInfo:
    return dplan.PlanInfo(
        name="chat-b",
        target=ModelRef(B),
        phase=phase,
        paused=paused,
        started=failed,
        message="step on n1: load failed" if failed else None,
    )


def swap_plan(
    phase: swp.SwapPhase,
    *,
    owned: bool = False,
    paused: bool = False,
    reason: api.Reason | None = None,
) -> dict[str, Any]:
    """A SwapPlan with the status the SwapPlan handler writes for `phase` (and `reason`)."""
    message = "step on n1 failed" if "Back" in phase else None
    state = st.PlanState(phase=phase, message=message, reason=reason)
    body = _object("SwapPlan", plan_status.verdict(state), observed=1, generation=1)
    body["spec"]["paused"] = paused
    body["status"].update(phase=str(phase), progress="0/2")
    if owned:
        body["metadata"]["ownerReferences"] = [OWNER]
    return body


def _object(
    kind: str, verdict: conditions.Verdict, *, observed: int | None, generation: int = 4
) -> dict[str, Any]:
    found = conditions.apply_verdict([], verdict, generation=observed, now=NOW)
    return _body(kind, found, observed=observed, generation=generation)


def _body(
    kind: str, found: list[api.Condition], *, observed: int | None, generation: int
) -> dict[str, Any]:
    return {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "chat", "namespace": "ns", "generation": generation},
        "spec": {},
        "status": {
            "observedGeneration": observed,
            "conditions": [c.model_dump(mode="json", by_alias=True) for c in found],
        },
    }


@dataclass(frozen=True)
class Row:
    state: str
    build: Callable[[], dict[str, Any]]
    flux: str
    argo: str


P = swp.SwapPhase
ROWS = [
    Row("ModelDeployment, all replicas serve", lambda: deployment(), "Current", "Healthy"),
    Row(
        "ModelDeployment, model change awaits approval, replicas serve the old model",
        lambda: deployment(plan=plan_info(P.PAUSED, paused=True)),
        "Current",
        "Healthy",
    ),
    Row(
        "ModelDeployment, change awaits approval, a replica missing",
        lambda: deployment(ready=1, plan=plan_info(P.PAUSED, paused=True)),
        "InProgress",
        "Progressing",
    ),
    Row(
        "ModelDeployment, approved change swapping",
        lambda: deployment(plan=plan_info(P.PROGRESSING, paused=False)),
        "InProgress",
        "Progressing",
    ),
    Row(
        "ModelDeployment, swap rolled back",
        lambda: deployment(plan=plan_info(P.ROLLED_BACK, paused=False, failed=True)),
        "Failed",
        "Degraded",
    ),
    Row(
        "ModelDeployment, fits on no node",
        lambda: deployment(ready=0, fits_nowhere=True),
        "Failed",
        "Degraded",
    ),
    Row(
        "ModelDeployment, a Service of that name is not its own",
        lambda: deployment(ready=0, conflict="Service ns/chat exists and is not this one's"),
        "Failed",
        "Degraded",
    ),
    Row(
        "ModelDeployment, admitted but refused by the operator's model",
        invalid_deployment,
        "Failed",
        "Degraded",
    ),
    Row(
        "ModelDeployment, asleep (`minReplicas: 0`, no requests for `idleTimeout`)",
        lambda: autoscaled(awake=False),
        "Current",
        "Healthy",
    ),
    Row(
        "ModelDeployment, woken by a request, its replica loading",
        lambda: autoscaled(awake=True),
        "InProgress",
        "Progressing",
    ),
    Row(
        "ModelDeployment, new generation not yet observed",
        lambda: deployment(observed=3),
        "InProgress",
        "Progressing",
    ),
    Row(
        "SwapPlan from Git, paused (awaiting approval)",
        lambda: swap_plan(swp.SwapPhase.PAUSED, paused=True),
        "Current",
        "Healthy",
    ),
    Row(
        "SwapPlan made by the operator, paused (awaiting approval)",
        lambda: swap_plan(swp.SwapPhase.PAUSED, paused=True, owned=True),
        "Current",
        "Suspended",
    ),
    Row(
        "SwapPlan, a step running",
        lambda: swap_plan(swp.SwapPhase.PROGRESSING),
        "InProgress",
        "Progressing",
    ),
    Row(
        "SwapPlan, rolling back",
        lambda: swap_plan(swp.SwapPhase.ROLLING_BACK),
        "InProgress",
        "Progressing",
    ),
    Row("SwapPlan, completed", lambda: swap_plan(swp.SwapPhase.COMPLETED), "Current", "Healthy"),
    Row(
        "SwapPlan, rolled back",
        lambda: swap_plan(swp.SwapPhase.ROLLED_BACK),
        "Failed",
        "Degraded",
    ),
    Row(
        "SwapPlan, every step skipped (nothing to do)",
        lambda: swap_plan(swp.SwapPhase.FAILED, reason=api.Reason.NOTHING_TO_DO),
        "Failed",
        "Degraded",
    ),
]


def summary(obj: dict[str, Any]) -> str:
    """`Ready / Reconciling / Stalled, reason` as docs/gitops.md writes it."""
    found = {c["type"]: c for c in obj["status"]["conditions"]}
    trio = " / ".join(found[t]["status"] for t in ("Ready", "Reconciling", "Stalled"))
    return f"{trio}, `{found['Ready']['reason']}`"


@pytest.mark.parametrize("row", [pytest.param(r, id=r.state) for r in ROWS])
def test_flux_and_argo_verdicts(kstatus: Kstatus, row: Row) -> None:
    obj = row.build()
    assert kstatus.judge(obj)["status"] == row.flux
    assert argocd.health(obj["kind"], obj)[0] == row.argo


def test_docs_table_says_the_same() -> None:
    text = DOC.read_text()
    for row in ROWS:
        line = f"| {row.state} | {summary(row.build())} | {row.flux} | {row.argo} |"
        assert line in text, f"docs/gitops.md lacks or contradicts:\n{line}"


def test_approval_conditions_are_what_docs_promise() -> None:
    waiting = deployment(plan=plan_info(P.PAUSED, paused=True))
    found = {c["type"]: c for c in waiting["status"]["conditions"]}
    assert found["Ready"]["reason"] == api.Reason.AWAITING_APPROVAL
    assert "awaits approval" in found["Ready"]["message"]
