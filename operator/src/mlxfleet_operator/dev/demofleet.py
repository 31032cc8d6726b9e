"""The processes `make demo` starts beside the control plane, each waited for until it answers.

Tiny models (`mlxfleet-agent make-model`, also laid out as an offline Hugging Face cache so
`hf://mlxfleet-demo/...`, the sources of manifests/samples/demo, resolve), node agents (own state
dir, ports and token; their data planes accept only the fleet credential; the models prefetched
into each cache), the operator as
its ServiceAccount identity and `mlxfleet-gateway` as its own. Every process is spawned in its own
session with its log under `<demo>/logs/`; the caller records the pids (`demo.json`) so
`demo.down` stops them.
May import: the standard library, httpx, dev (controlplane, processes).
Called by: dev.demo.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mlxfleet_operator.dev import controlplane, processes


@dataclass(frozen=True)
class Agent:
    """A running demo agent: its node name, control API URL and token, data-plane port."""

    node: str
    url: str
    token: str
    data_port: int


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _spawn(cmd: list[str], log: Path, *, env: dict[str, str] | None = None) -> int:
    return processes.spawn(cmd, log, env=env).pid


def make_model(out: Path, *, seed: int) -> None:
    """A tiny llama (hidden size 64) at `out`, unless one is there already."""
    if not (out / "config.json").exists():
        subprocess.run(
            [_bin("mlxfleet-agent"), "make-model", "--out", str(out), "--seed", str(seed)],
            check=True,
        )


HF_ORG = "mlxfleet-demo"  # hf://mlxfleet-demo/<model>: the sources of manifests/samples/demo
HF_COMMIT = "0" * 39 + "1"


def hf_cache(hub: Path, models: dict[str, Path]) -> None:
    """Lay `models` (name -> model dir) out as a Hugging Face cache under `hub` (blobs, snapshot
    links, refs/main), so agents run with `HF_HOME` pointing above it and `HF_HUB_OFFLINE=1`
    serve `hf://mlxfleet-demo/<name>` without a hub: the demo samples' sources work here as
    they are, whatever the checkout's path (a `file://` source could not)."""
    for name, model in models.items():
        root = hub / f"models--{HF_ORG}--{name}"
        snapshot = root / "snapshots" / HF_COMMIT
        if (snapshot / "config.json").exists():
            continue
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        snapshot.mkdir(parents=True, exist_ok=True)
        for path in sorted(model.iterdir()):
            data = path.read_bytes()
            blob = root / "blobs" / hashlib.sha256(data).hexdigest()
            blob.write_bytes(data)
            link = snapshot / path.name
            if not link.is_symlink():
                link.symlink_to(Path("..") / ".." / "blobs" / blob.name)
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / "main").write_text(HF_COMMIT)


def hf_env(demo: Path) -> dict[str, str]:
    """The environment of a demo agent: its Hugging Face cache (`hf_cache`), offline."""
    return {"HF_HOME": str(demo / "hf"), "HF_HUB_OFFLINE": "1"}


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


def start_agent(node: str, *, demo: Path, models: Path) -> tuple[Agent, int]:
    """Start the agent of `node` (may serve models under `models`); the agent and its pid. Its
    data plane (loopback) takes only its own key once the operator has sent it."""
    control, data = processes.free_ports(2)
    node_dir = demo / node
    token_file = node_dir / "token"
    if not token_file.exists():
        token_file.parent.mkdir(parents=True, exist_ok=True)
        token_file.write_text(os.urandom(24).hex() + "\n")
        token_file.chmod(0o600)
    pid = _spawn(
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
        ],
        demo / "logs" / f"agent-{node}.log",
        env=hf_env(demo),
    )
    url = f"http://127.0.0.1:{control}"
    token = token_file.read_text().strip()
    return Agent(node=node, url=url, token=token, data_port=data), pid


def prefetch(agent: Agent, sources: list[str]) -> dict[str, Any]:
    """Wait until the agent's control API answers, then put every one of `sources` in its cache;
    the agent's state (`GET /v1/state`)."""
    state = _wait_agent(agent.url, agent.token)
    for source in sources:  # both models in each node's cache (status.cachedModels)
        r = httpx.post(
            f"{agent.url}/v1/models/prefetch",
            json={"source": source},
            headers={"Authorization": f"Bearer {agent.token}"},
            timeout=60,
        )
        r.raise_for_status()
    return state


def start_operator(plane: controlplane.ControlPlane, *, demo: Path, fleet_key: Path) -> int:
    """`mlxfleet-operator` as its ServiceAccount identity (fast heartbeats; it sends each node
    its own keys, derived from the fleet key); its pid."""
    return _spawn(
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
            "--fleet-key-file",
            str(fleet_key),
        ],
        demo / "logs" / "operator.log",
    )


def start_gateway(
    plane: controlplane.ControlPlane, demo: Path, fleet_key: Path, pids: list[int]
) -> str:
    """`mlxfleet-gateway` as its own ServiceAccount (API keys required; its pid appended to
    `pids` at once); its base URL once it is ready."""
    port, metrics_port = processes.free_ports(2)
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
