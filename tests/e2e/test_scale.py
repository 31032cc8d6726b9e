"""`kubectl scale mdep/NAME --replicas=N` (the scale subresource HPA and KEDA use): the operator
places and removes replicas on real agents to follow it, and the scale subresource reads back
what HPA needs (replicas and a selector)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_operator.core.kit import naming
from tests.e2e.conftest import E2E, Agent, Agents, Operator, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]


def slots_serving(agents: list[Agent], slot: str) -> int:
    return sum(1 for a in agents for s in a.state()["slots"] if s["name"] == slot and s["ready"])


def ready_replicas(e2e: E2E, generation: int) -> int | None:
    md = e2e.get("mdep", "chat")
    status = md.get("status", {})
    if status.get("observedGeneration") != generation:
        return None
    return int(status.get("readyReplicas") or 0)


def scale_subresource(e2e: E2E) -> dict[str, Any]:
    out = e2e.kubectl("-n", e2e.namespace, "get", "mdep", "chat", "--subresource=scale", "-o=json")
    return dict(json.loads(out))


def test_kubectl_scale_drives_the_replicas(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path
) -> None:
    started = [agents.start("a"), agents.start("b")]
    for agent in started:
        e2e.register(agent)
    e2e.apply(e2e.deployment("chat", model_a, replicas=1))
    slot = naming.slot_name(e2e.namespace, "chat")
    wait_for("one replica ready", lambda: ready_replicas(e2e, 1) == 1)
    assert slots_serving(started, slot) == 1

    out = e2e.kubectl("-n", e2e.namespace, "scale", "mdep/chat", "--replicas=2")
    assert "scaled" in out
    wait_for("two replicas ready after kubectl scale", lambda: ready_replicas(e2e, 2) == 2)
    assert slots_serving(started, slot) == 2
    scale = scale_subresource(e2e)
    assert scale["kind"] == "Scale"
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 2, "selector": "mlxfleet.io/deployment=chat"}

    e2e.kubectl("-n", e2e.namespace, "scale", "mdep/chat", "--replicas=1")
    wait_for("one replica left after scaling down", lambda: slots_serving(started, slot) == 1)
    wait_for("status follows", lambda: ready_replicas(e2e, 3) == 1)
    assert scale_subresource(e2e)["status"]["replicas"] == 1
    # a scale is validated like any spec change: the schema's bound names the field
    refused = e2e.cluster.kubectl(
        "-n", e2e.namespace, "scale", "mdep/chat", "--replicas=65", check=False
    )
    assert refused.returncode != 0
    assert "spec.replicas" in refused.stderr, refused.stderr
    assert e2e.get("mdep", "chat")["spec"]["replicas"] == 1
    operator.assert_alive()
