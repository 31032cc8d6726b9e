"""`kubectl mlxfleet drain` while it waits (pure parts): which deployments hold a replica on the
node and what their Ready condition says, the progress lines (when they change and at least every
`--report-every` seconds) and what a timed-out drain tells a person to do. New-user test: the
drain printed one line, then nothing for 600 s, then timed out."""

from __future__ import annotations

from typing import Any

import pytest

from mlxfleet_agent import drainreport
from mlxfleet_operator.kubectl_plugin import render


def deployment(
    name: str, nodes: list[str], *, reason: str = "", message: str = ""
) -> dict[str, Any]:
    conditions = (
        [{"type": "Ready", "status": "True", "reason": reason, "message": message}]
        if reason
        else []
    )
    return {
        "metadata": {"name": name, "namespace": "default"},
        "status": {
            "placements": [{"node": n, "phase": "Ready", "ready": True} for n in nodes],
            "conditions": conditions,
        },
    }


HELD = (
    "2/2 replicas ready; mac-mini-1: draining (spec.drain), its replica stays until another "
    "node can take it; mac-mini-2: already has a replica of this deployment (one per node)"
)


def test_what_waits_on_the_node_with_each_deployments_own_reason() -> None:
    found = [
        deployment("tiny-chat", ["mac-mini-1", "mac-mini-2"], reason="Ready", message=HELD),
        deployment("elsewhere", ["mac-mini-2"], reason="Ready", message="1/1 replicas ready"),
        deployment("new", ["mac-mini-1"]),
    ]
    waiting = drainreport.waiting_on(found, "mac-mini-1")
    assert waiting == [
        drainreport.Waiting("default/new", "", ""),
        drainreport.Waiting("default/tiny-chat", "Ready", HELD),
    ]
    assert render.placements_on(found, "mac-mini-1") == ["default/new", "default/tiny-chat"]
    assert drainreport.drain_lines("mac-mini-1", waiting, 31.4) == [
        "[  31s] 2 replica(s) still on mac-mini-1: default/new, default/tiny-chat",
        "       default/new: no condition yet",
        f"       default/tiny-chat: Ready: {HELD}",
    ]


def test_a_timed_out_drain_says_why_and_what_to_do() -> None:
    waiting = [drainreport.Waiting("default/tiny-chat", "Ready", HELD)]
    lines = drainreport.drain_timeout("mac-mini-1", waiting, 600)
    assert lines[0].startswith("drain mac-mini-1: timed out after 600s with default/tiny-chat ")
    assert "stays draining" in lines[0]
    assert lines[1] == f"       default/tiny-chat: Ready: {HELD}"
    hint = lines[2]
    scale = "kubectl scale mdep/tiny-chat -n default --replicas=N"
    for what in ("uncordon mac-mini-1", scale, "--timeout", "kubectl mlxfleet status"):
        assert what in hint


@pytest.mark.parametrize(
    ("reports", "due"),
    [
        pytest.param([("a", 0.0), ("a", 2.0), ("a", 29.9)], [True, False, False], id="quiet"),
        pytest.param([("a", 0.0), ("a", 30.0), ("a", 31.0)], [True, True, False], id="every-30s"),
        pytest.param([("a", 0.0), ("b", 2.0), ("b", 4.0)], [True, True, False], id="changed"),
        pytest.param([("a", 0.0), ("b", 2.0), ("a", 4.0)], [True, True, True], id="back"),
    ],
)
def test_progress_is_reported_when_it_changes_and_at_least_every_30_seconds(
    reports: list[tuple[str, float]], due: list[bool]
) -> None:
    cadence = drainreport.Cadence(every=30.0)
    assert [cadence.due(key, now) for key, now in reports] == due


def test_status_says_why_a_deployment_is_not_ready() -> None:
    """`kubectl mlxfleet status` showed `ready 0/1 False` and nothing else (issue 28 item 9)."""
    waiting = {
        "metadata": {"name": "chat", "namespace": "llm"},
        "spec": {"replicas": 3, "model": {"source": "hf://org/m"}},
        "status": {
            "readyReplicas": 2,
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "WaitingForCapacity",
                 "message": "2/3 ready, 1 unplaced: a, b: already has a replica"},
                {"type": "Stalled", "status": "True", "reason": "WaitingForCapacity"},
            ],
        },
    }  # fmt: skip
    serving = deployment("other", ["a"], reason="Ready", message="1/1 replicas ready")
    serving["spec"] = {"replicas": 1}
    serving["status"]["readyReplicas"] = 1
    lines = render.deployment_lines([waiting, serving])
    (head,) = [line for line in lines if "llm/chat" in line]
    assert "ready 2/3" in head
    assert "False WaitingForCapacity" in head
    assert "      2/3 ready, 1 unplaced: a, b: already has a replica (Stalled)" in lines
    (ok,) = [line for line in lines if "default/other" in line]
    assert "True  Ready" in ok
    assert not any("1/1 replicas ready" in line for line in lines)  # nothing to explain
