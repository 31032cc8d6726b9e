"""ModelRoute status (pure): backend readiness, the split in force and the kstatus verdict."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.core import modelroute

NOW = datetime(2026, 5, 1, tzinfo=UTC)
EXTERNAL = {"name": "cloud", "external": {"url": "https://p.example/v1", "model": "m"}}


def route(*, fallback: bool = True) -> mroute.ModelRoute:
    spec: dict[str, Any] = {
        "names": ["chat"],
        "rules": [
            {"name": "code", "match": {"hasTools": True}, "backends": [{"deployment": "coder"}]},
            {
                "name": "default",
                "backends": [
                    {"deployment": "stable", "weight": 90},
                    {"deployment": "canary", "weight": 10},
                ],
            },
        ],
    }
    if fallback:
        spec["fallback"] = {"backends": [EXTERNAL]}
    return mroute.ModelRoute.model_validate(
        {"metadata": {"name": "chat", "namespace": "a", "generation": 3}, "spec": spec}
    )


def ready(status: mroute.ModelRouteStatus) -> cond.Condition:
    found = cond.find(status.conditions, cond.ConditionType.READY)
    assert found is not None
    return found


def test_all_ready_shows_the_configured_split() -> None:
    s = modelroute.status(route(), ready_replicas={"coder": 1, "stable": 2, "canary": 1}, now=NOW)
    assert ready(s).status is cond.ConditionStatus.TRUE
    assert (s.backends_ready, s.names, s.observed_generation) == ("4/4", ["chat"], 3)
    split = {(e.rule, e.backend): e.percent for e in s.split}
    assert split == {
        ("code", "coder"): 100.0,
        ("default", "stable"): 90.0,
        ("default", "canary"): 10.0,
    }
    kinds = {b.name: b.kind for b in s.backends}
    assert kinds["cloud"] is mroute.BackendKind.EXTERNAL


def test_a_canary_without_replicas_gets_no_traffic() -> None:
    s = modelroute.status(route(), ready_replicas={"coder": 1, "stable": 2, "canary": 0}, now=NOW)
    split = {(e.rule, e.backend): e.percent for e in s.split}
    assert (split[("default", "stable")], split[("default", "canary")]) == (100.0, 0.0)
    assert ready(s).status is cond.ConditionStatus.TRUE
    canary = next(b for b in s.backends if b.name == "canary")
    assert not canary.ready
    assert "no ready replica" in (canary.message or "")


@pytest.mark.parametrize(
    ("fallback", "replicas", "reason"),
    [
        pytest.param(True, {"coder": 0, "stable": 1, "canary": 1}, "FallbackOnly", id="fallback"),
        pytest.param(False, {"coder": 0, "stable": 1, "canary": 1}, "NoReadyBackend", id="none"),
        pytest.param(True, {"stable": 1, "canary": 1}, "BackendNotFound", id="missing"),
    ],
)
def test_verdicts(fallback: bool, replicas: dict[str, int], reason: str) -> None:
    s = modelroute.status(route(fallback=fallback), ready_replicas=replicas, now=NOW)
    assert (ready(s).status, ready(s).reason) == (cond.ConditionStatus.FALSE, reason)
