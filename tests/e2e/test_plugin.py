"""`kubectl mlxfleet` against a live local fleet: the real control plane, operator and agents.

One fleet of two agents and a one-replica deployment walks through every command: status (with
KUBECONFIG only, and --kubeconfig winning over a wrong KUBECONFIG), top after real requests, logs
(the agent's tail, never the prompt), approve on a paused SwapPlan, cordon/uncordon, and drain
moving the replica make-before-break (a ready replica at every observation while it moves),
then a drain with nowhere to go that says why while it waits and gives up with a hint.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import openai
import pytest

from mlxfleet_operator.dev import controlplane
from tests.e2e.conftest import BIN, E2E, Agents, Operator, condition, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]
PROMPT_MARK = "zebra-kumquat-7731"


def plugin(*args: str, kubeconfig: Path | None = None, env_kubeconfig: str | None = None,
           timeout: float = 240) -> subprocess.CompletedProcess[str]:  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if env_kubeconfig is not None:
        env["KUBECONFIG"] = env_kubeconfig
    flags = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    return subprocess.run([str(BIN / "kubectl-mlxfleet"), *args, *flags], capture_output=True,
                          text=True, env=env, timeout=timeout, check=False)  # fmt: skip


def placed(e2e: E2E, name: str) -> list[str]:
    md = e2e.get("mdep", name)
    return [p["node"] for p in md.get("status", {}).get("placements", []) if p.get("ready")]


def test_plugin_commands_on_a_live_fleet(
    cluster: controlplane.ControlPlane, operator: Operator, e2e: E2E, agents: Agents, model_a: Path
) -> None:
    a, b = agents.start("a"), agents.start("b")
    node_a = e2e.register(a)
    e2e.apply(e2e.deployment("chat", model_a, replicas=1, placement={"nodes": [node_a]}))
    wait_for("replica on a", lambda: placed(e2e, "chat") == [node_a])
    node_b = e2e.register(b)
    e2e.apply(e2e.deployment("chat", model_a, replicas=1,
                             placement={"nodes": [node_a, node_b]}))  # fmt: skip
    kc = str(cluster.kubeconfig)

    # status: KUBECONFIG alone; --kubeconfig wins over a wrong KUBECONFIG
    status = plugin("status", "-n", e2e.namespace, env_kubeconfig=kc)
    assert status.returncode == 0, status.stderr
    assert node_a in status.stdout
    assert node_b in status.stdout
    assert f"{e2e.namespace}/chat" in status.stdout
    assert "%" in status.stdout
    assert f"- {node_a}" in status.stdout
    flag = plugin("status", kubeconfig=cluster.kubeconfig, env_kubeconfig="/nonexistent")
    assert flag.returncode == 0
    assert node_a in flag.stdout
    missing = plugin("status", env_kubeconfig="/nonexistent")
    assert missing.returncode == 2
    assert "KUBECONFIG /nonexistent" in missing.stderr

    # top: tokens/s and TTFT from the agents' metrics while requests run
    client = openai.OpenAI(base_url=f"{a.data_url}/v1", api_key="unused", max_retries=0)
    stop = threading.Event()
    failures: list[BaseException] = []

    def load() -> None:
        while not stop.is_set():
            try:
                client.chat.completions.create(
                    model="chat", max_tokens=16,
                    messages=[{"role": "user", "content": f"say {PROMPT_MARK}"}],
                )  # fmt: skip
            except openai.APIError as exc:
                failures.append(exc)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    try:
        top = plugin("top", "-n", e2e.namespace, "--interval", "3", kubeconfig=cluster.kubeconfig)
        assert top.returncode == 0, top.stderr
        (row,) = [
            line for line in top.stdout.splitlines() if line.startswith(f"{e2e.namespace}/chat")
        ]
        tokens_per_s, ttft = row.split()[1:3]
        assert float(tokens_per_s) > 0
        assert ttft.endswith("ms")
    finally:
        stop.set()
        worker.join(timeout=60)
    assert not failures

    # logs: the agent's tail over its control API, with no prompt text
    logs = plugin("logs", node_a, "--tail", "50", kubeconfig=cluster.kubeconfig)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.strip()
    assert PROMPT_MARK not in logs.stdout
    bad = plugin("logs", node_a, "--tail", "0", kubeconfig=cluster.kubeconfig)
    assert bad.returncode == 2
    assert "--tail" in bad.stderr

    # approve: a SwapPlan that waits for approval
    e2e.apply({"apiVersion": "mlxfleet.io/v1alpha1", "kind": "SwapPlan",
               "metadata": {"name": "waiting", "namespace": e2e.namespace},
               "spec": {"deploymentRef": {"name": "absent"}, "target": {"source": "hf://x/y"},
                        "nodes": [node_a], "paused": True}})  # fmt: skip
    approved = plugin("approve", "waiting", "-n", e2e.namespace, kubeconfig=cluster.kubeconfig)
    assert approved.returncode == 0, approved.stderr
    assert "approved" in approved.stdout
    assert e2e.get("swapplan", "waiting")["spec"]["paused"] is False

    # cordon / uncordon
    assert plugin("cordon", node_b, kubeconfig=cluster.kubeconfig).returncode == 0
    assert e2e.get("inode", node_b, namespaced=False)["spec"]["unschedulable"] is True
    assert plugin("uncordon", node_b, kubeconfig=cluster.kubeconfig).returncode == 0
    assert e2e.get("inode", node_b, namespaced=False)["spec"]["unschedulable"] is False

    # drain: the replica moves to b, serving all along (make-before-break)
    client_b = openai.OpenAI(base_url=f"{b.data_url}/v1", api_key="unused", max_retries=0)
    serving: list[int] = []
    done = threading.Event()

    def watch() -> None:  # ready replicas as the drain goes: never 0 (make-before-break)
        while not done.is_set():
            serving.append(len(placed(e2e, "chat")))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        drain = plugin("drain", node_a, "--timeout", "150", kubeconfig=cluster.kubeconfig)
    finally:
        done.set()
        watcher.join(timeout=30)
    assert drain.returncode == 0, drain.stderr
    assert len(serving) > 3, serving
    assert min(serving) >= 1, serving
    assert "still on" in drain.stderr
    assert "drained" in drain.stdout
    assert placed(e2e, "chat") == [node_b]
    reply = client_b.chat.completions.create(
        model="chat", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content is not None
    # drain with nowhere to go (a still drains): the deployment stays Ready and says why, the
    # plugin repeats it while it waits and gives up with what would let the replica move
    stuck = plugin("drain", node_b, "--timeout", "12", "--report-every", "3",
                   kubeconfig=cluster.kubeconfig)  # fmt: skip
    assert stuck.returncode == 1, stuck.stderr
    assert stuck.stderr.count(f"1 replica(s) still on {node_b}: {e2e.namespace}/chat") >= 2
    held = f"{node_b}: draining (spec.drain), its replica stays until another node can take it"
    assert f"{e2e.namespace}/chat: Ready: 1/1 replicas ready; " in stuck.stderr
    assert held in stuck.stderr
    assert "to let them move" in stuck.stderr
    assert held in condition(e2e.get("mdep", "chat"), "Ready")["message"]
    assert placed(e2e, "chat") == [node_b]
    unknown = plugin("drain", "no-such-node", kubeconfig=cluster.kubeconfig)
    assert unknown.returncode == 1
    assert 'InferenceNode "no-such-node" not found' in unknown.stderr
