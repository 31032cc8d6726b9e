"""Scenarios 6 and 7: a model bigger than every node is Stalled with the memory numbers; bad
specs that pass the schema get a clear condition, never a crash loop; kstatus on all three kinds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import E2E, Agents, Operator, condition, is_true, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]


def reconciled(obj: dict[str, object]) -> bool:
    status = obj.get("status") or {}
    meta = obj.get("metadata") or {}
    assert isinstance(status, dict)
    assert isinstance(meta, dict)
    return bool(status) and status.get("observedGeneration") == meta.get("generation")


def test_too_big_is_stalled_with_numbers_and_kstatus_on_all_kinds(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path
) -> None:
    node = e2e.register(agents.start("a", memory_budget=2 * 2**30))
    wait_for("node Ready", lambda: is_true(e2e.get("inode", node, namespaced=False), "Ready"))
    huge = e2e.deployment("huge", model_a, replicas=1, contextLength=1048576, maxConcurrency=256)
    e2e.apply(huge)
    md = wait_for("Stalled", lambda: (d := e2e.get("mdep", "huge")) and is_true(d, "Stalled") and d)
    ready = condition(md, "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "InsufficientMemory"
    assert "GiB" in ready["message"]
    assert "2.00 GiB" in ready["message"]  # the node budget
    assert condition(md, "Reconciling")["status"] == "False"
    assert reconciled(md)
    assert md["status"]["estimatedMemoryBytes"] > 2 * 2**30
    # kstatus on the other kinds: a Ready node, a SwapPlan whose deployment is missing
    inode = e2e.get("inode", node, namespaced=False)
    assert reconciled(inode)
    assert inode["status"]["memory"]["allocatableBytes"] == 2 * 2**30
    e2e.apply({
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "SwapPlan",
        "metadata": {"name": "orphan", "namespace": e2e.namespace},
        "spec": {"deploymentRef": {"name": "nope"}, "target": {"source": f"file://{model_a}"}},
    })  # fmt: skip
    plan = wait_for(
        "orphan plan Failed", lambda: (p := e2e.get("swp", "orphan")) and reconciled(p) and p
    )
    assert plan["status"]["phase"] == "Failed"
    assert condition(plan, "Stalled")["reason"] == "DeploymentNotFound"
    # a spec change is observed: generation moves, observedGeneration follows
    e2e.apply(e2e.deployment("huge", model_a, replicas=1, contextLength=2048, maxConcurrency=1))
    fixed = wait_for(
        "fits after the change",
        lambda: (d := e2e.get("mdep", "huge")) and is_true(d, "Ready") and d,
    )
    assert reconciled(fixed)
    assert fixed["metadata"]["generation"] == 2
    operator.assert_alive()


@pytest.mark.parametrize(
    ("name", "spec", "reason"),
    [
        pytest.param(
            "missing",
            {"model": {"source": "file:///nonexistent/model"}},
            "SourceInvalid",
            id="missing-source",
        ),
        pytest.param(
            "nowhere",
            {"placement": {"nodeSelector": {"pool": "none"}}},
            "NoMatchingNodes",
            id="selector-matches-nothing",
        ),
        pytest.param(
            "ghost",
            {"replicas": 1, "placement": {"nodes": ["ghost-node"]}},
            "NoMatchingNodes",
            id="unknown-explicit-node",
        ),
    ],
)
def test_bad_specs_get_a_clear_condition(
    e2e: E2E,
    agents: Agents,
    operator: Operator,
    model_a: Path,
    name: str,
    spec: dict[str, object],
    reason: str,
) -> None:
    node = e2e.register(agents.start("a"))
    wait_for("node Ready", lambda: is_true(e2e.get("inode", node, namespaced=False), "Ready"))
    body = e2e.deployment(name, model_a, replicas=1)
    body["spec"].update(spec)
    e2e.apply(body)
    md = wait_for("Stalled", lambda: (d := e2e.get("mdep", name)) and is_true(d, "Stalled") and d)
    assert condition(md, "Ready")["reason"] == reason
    assert condition(md, "Ready")["message"]
    assert reconciled(md)
    operator.assert_alive()
    assert "Traceback" not in operator.log()


def test_node_with_missing_token_secret_is_stalled(e2e: E2E, operator: Operator) -> None:
    e2e.apply({
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "InferenceNode",
        "metadata": {"name": f"{e2e.label}-nosecret", "labels": {"e2e": e2e.label}},
        "spec": {
            "agent": {"url": "http://127.0.0.1:9", "tokenSecretRef": {"name": "does-not-exist"}}
        },
    })  # fmt: skip
    e2e.nodes.append(f"{e2e.label}-nosecret")
    node = wait_for(
        "Stalled",
        lambda: (
            (n := e2e.get("inode", f"{e2e.label}-nosecret", namespaced=False))
            and is_true(n, "Stalled")
            and n
        ),
    )
    assert condition(node, "Ready")["reason"] == "SecretNotFound"
    assert "does-not-exist" in condition(node, "Ready")["message"]
    operator.assert_alive()
