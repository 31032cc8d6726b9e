"""Scenarios 6 and 7: a model bigger than every node is Stalled with the memory numbers; bad
specs that pass the schema get a clear condition, never a crash loop; kstatus on all three kinds."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_operator.dev import processes
from tests.e2e.conftest import AGENT_SECRETS, E2E, Agents, Operator, condition, is_true, wait_for

pytestmark = [pytest.mark.cluster]


def reconciled(obj: dict[str, object]) -> bool:
    status = obj.get("status") or {}
    meta = obj.get("metadata") or {}
    assert isinstance(status, dict)
    assert isinstance(meta, dict)
    return bool(status) and status.get("observedGeneration") == meta.get("generation")


@pytest.mark.mlx
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


@pytest.mark.mlx
def test_more_replicas_than_nodes_says_why_one_is_unplaced(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path
) -> None:
    """New-user test: `kubectl scale --replicas=3` on two nodes read `2/3 ready, 1 unplaced: `
    with nothing after the colon, in the conditions and in `kubectl get -o wide`."""
    node = e2e.register(agents.start("a"))
    wait_for("node Ready", lambda: is_true(e2e.get("inode", node, namespaced=False), "Ready"))
    e2e.apply(e2e.deployment("more", model_a, replicas=2))
    why = f"{node}: already has a replica of this deployment (one per node)"
    md = wait_for(
        "one ready, one unplaced",
        lambda: (
            (d := e2e.get("mdep", "more"))
            and condition(d, "Ready").get("message", "").startswith("1/2 ready, 1 unplaced: ")
            and d
        ),
    )
    ready, reconciling = condition(md, "Ready"), condition(md, "Reconciling")
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForCapacity")
    assert why in ready["message"]
    assert (reconciling["status"], reconciling["message"]) == ("True", ready["message"])
    wide = e2e.kubectl("get", "mdep", "more", "-n", e2e.namespace, "-o", "wide")
    assert why in wide
    operator.assert_alive()


@pytest.mark.mlx
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


@pytest.mark.mlx
def test_node_budget_is_the_agents_own(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path
) -> None:
    """One budget: the agent's (GET /v1/state memory.budgetBytes). Spec memory facts on the
    InferenceNode never make placement promise what the agent would refuse (507)."""
    agent = agents.start("a", memory_budget=2 * 2**30)
    node = e2e.register(agent, reservedMemory="0", hardware={"memory": "64Gi"})
    inode = wait_for(
        "node Ready",
        lambda: (n := e2e.get("inode", node, namespaced=False)) and is_true(n, "Ready") and n,
    )
    assert inode["status"]["memory"]["allocatableBytes"] == 2 * 2**30
    body = e2e.deployment("fat", model_a, replicas=1, resources={"memory": "3Gi"})
    e2e.apply(body)
    md = wait_for(
        "Stalled", lambda: (d := e2e.get("mdep", "fat")) and is_true(d, "Stalled") and d, timeout=60
    )
    assert condition(md, "Ready")["reason"] == "InsufficientMemory"
    assert "2.00 GiB" in condition(md, "Ready")["message"]
    assert agent.state()["slots"] == []  # never asked for what it would refuse
    operator.assert_alive()


@pytest.mark.mlx
@pytest.mark.parametrize(
    ("env", "reason", "stalled"),
    [
        pytest.param({"HF_HUB_OFFLINE": None}, "SourceUnavailable", False, id="hub-unreachable"),
        pytest.param({"HF_HUB_OFFLINE": "1"}, "SourceInvalid", True, id="offline-not-cached"),
    ],
)
def test_hub_down_is_transient_only_a_missing_source_stalls(
    e2e: E2E,
    agents: Agents,
    operator: Operator,
    tmp_path: Path,
    env: dict[str, str | None],
    reason: str,
    stalled: bool,
) -> None:
    [closed] = processes.free_ports(1)  # nothing listens there: every hub call fails
    hub = {"HF_ENDPOINT": f"http://127.0.0.1:{closed}", "HF_HOME": str(tmp_path / "hf"), **env}
    agent = agents.start("a", env=hub)
    node = e2e.register(agent)
    wait_for("node Ready", lambda: is_true(e2e.get("inode", node, namespaced=False), "Ready"))
    body = e2e.deployment("hub", Path("/unused"), replicas=1)
    body["spec"]["model"] = {"source": "hf://mlx-community/not-cached-here"}
    e2e.apply(body)

    def judged() -> dict[str, Any] | None:
        md = e2e.get("mdep", "hub")
        verdict = condition(md, "Ready").get("reason")
        return md if verdict in ("SourceUnavailable", "SourceInvalid") else None

    md = wait_for("a verdict on the source", judged, timeout=60)
    ready = condition(md, "Ready")
    assert ready["reason"] == reason, ready
    assert is_true(md, "Stalled") is stalled
    assert is_true(md, "Reconciling") is not stalled
    if not stalled:
        assert "HF_HUB_OFFLINE" not in ready["message"]
        assert "Connect" in ready["message"] or "onnection" in ready["message"], ready
        # retried: the agent is asked again on later reconciles, and it stays transient
        wait_for(
            "a second fetch attempt", lambda: agent.log_tail(20000).count("prefetch failed") >= 2
        )
        assert condition(e2e.get("mdep", "hub"), "Ready")["reason"] == "SourceUnavailable"
    else:
        assert "HF_HUB_OFFLINE" in ready["message"]
    operator.assert_alive()


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": True}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


@pytest.mark.mlx
@pytest.mark.parametrize(
    "args",
    [
        pytest.param(nested(300), id="300-levels"),
        pytest.param({"blob": "x" * 20_000}, id="20kb"),
    ],
)
def test_oversized_chat_template_args_are_stalled_and_never_reach_the_agent(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, args: dict[str, Any]
) -> None:
    agent = agents.start("a")
    node = e2e.register(agent)
    wait_for("node Ready", lambda: is_true(e2e.get("inode", node, namespaced=False), "Ready"))
    e2e.apply(e2e.deployment("deep", model_a, replicas=1, server={"chatTemplateArgs": args}))
    md = wait_for(
        "Stalled",
        lambda: (d := e2e.get("mdep", "deep")) and is_true(d, "Stalled") and d,
        timeout=60,
    )
    ready = condition(md, "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "spec.server.chatTemplateArgs" in ready["message"]
    assert reconciled(md)
    assert agent.state()["slots"] == []
    assert is_true(e2e.get("inode", node, namespaced=False), "Ready")
    operator.assert_alive()
    assert "Traceback" not in operator.log()


def test_a_ca_secret_without_a_certificate_is_stalled_not_a_traceback(
    e2e: E2E, operator: Operator
) -> None:
    """A CA Secret whose key holds no PEM certificate made every heartbeat poll raise an
    SSLError out of the handler (a traceback a second in the log, the node's status silent);
    now the node is Stalled with reason SecretInvalid naming the Secret and key."""
    secret = f"agent-{e2e.label}-badca"
    e2e.secret(secret, {"token": "t", "ca.crt": "not a certificate"})
    name = e2e.node("badca", "https://127.0.0.1:9", secret)
    node = wait_for(
        "Stalled",
        lambda: (n := e2e.get("inode", name, namespaced=False)) and is_true(n, "Stalled") and n,
        timeout=30,
    )
    ready = condition(node, "Ready")
    assert ready["reason"] == "SecretInvalid", ready
    assert f"Secret {AGENT_SECRETS}/{secret}" in ready["message"], ready
    assert "'ca.crt'" in ready["message"], ready
    operator.assert_alive()
    assert "Traceback" not in operator.log()


def test_unlabelled_secret_is_never_sent_to_an_agent_url(e2e: E2E, operator: Operator) -> None:
    """The operator sends only Secrets labelled as agent credentials: an InferenceNode cannot
    make it send any other Secret of its namespace to a URL of the node author's choosing."""
    canary = f"canary-{e2e.label}"
    seen: list[str] = []

    class Listener(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(404)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        e2e.secret(f"other-{e2e.label}", {"token": canary}, labelled=False)
        url = f"http://127.0.0.1:{server.server_port}"
        name = e2e.node("thief", url, f"other-{e2e.label}")
        node = wait_for(
            "Stalled",
            lambda: (n := e2e.get("inode", name, namespaced=False)) and is_true(n, "Stalled") and n,
            timeout=30,
        )
        ready = condition(node, "Ready")
        assert ready["reason"] == "SecretNotAllowed"
        assert "mlxfleet.io/agent-credentials" in ready["message"]
        assert canary not in ready["message"]
        time.sleep(2)
        assert not any(canary in h for h in seen), seen
        # labelled as agent credentials, it is used (and only then)
        e2e.secret(f"other-{e2e.label}", {"token": canary})
        wait_for("the labelled token used", lambda: f"Bearer {canary}" in seen, timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    operator.assert_alive()


def test_paused_plan_stays_paused_and_a_plan_that_did_nothing_is_not_completed(
    e2e: E2E, operator: Operator
) -> None:
    """The sample plan's shape: paused, one node without a replica and one that does not exist."""
    e2e.secret(f"agent-{e2e.label}-real", {"token": "t"})
    real = e2e.node("real", "http://127.0.0.1:9", f"agent-{e2e.label}-real")
    e2e.apply(e2e.unplaced("chat"))
    ghost = f"{e2e.label}-ghost"
    plan: dict[str, Any] = {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "SwapPlan",
        "metadata": {"name": "to-rev2", "namespace": e2e.namespace},
        "spec": {
            "deploymentRef": {"name": "chat"},
            "target": {"source": "hf://mlx-community/tiny", "revision": "rev2"},
            "nodes": [real, ghost],
            "paused": True,
        },
    }
    e2e.apply(plan)
    paused = wait_for(
        "plan reconciled", lambda: (p := e2e.get("swp", "to-rev2")) and reconciled(p) and p
    )
    time.sleep(3)  # several reconciles: it waits for approval, whatever it would do
    paused = e2e.get("swp", "to-rev2")
    assert paused["status"]["phase"] == "Paused", paused["status"]
    assert condition(paused, "Ready")["reason"] == "Paused"
    assert is_true(paused, "Ready")  # where its spec puts it: GitOps syncs finish (gitops.md)
    assert not is_true(paused, "Stalled")
    assert not is_true(paused, "Reconciling")
    steps = {s["node"]: s for s in paused["status"]["steps"]}
    assert ghost in steps[ghost]["message"]
    assert "no InferenceNode" in steps[ghost]["message"]
    # approved: nothing could run, so it says so instead of Completed
    plan["spec"]["paused"] = False
    e2e.apply(plan)
    done = wait_for(
        "plan finished",
        lambda: (
            (p := e2e.get("swp", "to-rev2"))
            and p["status"].get("phase") not in (None, "Paused", "Pending", "Progressing")
            and p
        ),
        timeout=30,
    )
    assert done["status"]["phase"] == "Failed", done["status"]
    assert condition(done, "Ready")["reason"] == "NothingToDo"
    assert is_true(done, "Stalled")
    assert done["status"]["progress"] == "0/2"
    assert all(s["phase"] == "Skipped" for s in done["status"]["steps"])
    operator.assert_alive()


@pytest.mark.mlx
def test_replicas_no_node_can_take_turn_stalled_so_kubectl_wait_returns(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path
) -> None:
    """Issue 28 item 9: two replicas on one Mac were `WaitingForCapacity` with Stalled=False
    forever, so `kubectl wait` ran its whole timeout while the quickstart said Stalled. After
    `--capacity-stall-seconds` without room the deployment is Stalled (same reason), and a node
    that can take the replica makes it Ready again."""
    operator.stop()
    operator.start("--capacity-stall-seconds", "6")
    node = e2e.register(agents.start("a"))
    wait_for("node Ready", lambda: is_true(e2e.get("inode", node, namespaced=False), "Ready"))
    e2e.apply(e2e.deployment("short", model_a, replicas=2))
    started = time.monotonic()
    e2e.kubectl(
        "-n", e2e.namespace, "wait", "--for=condition=Stalled", "mdep/short", "--timeout=90s"
    )  # fmt: skip
    took = time.monotonic() - started
    md = e2e.get("mdep", "short")
    ready = condition(md, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForCapacity")
    assert "Stalled: no node could take it for 6s" in ready["message"]
    assert condition(md, "Reconciling")["status"] == "False"
    assert took < 80, took
    second = e2e.register(agents.start("b"))
    wait_for("node b Ready", lambda: is_true(e2e.get("inode", second, namespaced=False), "Ready"))
    e2e.kubectl(
        "-n", e2e.namespace, "wait", "--for=condition=Ready", "mdep/short", "--timeout=120s"
    )  # fmt: skip
    assert condition(e2e.get("mdep", "short"), "Stalled")["status"] == "False"
    operator.assert_alive()
