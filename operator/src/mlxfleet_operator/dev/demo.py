"""`make demo`: the whole product on one machine, with real parts only.

Starts the loopback control plane (CRDs + RBAC), generates two tiny models, starts two node agents
(own state dirs, ports and tokens; their data planes accept only the fleet credential), registers
them as InferenceNodes (tokens in Secrets), starts the operator and `mlxfleet-gateway` as their own
ServiceAccount identities, mints an API key (a Secret holding its hash), applies a 2-replica
ModelDeployment, waits for Ready, sends chat completions through the gateway with the `openai`
client, changes the model while a load generator streams through the gateway, follows the
SwapPlan to Completed and counts failed requests. Records the gateway's base URL as `gateway` in
`.dev/demo/demo.json`. Leaves it all running; `down()` (make demo-down) stops it.

May import: dev (controlplane, credentials, processes), httpx, openai (dev dependency, lazily).
Called by: dev.cli.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from mlxfleet_operator.api import resources
from mlxfleet_operator.dev import controlplane, credentials, processes

NAMESPACE = "default"
DEPLOYMENT = "tiny-chat"
NODES = ("mac-mini-1", "mac-mini-2")
STATE = "demo.json"


def say(text: str) -> None:
    print(f"\033[1m==> {text}\033[0m", flush=True)


@dataclass
class LoadResult:
    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _spawn(cmd: list[str], log: Path) -> int:
    return processes.spawn(cmd, log).pid


def _wait_agent(url: str, token: str, *, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            r = httpx.get(
                f"{url}/v1/state", headers={"Authorization": f"Bearer {token}"}, timeout=5
            )
            if r.status_code == 200:
                state: dict[str, Any] = r.json()
                return state
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            last = str(exc)
        time.sleep(0.5)
    raise RuntimeError(f"agent {url} did not answer within {timeout:.0f}s: {last}")


def _node_manifest(name: str, url: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "InferenceNode",
        "metadata": {"name": name, "labels": {"mlxfleet.io/demo": "true"}},
        "spec": {
            "agent": {
                "url": url,
                "tokenSecretRef": {"name": f"{name}-agent", "namespace": "mlxfleet-system"},
            },
            "hardware": {"chip": f"Apple M4 Pro (demo {index})", "memory": "64Gi"},
            "cost": {
                "purchasePriceUSD": 2199,
                "amortizationMonths": 36,
                "idlePowerWatts": 7,
                "busyPowerWatts": 65,
                "electricityUSDPerKWh": 0.25,
            },
        },
    }


def _deployment_manifest(source: str) -> dict[str, Any]:
    return {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "model": {"source": source, "servedName": DEPLOYMENT},
            "replicas": 2,
            "contextLength": 2048,
            "maxConcurrency": 4,
            "placement": {"nodeSelector": {"mlxfleet.io/demo": "true"}, "strategy": "Spread"},
            "server": {"maxTokens": 64},
            "swap": {"strategy": "Auto", "drainTimeoutSeconds": 60},
        },
    }


def _apply(plane: controlplane.ControlPlane, obj: dict[str, Any]) -> None:
    plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))


def _get(plane: controlplane.ControlPlane, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(plane.kubectl("get", *args, "-o", "json").stdout)
    return out


def _base_url(endpoint: str) -> str:
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1") else f"{endpoint}/v1"


def _load(
    endpoints: list[str], key: str, stop: threading.Event, result: LoadResult, worker: int
) -> None:
    from openai import OpenAI

    clients = [OpenAI(base_url=_base_url(e), api_key=key, max_retries=0) for e in endpoints]
    i = worker
    while not stop.is_set():
        client = clients[i % len(clients)]
        i += 1
        try:
            finish = None
            stream = client.chat.completions.create(
                model=DEPLOYMENT,
                messages=[{"role": "user", "content": f"Say something, worker {worker}."}],
                max_tokens=24,
                stream=True,
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
            if finish is None:
                raise RuntimeError("stream ended without finish_reason")
            with result.lock:
                result.ok += 1
        except Exception as exc:  # every failure is counted and shown
            with result.lock:
                result.failed += 1
                result.errors.append(f"{type(exc).__name__}: {exc}")


def _wait_plan(plane: controlplane.ControlPlane, *, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        mdep = _get(plane, "mdep", DEPLOYMENT, "-n", NAMESPACE)
        plan_name = (mdep.get("status") or {}).get("swapPlan")
        if plan_name:
            plan = _get(plane, "swp", plan_name, "-n", NAMESPACE)
            status = plan.get("status") or {}
            line = f"SwapPlan {plan_name}: {status.get('phase')} {status.get('progress', '')}"
            if line != shown:
                say(line)
                shown = line
            if status.get("phase") in ("Completed", "Failed", "RolledBack"):
                return plan
        time.sleep(1)
    raise RuntimeError(f"the SwapPlan did not finish within {timeout:.0f}s")


def _api_key(plane: controlplane.ControlPlane) -> str:
    """A fresh API key for the demo: the Secret holds its SHA-256 only (see docs/gateway.md)."""
    key = "mfk-" + secrets.token_urlsafe(32)
    _apply(
        plane,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "mlxfleet.io/api-key",
            "metadata": {"name": "demo-key", "namespace": credentials.OPERATOR_NAMESPACE},
            "stringData": {
                "keyHash": hashlib.sha256(key.encode()).hexdigest(),
                "namespaces": NAMESPACE,
                "team": "demo",
                "owner": "you",
            },
        },
    )
    return key


def _start_gateway(
    plane: controlplane.ControlPlane, demo: Path, fleet_key: Path, pids: list[int]
) -> str:
    """`mlxfleet-gateway` as its own ServiceAccount (API keys required); its base URL."""
    say(f"starting the gateway as {credentials.GATEWAY_USER}")
    port, metrics_port = processes.free_ports(2)
    assert plane.gateway_kubeconfig is not None
    pids.append(
        _spawn(
            [
                _bin("mlxfleet-gateway"),
                "--kubeconfig",
                str(plane.gateway_kubeconfig),
                "--listen",
                f"127.0.0.1:{port}",
                "--metrics-listen",
                f"127.0.0.1:{metrics_port}",
                "--fleet-key-file",
                str(fleet_key),
                "--name",
                "demo",
            ],
            demo / "logs" / "gateway.log",
        )
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return url
        time.sleep(0.3)
    raise RuntimeError(f"the gateway did not become ready; see {demo / 'logs' / 'gateway.log'}")


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

    say("starting the control plane (etcd + kube-apiserver on loopback)")
    plane = controlplane.start(dev / "control-plane")
    for src, name in (
        (plane.kubeconfig, "kubeconfig"),
        (plane.operator_kubeconfig, "operator.kubeconfig"),
        (plane.gateway_kubeconfig, "gateway.kubeconfig"),
    ):
        if src is not None:
            (dev / name).write_bytes(src.read_bytes())
            os.chmod(dev / name, 0o600)
    save()
    fleet_key = demo / "fleet-key"  # the credential agents' data planes accept from the gateway
    if not fleet_key.exists():
        fleet_key.write_text(secrets.token_urlsafe(32) + "\n")
        fleet_key.chmod(0o600)

    say("generating two tiny models (llama, hidden size 64) locally")
    models = demo / "models"
    sources = {}
    for name, seed in (("tiny-a", 1), ("tiny-b", 2)):
        if not (models / name / "config.json").exists():
            subprocess.run(
                [
                    _bin("mlxfleet-agent"),
                    "make-model",
                    "--out",
                    str(models / name),
                    "--seed",
                    str(seed),
                ],
                check=True,
            )
        sources[name] = f"file://{(models / name).resolve()}"

    say("starting two node agents")
    agents = []
    for node in NODES:
        control, data = processes.free_ports(2)
        node_dir = demo / node
        token_file = node_dir / "token"
        if not token_file.exists():
            token_file.parent.mkdir(parents=True, exist_ok=True)
            token_file.write_text(os.urandom(24).hex() + "\n")
            token_file.chmod(0o600)
        pids.append(
            _spawn(
                [
                    _bin("mlxfleet-agent"),
                    "serve",
                    "--state-dir",
                    str(node_dir / "state"),
                    "--models-dir",
                    str(node_dir / "models"),
                    "--allowed-root",
                    str(models),
                    "--control-port",
                    str(control),
                    "--data-port",
                    str(data),
                    "--token-file",
                    str(token_file),
                    "--data-api-keys-file",
                    str(fleet_key),
                ],
                demo / "logs" / f"agent-{node}.log",
            )
        )
        save()
        url = f"http://127.0.0.1:{control}"
        token = token_file.read_text().strip()
        _wait_agent(url, token)
        for source in sources.values():  # both models in each node's cache (status.cachedModels)
            r = httpx.post(
                f"{url}/v1/models/prefetch",
                json={"source": source},
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            )
            r.raise_for_status()
        agents.append((node, url, token, data))
        print(f"    {node}: control {url}, data plane http://127.0.0.1:{data}/v1 (fleet key only)")

    say("registering them as InferenceNodes (tokens in Secrets in mlxfleet-system)")
    for index, (node, url, token, _) in enumerate(agents, start=1):
        _apply(
            plane,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": f"{node}-agent",
                    "namespace": "mlxfleet-system",
                    "labels": {resources.AGENT_CREDENTIALS_LABEL: "true"},
                },
                "stringData": {"token": token},
            },
        )
        _apply(plane, _node_manifest(node, url, index))

    say("starting the operator as system:serviceaccount:mlxfleet-system:mlxfleet-operator")
    pids.append(
        _spawn(
            [
                _bin("mlxfleet-operator"),
                "--kubeconfig",
                str(plane.operator_kubeconfig),
                "--all-namespaces",
                "--standalone",
                "--poll-seconds",
                "2",
                "--misses",
                "3",
                "--failover-delay",
                "10",
            ],
            demo / "logs" / "operator.log",
        )
    )
    save()
    plane.kubectl("wait", "--for=condition=Ready", "inode", "--all", "--timeout=120s")

    say(f"applying ModelDeployment {DEPLOYMENT} (2 replicas, {sources['tiny-a']})")
    _apply(plane, _deployment_manifest(sources["tiny-a"]))
    plane.kubectl(
        "wait",
        "--for=condition=Ready",
        f"mdep/{DEPLOYMENT}",
        "-n",
        NAMESPACE,
        "--timeout=300s",
        timeout=320,
    )
    mdep = _get(plane, "mdep", DEPLOYMENT, "-n", NAMESPACE)
    print(f"    placements: {[p['node'] for p in mdep['status']['placements']]}")

    key = _api_key(plane)
    gateway = _start_gateway(plane, demo, fleet_key, pids)
    state["gateway"] = gateway
    save()
    print(f"    gateway: {gateway}/v1 (its own identity {credentials.GATEWAY_USER})")
    print(f"    API key demo-key (team demo): {key}")
    endpoints = [gateway]

    from openai import OpenAI

    def ask_each() -> None:
        client = OpenAI(base_url=_base_url(gateway), api_key=key, max_retries=0)
        for _ in range(3):
            raw = client.chat.completions.with_raw_response.create(
                model=DEPLOYMENT, messages=[{"role": "user", "content": "Hello!"}], max_tokens=16
            )
            reply = raw.parse()
            tokens = reply.usage.completion_tokens if reply.usage else "?"
            print(
                f"    via {raw.headers.get('x-mlxfleet-backend')}: "
                f"{reply.choices[0].message.content!r} ({tokens} tokens)"
            )

    say("chat completions through the gateway with the openai client")
    ask_each()

    say(f"changing the model to {sources['tiny-b']} while 6 workers stream through the gateway")
    result, stop = LoadResult(), threading.Event()
    workers = [
        threading.Thread(target=_load, args=(endpoints, key, stop, result, w), daemon=True)
        for w in range(6)
    ]
    for w in workers:
        w.start()
    time.sleep(3)
    plane.kubectl(
        "patch",
        "mdep",
        DEPLOYMENT,
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"model": {"source": sources["tiny-b"]}}}),
    )
    plan = _wait_plan(plane, timeout=600)
    time.sleep(3)
    stop.set()
    for w in workers:
        w.join(timeout=60)
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
    say("the same question after the swap (the other model answers now)")
    ask_each()

    say("kubectl get mlxfleet -A")
    print(plane.kubectl("get", "mlxfleet", "-A").stdout)
    for node in NODES:
        cached = (_get(plane, "inode", node).get("status") or {}).get("cachedModels", [])
        print(f"    {node} cachedModels: {[(c.get('source'), c.get('sizeBytes')) for c in cached]}")

    ok = status.get("phase") == "Completed" and result.failed == 0
    if keep_running:
        print(
            "\nEverything is still running. Explore:\n"
            f"  export OPENAI_BASE_URL={gateway}/v1 OPENAI_API_KEY={key}\n"
            '  curl -s $OPENAI_BASE_URL/models -H "Authorization: Bearer $OPENAI_API_KEY"\n'
            f"  export KUBECONFIG={dev / 'kubeconfig'}\n"
            "  kubectl get mlxfleet -A\n"
            f"  kubectl get mdep {DEPLOYMENT} -o yaml    # placements, conditions, endpoint\n"
            "  kubectl get inode -o wide                 # heartbeats, memory, cached models\n"
            "  kubectl get endpointslices -A\n"
            f"  logs: {demo / 'logs'}\n"
            "Stop it all with: make demo-down"
        )
    else:
        down(dev)
    return 0 if ok else 1


def down(dev: Path) -> int:
    """Stop the operator, the agents (they drain and stop their backends) and the control plane."""
    demo = dev / "demo"
    state_file = demo / STATE
    if state_file.exists():
        pids = [int(p) for p in json.loads(state_file.read_text()).get("pids", [])]
        processes.terminate(list(reversed(pids)), grace=30)
        state_file.unlink()
    controlplane.stop(dev / "control-plane")
    for name in ("kubeconfig", "operator.kubeconfig", "gateway.kubeconfig"):
        with contextlib.suppress(FileNotFoundError):
            (dev / name).unlink()
    say("demo stopped (models and agent state kept in .dev/demo; rm -rf .dev to forget them)")
    return 0
