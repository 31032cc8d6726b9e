"""`make demo`: the whole product on one machine, with real parts only (the story; `up`, `down`).

Starts the loopback control plane (CRDs + RBAC), generates two tiny models, starts two node agents
(own state dirs, ports and tokens; their data planes accept only the fleet credential), registers
them as InferenceNodes (tokens in Secrets), starts the operator and `mlxfleet-gateway` as their own
ServiceAccount identities, mints an API key (a Secret holding its hash), applies a 2-replica
ModelDeployment, waits for Ready, sends chat completions through the gateway with the `openai`
client, changes the model while a load generator streams through the gateway, follows the
SwapPlan to Completed and counts failed requests. Records in `.dev/demo/demo.json` the gateway's
URL (`gateway`, without `/v1`: scripts read it), the base URL for OpenAI clients
(`gateway_openai_base_url`, with `/v1`) and the path of the owner-only file holding the demo API
key (`api_key_file`, `.dev/demo/api-key`), and writes `.dev/demo/env` (PATH with kubectl, the
plugin and helm, KUBECONFIG, OPENAI_BASE_URL / OPENAI_API_KEY) that the closing hints `source`.
Leaves it all running; `down()` (make demo-down) stops it and removes the key and environment
files (the key dies with the control plane).
The parts: `demofleet` (the processes), `demoobjects` (the Kubernetes objects), `demotraffic`
(the openai client and the load generator).

May import: api.resources, dev (controlplane, credentials, processes, demofleet, demoobjects,
demotraffic).
Called by: dev.cli.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from mlxfleet_operator.api import resources
from mlxfleet_operator.dev import (
    controlplane,
    credentials,
    demofleet,
    demoobjects,
    demotraffic,
    processes,
)

STATE = "demo.json"
KEY_FILE = "api-key"


def say(text: str) -> None:
    print(f"\033[1m==> {text}\033[0m", flush=True)


def _wait_plan(plane: controlplane.ControlPlane, *, timeout: float) -> dict[str, Any]:
    """Follow the deployment's SwapPlan (printing each new phase) until it finishes."""
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        mdep = demoobjects.get(plane, "mdep", demoobjects.DEPLOYMENT, "-n", demoobjects.NAMESPACE)
        plan_name = (mdep.get("status") or {}).get("swapPlan")
        if plan_name:
            plan = demoobjects.get(plane, "swp", plan_name, "-n", demoobjects.NAMESPACE)
            status = plan.get("status") or {}
            line = f"SwapPlan {plan_name}: {status.get('phase')} {status.get('progress', '')}"
            if line != shown:
                say(line)
                shown = line
            if status.get("phase") in ("Completed", "Failed", "RolledBack"):
                return plan
        time.sleep(1)
    raise RuntimeError(f"the SwapPlan did not finish within {timeout:.0f}s")


def _start_plane(dev: Path) -> controlplane.ControlPlane:
    """The control plane, its kubeconfigs copied to `dev/` (owner-only)."""
    say("starting the control plane (etcd + kube-apiserver on loopback)")
    plane = controlplane.start(dev / "control-plane")
    for src, name in (
        (plane.kubeconfig, "kubeconfig"),
        (plane.operator_kubeconfig, "operator.kubeconfig"),
        (plane.gateway_kubeconfig, "gateway.kubeconfig"),
    ):
        (dev / name).write_bytes(src.read_bytes())
        os.chmod(dev / name, 0o600)
    return plane


def _fleet_key(demo: Path) -> Path:
    """The fleet key of the gateway and the operator (made once): each node's data plane
    accepts only its own key derived from it, which the operator sends it."""
    fleet_key = demo / "fleet-key"
    if not fleet_key.exists():
        fleet_key.write_text(secrets.token_urlsafe(32) + "\n")
        fleet_key.chmod(0o600)
    return fleet_key


def record_gateway(demo: Path, state: dict[str, Any], *, gateway: str, key: str) -> None:
    """Keep what a user needs to reach the gateway again: its URL (`gateway`, as scripts read
    it), the OpenAI base URL and the demo key in an owner-only file (its path, not the key, in
    `state`)."""
    key_file = demo / KEY_FILE
    credentials.write_private(key_file, key + "\n")
    state["gateway"] = gateway
    state["gateway_openai_base_url"] = f"{gateway}/v1"
    state["api_key_file"] = str(key_file.resolve())


def _swap_under_load(
    plane: controlplane.ControlPlane, *, gateway: str, key: str, source: str
) -> tuple[dict[str, Any], demotraffic.LoadResult]:
    """Change the model to `source` while 6 workers stream; the finished SwapPlan and the counts."""
    say(f"changing the model to {source} while 6 workers stream through the gateway")
    load = demotraffic.Load([gateway], key, model=demoobjects.DEPLOYMENT, workers=6)
    load.start()
    time.sleep(3)
    plane.kubectl(
        "patch",
        "mdep",
        demoobjects.DEPLOYMENT,
        "-n",
        demoobjects.NAMESPACE,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"model": {"source": source}}}),
    )
    plan = _wait_plan(plane, timeout=600)
    time.sleep(3)
    result = load.stop()
    status = plan.get("status") or {}
    for step in status.get("steps", []):
        print(
            f"    step {step.get('node')}: {step.get('phase')} strategy={step.get('strategy')} "
            f"served={step.get('requestsServed')} failed={step.get('requestsFailed')}"
        )
    say(
        f"SwapPlan {status.get('phase')}: load generator {result.ok} requests ok, "
        f"{result.failed} failed"
    )
    for err in result.errors[:5]:
        print(f"    error: {err}")
    return plan, result


def up(dev: Path, *, keep_running: bool = True) -> int:
    """Run the demo; leaves everything running unless keep_running is False."""
    demo = dev / "demo"
    if (demo / STATE).exists():
        say("a previous demo is still recorded; stopping it first")
        down(dev)
    demo.mkdir(parents=True, exist_ok=True)
    pids: list[int] = []
    state: dict[str, Any] = {"pids": pids}

    def save() -> None:
        (demo / STATE).write_text(json.dumps(state, indent=2))

    plane = _start_plane(dev)
    save()
    fleet_key = _fleet_key(demo)

    say("generating two tiny models (llama, hidden size 64) locally")
    models = demo / "models"
    sources = {}
    for name, seed in (("tiny-a", 1), ("tiny-b", 2)):
        demofleet.make_model(models / name, seed=seed)
        sources[name] = f"file://{(models / name).resolve()}"
    demofleet.hf_cache(demo / "hf" / "hub", {name: models / name for name in sources})
    hf_sources = [f"hf://{demofleet.HF_ORG}/{name}" for name in sources]  # manifests/samples/demo

    say("starting two node agents")
    agents = []
    state_of: dict[str, dict[str, Any]] = {}
    for node in demoobjects.NODES:
        agent, pid = demofleet.start_agent(node, demo=demo, models=models)
        pids.append(pid)
        save()
        state_of[node] = demofleet.prefetch(agent, [*sources.values(), *hf_sources])
        agents.append(agent)
        print(
            f"    {node}: control {agent.url}, data plane "
            f"http://127.0.0.1:{agent.data_port}/v1 (its own key only, once the operator "
            "sent it)"
        )

    say(
        "registering them as InferenceNodes (tokens in Secrets in "
        f"{resources.AGENT_SECRETS_NAMESPACE}, which the gateway cannot read)"
    )
    for index, agent in enumerate(agents, start=1):
        demoobjects.apply(plane, demoobjects.agent_secret(agent.node, agent.token))
        memory = int(state_of[agent.node]["memory"]["totalBytes"])  # this machine's, not 64Gi
        demoobjects.apply(plane, demoobjects.node(agent.node, agent.url, index, memory=memory))

    say(f"starting the operator as {credentials.OPERATOR_USER}")
    pids.append(demofleet.start_operator(plane, demo=demo, fleet_key=fleet_key))
    save()
    plane.kubectl("wait", "--for=condition=Ready", "inode", "--all", "--timeout=120s")

    say(f"applying ModelDeployment {demoobjects.DEPLOYMENT} (2 replicas, {sources['tiny-a']})")
    demoobjects.apply(plane, demoobjects.deployment(sources["tiny-a"]))
    plane.kubectl(
        "wait",
        "--for=condition=Ready",
        f"mdep/{demoobjects.DEPLOYMENT}",
        "-n",
        demoobjects.NAMESPACE,
        "--timeout=300s",
        timeout=320,
    )
    mdep = demoobjects.get(plane, "mdep", demoobjects.DEPLOYMENT, "-n", demoobjects.NAMESPACE)
    print(f"    placements: {[p['node'] for p in mdep['status']['placements']]}")

    key = demoobjects.api_key(plane)
    say(f"starting the gateway as {credentials.GATEWAY_USER}")
    gateway = demofleet.start_gateway(plane, demo, fleet_key, pids)
    record_gateway(demo, state, gateway=gateway, key=key)
    save()
    print(f"    gateway: {gateway}/v1 (its own identity {credentials.GATEWAY_USER})")
    print(f"    API key demo-key (team demo): {key} (also in {demo / KEY_FILE})")

    say("chat completions through the gateway with the openai client")
    demotraffic.ask(gateway, key, model=demoobjects.DEPLOYMENT)
    plan, result = _swap_under_load(plane, gateway=gateway, key=key, source=sources["tiny-b"])
    say("the same question after the swap (the other model answers now)")
    demotraffic.ask(gateway, key, model=demoobjects.DEPLOYMENT)

    say("kubectl get mlxfleet -A")
    print(plane.kubectl("get", "mlxfleet", "-A").stdout)
    for node in demoobjects.NODES:
        cached = (demoobjects.get(plane, "inode", node).get("status") or {}).get("cachedModels", [])
        print(f"    {node} cachedModels: {[(c.get('source'), c.get('sizeBytes')) for c in cached]}")

    ok = (plan.get("status") or {}).get("phase") == "Completed" and result.failed == 0
    if keep_running:
        env = write_env(demo, dev=dev, gateway=gateway)
        print(
            "\nEverything is still running. Explore (the environment file puts kubectl, the\n"
            "kubectl-mlxfleet plugin and helm on PATH, and sets KUBECONFIG and the OpenAI\n"
            "variables):\n"
            f"  source {env}\n"
            "  kubectl mlxfleet status                   # the fleet on one screen\n"
            '  curl -s $OPENAI_BASE_URL/models -H "Authorization: Bearer $OPENAI_API_KEY"\n'
            "  kubectl apply -k manifests/samples/demo   # samples made for this fleet\n"
            "  kubectl get mlxfleet -A\n"
            f"  kubectl get mdep {demoobjects.DEPLOYMENT} -o yaml"
            "    # placements, conditions, endpoint\n"
            "  kubectl get inode -o wide                 # heartbeats, memory, cached models\n"
            "  kubectl get endpointslices -A\n"
            f"  logs: {demo / 'logs'}\n"
            "Stop it all with: make demo-down"
        )
    else:
        down(dev)
    return 0 if ok else 1


ENV_FILE = "env"


def write_env(demo: Path, *, dev: Path, gateway: str) -> Path:
    """`.dev/demo/env`, for `source`: PATH with this checkout's console scripts (kubectl,
    kubectl-mlxfleet, mlxfleet-*) and helm when `make tools` built it, KUBECONFIG, and the
    OpenAI client variables (the key read from its owner-only file, never written here)."""
    paths = [str(Path(sys.executable).parent)]
    cache = Path(os.environ.get("MLXFLEET_CACHE") or Path.home() / ".cache" / "mlxfleet")
    paths += [str(h.parent) for h in sorted((cache / "tools").glob("helm-*/helm"))[-1:]]
    lines = [
        "# written by `make demo`: source it in your shell",
        f'export PATH="{":".join(paths)}:$PATH"',
        f"export KUBECONFIG={dev.resolve() / 'kubeconfig'}",
        f"export OPENAI_BASE_URL={gateway}/v1",
        f'export OPENAI_API_KEY="$(cat {(demo / KEY_FILE).resolve()})"',
    ]
    path = demo / ENV_FILE
    path.write_text("\n".join(lines) + "\n")
    return path


def down(dev: Path) -> int:
    """Stop the operator, the agents (they drain and stop their backends) and the control plane."""
    demo = dev / "demo"
    state_file = demo / STATE
    if state_file.exists():
        pids = [int(p) for p in json.loads(state_file.read_text()).get("pids", [])]
        processes.terminate(list(reversed(pids)), grace=30)
        state_file.unlink()
    for name in (KEY_FILE, ENV_FILE):
        with contextlib.suppress(FileNotFoundError):
            (demo / name).unlink()
    controlplane.stop(dev / "control-plane")
    for name in ("kubeconfig", "operator.kubeconfig", "gateway.kubeconfig"):
        with contextlib.suppress(FileNotFoundError):
            (dev / name).unlink()
    say("demo stopped (models and agent state kept in .dev/demo; rm -rf .dev to forget them)")
    return 0
