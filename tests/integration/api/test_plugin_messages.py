"""`kubectl mlxfleet` (the real console script) against a real API server: what it says when a
named object does not exist, and what a drain says while it waits and when it gives up; and
`mlxfleet-agent leave`, which drains the same way and says the same (`mlxfleet_agent.drainreport`).

No operator runs here: the ModelDeployment's status (a replica on the draining node, the Ready
condition the operator writes when no other node can take it) is written by the test, so the
drain's waiting, reporting, timing out and finishing are driven step by step. The whole drain with
the operator and agents is tests/e2e/test_plugin.py.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mlxfleet_operator.api import resources
from mlxfleet_operator.dev import controlplane

pytestmark = pytest.mark.cluster
PLUGIN = Path(sys.executable).parent / "kubectl-mlxfleet"
HELD = (
    "2/2 replicas ready; {node}: draining (spec.drain), its replica stays until another node "
    "can take it; other: already has a replica of this deployment (one per node)"
)


def plugin(cluster: controlplane.ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PLUGIN), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def apply(cluster: controlplane.ControlPlane, body: dict[str, object]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def node(cluster: controlplane.ControlPlane, name: str) -> None:
    apply(cluster, {
        "apiVersion": resources.API_VERSION, "kind": "InferenceNode", "metadata": {"name": name},
        "spec": {"agent": {"url": "http://127.0.0.1:9", "tokenSecretRef": {"name": "t"}}},
    })  # fmt: skip


def placed_on(cluster: controlplane.ControlPlane, ns: str, nodes: list[str], message: str) -> None:
    """The status the operator writes: replicas on `nodes`, Ready with `message`."""
    status = {
        "placements": [
            {"node": n, "phase": "Ready", "ready": True, "slot": f"{ns}-chat"} for n in nodes
        ],
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "Ready", "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }],
    }  # fmt: skip
    cluster.kubectl(
        "patch", "mdep", "chat", "-n", ns, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "said"),
    [
        pytest.param(["logs", "nope"], 'logs: InferenceNode "nope" not found', id="logs"),
        pytest.param(["cordon", "nope"], 'cordon: InferenceNode "nope" not found', id="cordon"),
        pytest.param(
            ["uncordon", "nope"], 'uncordon: InferenceNode "nope" not found', id="uncordon"
        ),
        pytest.param(["drain", "nope"], 'drain: InferenceNode "nope" not found', id="drain"),
        pytest.param(
            ["approve", "nope", "-n", "team-a"],
            'approve: SwapPlan "nope" not found in namespace "team-a"',
            id="approve",
        ),
        pytest.param(
            ["approve", "swapplan", "nope", "-n", "team-a"],
            'approve: SwapPlan "nope" not found in namespace "team-a"',
            id="approve-swapplan",
        ),
        pytest.param(
            ["approve", "node", "nope"],
            'approve: InferenceNode "nope" not found',
            id="approve-node",
        ),
    ],
)
def test_a_missing_object_is_named(
    cluster: controlplane.ControlPlane, args: list[str], said: str
) -> None:
    out = plugin(cluster, *args)
    assert out.returncode == 1
    assert out.stderr.strip() == f"kubectl mlxfleet {said}"
    assert "404" not in out.stderr


def test_approve_node_of_a_node_that_waits_and_of_one_that_does_not(
    cluster: controlplane.ControlPlane,
) -> None:
    """`approve node`: what the person approves on stderr, then approved, uncordoned and labelled
    as asked; an admin's node (no spec.approved) is not waiting; a kind approve does not know
    exits 2; requested labels that are not labels are refused, the node left as it was."""
    admins, waits, bad = (f"mac-{secrets.token_hex(3)}" for _ in range(3))
    node(cluster, admins)
    out = plugin(cluster, "approve", "node", admins)
    assert (out.returncode, out.stdout.strip()) == (0, f"inferencenode/{admins} is not waiting "
                                                       "for approval")  # fmt: skip
    for name, asked in ((waits, '{"pool": "big"}'), (bad, '{"pool": "not a label!"}')):
        apply(cluster, {
            "apiVersion": resources.API_VERSION, "kind": "InferenceNode",
            "metadata": {"name": name,
                         "annotations": {resources.REQUESTED_LABELS_ANNOTATION: asked}},
            "spec": {"agent": {"url": "https://10.0.0.9:8470", "tokenSecretRef": {"name": "t"}},
                     "hardware": {"memory": "512Gi"}, "approved": False, "unschedulable": True},
        })  # fmt: skip
    out = plugin(cluster, "approve", "node", waits)
    assert out.returncode == 0, out.stderr
    assert "https://10.0.0.9:8470" in out.stderr
    assert "512Gi" in out.stderr
    assert "pool=big" in out.stderr
    found = json.loads(cluster.kubectl("get", "inode", waits, "-o", "json").stdout)
    assert (found["spec"]["approved"], found["spec"]["unschedulable"]) == (True, False)
    assert found["metadata"]["labels"] == {"pool": "big"}
    assert resources.REQUESTED_LABELS_ANNOTATION not in found["metadata"].get("annotations", {})
    out = plugin(cluster, "approve", "node", bad)
    assert out.returncode == 1
    assert resources.REQUESTED_LABELS_ANNOTATION in out.stderr
    assert "--no-labels" in out.stderr
    left = json.loads(cluster.kubectl("get", "inode", bad, "-o", "json").stdout)["spec"]
    assert left["approved"] is False
    assert plugin(cluster, "approve", "node", bad, "--no-labels").returncode == 0
    out = plugin(cluster, "approve", "deployment", "x")
    assert out.returncode == 2
    assert "expected PLAN, swapplan PLAN or node NODE" in out.stderr
    for name in (admins, waits, bad):
        cluster.kubectl("delete", "inode", name, "--wait=false")


def test_drain_reports_while_it_waits_says_why_and_gives_up_with_a_hint(
    cluster: controlplane.ControlPlane,
) -> None:
    ns, name = f"drain-{secrets.token_hex(3)}", f"mac-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", ns)
    node(cluster, name)
    apply(cluster, {
        "apiVersion": resources.API_VERSION, "kind": "ModelDeployment",
        "metadata": {"name": "chat", "namespace": ns},
        "spec": {"model": {"source": "file:///m"}, "replicas": 2},
    })  # fmt: skip
    placed_on(cluster, ns, [name, "other"], HELD.format(node=name))

    out = plugin(cluster, "drain", name, "--timeout", "4", "--poll", "0.2", "--report-every", "1.5")
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    heads = [line for line in lines if f"1 replica(s) still on {name}: {ns}/chat" in line]
    assert len(heads) >= 3, out.stderr  # at 0 s, then every 1.5 s with the time
    assert heads[0].startswith("[   0s]")
    assert heads[-1] != heads[0]
    why = f"       {ns}/chat: Ready: {HELD.format(node=name)}"
    assert why in lines
    assert f"drain {name}: timed out after 4s with {ns}/chat still there" in out.stderr
    assert "to let them move" in lines[-1]
    spec = json.loads(cluster.kubectl("get", "inode", name, "-o", "json").stdout)["spec"]
    assert (spec["unschedulable"], spec["drain"]) == (True, True)

    # room appears: the replica leaves the node and the same command finishes
    running = subprocess.Popen(
        [str(PLUGIN), "--kubeconfig", str(cluster.kubeconfig), "drain", name, "--poll", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    guard = threading.Timer(60, running.kill)  # never hang on a drain that says nothing
    guard.start()
    try:
        assert running.stderr is not None
        seen = [running.stderr.readline() for _ in range(2)]  # it has seen the replica and why
        placed_on(cluster, ns, ["other", "third"], "2/2 replicas ready")
        stdout, rest = running.communicate(timeout=30)
    finally:
        guard.cancel()
        running.kill()
    stderr = "".join(seen) + rest
    assert running.returncode == 0, stderr
    assert f"inferencenode/{name} drained" in stdout
    assert f"{ns}/chat: Ready: 2/2 replicas ready; {name}: draining" in stderr


def test_leave_reports_while_it_drains_as_the_plugin_does(
    cluster: controlplane.ControlPlane, tmp_path: Path
) -> None:
    """`mlxfleet-agent leave` drained silently (issue 28 item 4): it now says what is still on
    the node and why, every `--report-every` seconds, and on a timeout what to do."""
    ns, name = f"leave-{secrets.token_hex(3)}", f"mac-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", ns)
    node(cluster, name)
    apply(cluster, {
        "apiVersion": resources.API_VERSION, "kind": "ModelDeployment",
        "metadata": {"name": "chat", "namespace": ns},
        "spec": {"model": {"source": "file:///m"}, "replicas": 2},
    })  # fmt: skip
    placed_on(cluster, ns, [name, "other"], HELD.format(node=name))
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "join.json").write_text(json.dumps({"node": name, "started": False}))
    leave = [
        str(Path(sys.executable).parent / "mlxfleet-agent"), "leave",
        "--kubeconfig", str(cluster.kubeconfig), "--config-dir", str(etc),
        "--unit-dir", str(tmp_path / "units"), "--poll", "0.2",
    ]  # fmt: skip

    out = subprocess.run(
        [*leave, "--timeout", "4", "--report-every", "1.5"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = out.stderr.splitlines()
    heads = [line for line in lines if f"1 replica(s) still on {name}: {ns}/chat" in line]
    assert len(heads) >= 3, out.stderr  # at 0 s, then every 1.5 s with the time
    assert "[   0s]" in heads[0]
    why = f"       {ns}/chat: Ready: {HELD.format(node=name)}"
    assert any(line.endswith(why) for line in lines), out.stderr
    assert f"drain {name}: timed out after 4s with {ns}/chat still there" in out.stderr
    assert any("to let them move" in line for line in lines), out.stderr
    assert (etc / "join.json").exists()  # nothing removed: the Mac has not left

    # room appears: the replica moves, and leave finishes
    running = subprocess.Popen(leave, stderr=subprocess.PIPE, text=True)
    guard = threading.Timer(60, running.kill)
    guard.start()
    try:
        assert running.stderr is not None
        seen = [running.stderr.readline() for _ in range(3)]  # cordoned, then what and why
        placed_on(cluster, ns, ["other", "third"], "2/2 replicas ready")
        _, rest = running.communicate(timeout=30)
    finally:
        guard.cancel()
        running.kill()
    stderr = "".join(seen) + rest
    assert running.returncode == 0, stderr
    assert f"{ns}/chat: Ready: {HELD.format(node=name)}" in stderr
    assert f"drained {name}" in stderr
    assert f"{name} left the fleet" in stderr
