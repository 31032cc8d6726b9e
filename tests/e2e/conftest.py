"""e2e wiring: real node agents and the real operator as subprocesses, against the session's
real control plane (`cluster`). The operator always runs with the ServiceAccount kubeconfig.

Fixtures: `agents` (start/kill/restart `mlxfleet-agent serve` processes on loopback), `operator`
(start/kill the `mlxfleet-operator` process with short test timings), `e2e` (a namespace, a
per-test node label, and helpers to register nodes and read objects). Everything started here is
stopped at teardown, by process id.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxfleet_operator.api import resources
from mlxfleet_operator.dev import controlplane, processes

BIN = Path(sys.executable).parent
POLL = 1.0
MISSES = 2
FAILOVER_DELAY = 3.0
WAIT = 180.0
AGENT_SECRETS = resources.AGENT_SECRETS_NAMESPACE
CREDENTIALS_LABEL = "mlxfleet.io/agent-credentials"  # docs/operator.md: Secrets the operator uses


def wait_for(
    what: str, check: Callable[[], Any], *, timeout: float = WAIT, interval: float = 0.5
) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def stop_process(
    proc: subprocess.Popen[bytes], *, sig: int = signal.SIGTERM, grace: float = 20.0
) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


# ---------------------------------------------------------------------------------- agents


@dataclass
class Agent:
    name: str
    root: Path
    models_root: Path
    control_port: int
    data_port: int
    token: str
    memory_budget: int | None = None
    tls: tuple[Path, Path, Path] | None = None  # (cert, key, CA) for an https control API
    data_key: str | None = None  # the data plane accepts only this key (--data-api-keys-file)
    env: dict[str, str | None] = field(default_factory=dict)  # None: removed from the env
    flags: list[str] = field(default_factory=list)  # more `serve` flags
    host: str = "127.0.0.1"  # --bind (fault tests: an address in a network namespace)
    prefix: list[str] = field(default_factory=list)  # e.g. `ip netns exec NS`, `faketime ...`
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.control_port}"

    @property
    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=str(self.tls[2])) if self.tls else True

    @property
    def data_url(self) -> str:
        return f"http://{self.host}:{self.data_port}"

    def start(self) -> None:
        (self.root / "state").mkdir(parents=True, exist_ok=True)
        token_file = self.root / "token"
        token_file.write_text(self.token + "\n")
        token_file.chmod(0o600)
        cmd = [
            *self.prefix, str(BIN / "mlxfleet-agent"), "serve", "--bind", self.host,
            "--state-dir", str(self.root / "state"),
            "--models-dir", str(self.root / "models"),
            "--allowed-root", str(self.models_root),
            "--control-port", str(self.control_port),
            "--data-port", str(self.data_port),
            "--token-file", str(token_file),
            "--python", sys.executable,
            "--stop-grace-s", "5",
            "--no-caffeinate",
        ]  # fmt: skip
        if self.memory_budget is not None:
            cmd += ["--memory-budget", str(self.memory_budget)]
        if self.tls is not None:
            cmd += ["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])]
        cmd += self.flags
        if self.data_key is not None:
            keys_file = self.root / "data-keys"
            keys_file.write_text(self.data_key + "\n")
            keys_file.chmod(0o600)
            cmd += ["--data-api-keys-file", str(keys_file)]
        self.starts += 1
        env = {k: v for k, v in {**os.environ, **self.env}.items() if v is not None}
        with (self.root / f"agent-{self.starts}.log").open("wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        wait_for(f"agent {self.name} control API", self.healthy, timeout=60, interval=0.2)

    def healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"agent {self.name} exited: {self.log_tail()}")
        try:
            return (
                httpx.get(f"{self.url}/healthz", timeout=1, verify=self.verify).status_code == 200
            )
        except httpx.HTTPError:
            return False

    def state(self) -> dict[str, Any]:
        r = httpx.get(
            f"{self.url}/v1/state",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=5,
            verify=self.verify,
        )
        r.raise_for_status()
        return dict(r.json())

    def swaps(self, slot: str) -> list[dict[str, Any]]:
        r = httpx.get(
            f"{self.url}/v1/slots/{slot}/swaps",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=5,
        )
        if r.status_code == 404:
            return []
        r.raise_for_status()
        return list(r.json()["items"])

    def kill(self) -> None:
        """SIGKILL the agent's whole process group (its mlx_lm backends too: a lost Mac)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def freeze(self) -> None:
        """SIGSTOP the agent's whole process group: a hung or sleeping Mac (sockets stay open)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)  # a frozen agent cannot stop itself
            stop_process(self.proc, sig=signal.SIGTERM, grace=30)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def log_tail(self, chars: int = 3000) -> str:
        logs = sorted(self.root.glob("agent-*.log"))
        return logs[-1].read_text(errors="replace")[-chars:] if logs else ""


@dataclass
class Agents:
    root: Path
    models_root: Path
    started: list[Agent] = field(default_factory=list)

    def start(
        self,
        name: str,
        *,
        memory_budget: int | None = None,
        tls: tuple[Path, Path, Path] | None = None,
        data_key: str | None = None,
        env: dict[str, str | None] | None = None,
        **more: Any,
    ) -> Agent:
        """Start an agent; `more`: other `Agent` fields (host, prefix, models_root)."""
        control, data = processes.free_ports(2)
        more.setdefault("models_root", self.models_root)
        agent = Agent(
            name=name,
            root=self.root / name,
            control_port=control,
            data_port=data,
            token=secrets.token_urlsafe(24),
            memory_budget=memory_budget,
            tls=tls,
            data_key=data_key,
            env=dict(env or {}),
            **more,
        )
        self.started.append(agent)
        agent.start()
        return agent


@pytest.fixture
def agents(tmp_path: Path, model_a: Path, model_b: Path, broken_model: Path) -> Iterator[Agents]:
    pool = Agents(root=tmp_path / "agents", models_root=model_a.parent)
    yield pool
    for agent in pool.started:
        agent.stop()


# -------------------------------------------------------------------------------- operator


@dataclass
class Operator:
    cluster: controlplane.ControlPlane
    root: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    metrics_port: int = 0
    liveness_port: int = 0
    flags: list[str] = field(default_factory=list)  # on every start (e.g. --fleet-key-file)

    def start(self, *extra: str) -> None:
        cmd = [
            str(BIN / "mlxfleet-operator"),
            "--kubeconfig", str(self.cluster.operator_kubeconfig),
            "--standalone",
            "--poll-seconds", str(POLL),
            "--misses", str(MISSES),
            "--failover-delay", str(FAILOVER_DELAY),
            *self.flags,
            *extra,
        ]  # fmt: skip
        if self.metrics_port:
            cmd += ["--metrics-host", "127.0.0.1", "--metrics-port", str(self.metrics_port)]
        if self.liveness_port:
            cmd += ["--liveness", f"http://127.0.0.1:{self.liveness_port}/healthz"]
        self.starts += 1
        self.root.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        with (self.root / f"operator-{self.starts}.log").open("wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig=signal.SIGINT, grace=20)

    def log(self) -> str:
        logs = sorted(self.root.glob("operator-*.log"))
        return "\n".join(p.read_text(errors="replace") for p in logs)

    def assert_alive(self) -> None:
        assert self.proc is not None
        assert self.proc.poll() is None, f"operator exited:\n{self.log()[-4000:]}"


@pytest.fixture
def operator(cluster: controlplane.ControlPlane, tmp_path: Path) -> Iterator[Operator]:
    metrics_port, liveness_port = processes.free_ports(2)
    op = Operator(
        cluster=cluster,
        root=tmp_path / "operator",
        metrics_port=metrics_port,
        liveness_port=liveness_port,
    )
    op.start()
    yield op
    op.stop()


# --------------------------------------------------------------------------- test workspace


@dataclass
class E2E:
    cluster: controlplane.ControlPlane
    namespace: str
    label: str  # value of the `e2e` label on this test's InferenceNodes
    nodes: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)  # in AGENT_SECRETS

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.cluster.kubectl(*args, input=input, check=check).stdout

    def apply(self, manifest: dict[str, Any]) -> None:
        self.kubectl(
            "apply", "--server-side", "--field-manager=e2e", "-f", "-", input=json.dumps(manifest)
        )

    def get(self, kind: str, name: str, *, namespaced: bool = True) -> dict[str, Any]:
        ns = ["-n", self.namespace] if namespaced else []
        out = self.kubectl("get", kind, name, *ns, "-o", "json", check=False)
        return dict(json.loads(out)) if out.strip() else {}

    def list(self, kind: str) -> list[dict[str, Any]]:
        return list(
            json.loads(self.kubectl("get", kind, "-n", self.namespace, "-o", "json"))["items"]
        )

    def secret(self, name: str, data: dict[str, str], *, labelled: bool = True) -> None:
        """A Secret in the agents' Secret namespace (where InferenceNodes name them by default);
        `labelled`: marked as agent credentials (the only kind the operator sends to an agent)."""
        labels = {CREDENTIALS_LABEL: "true"} if labelled else {}
        self.secrets.append(name)
        self.apply({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": AGENT_SECRETS, "labels": labels},
            "stringData": data,
        })  # fmt: skip

    def node(self, suffix: str, url: str, secret: str, **spec: Any) -> str:
        """An InferenceNode `<label>-<suffix>` for an agent at `url` (token in Secret `secret`),
        labelled for this test only; `spec`: more spec fields."""
        name = f"{self.label}-{suffix}"
        agent: dict[str, Any] = {"url": url, "tokenSecretRef": {"name": secret}}
        if url.startswith("https://"):
            agent["caSecretRef"] = {"name": secret}
        self.apply({
            "apiVersion": "mlxfleet.io/v1alpha1",
            "kind": "InferenceNode",
            "metadata": {"name": name, "labels": {"e2e": self.label}},
            "spec": {"agent": agent, **spec},
        })  # fmt: skip
        self.nodes.append(name)
        return name

    def register(self, agent: Agent, **spec: Any) -> str:
        """Token Secret (and CA) + InferenceNode for `agent`; `spec`: more spec fields."""
        secret = f"agent-{self.label}-{agent.name}"
        data = {"token": agent.token}
        if agent.tls:
            data["ca.crt"] = agent.tls[2].read_text()
        self.secret(secret, data)
        return self.node(agent.name, agent.url, secret, **spec)

    def unplaced(self, name: str) -> dict[str, Any]:
        """A ModelDeployment that needs no agent: 0 replicas, memory given (it still publishes
        its Service and status)."""
        return {
            "apiVersion": "mlxfleet.io/v1alpha1",
            "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "model": {"source": "hf://mlx-community/tiny"},
                "replicas": 0,
                "resources": {"memory": "1Gi"},
                "placement": {"nodeSelector": {"e2e": self.label}},
            },
        }

    def deployment(self, name: str, source: Path, **spec: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": {"source": f"file://{source}"},
            "replicas": 2,
            "contextLength": 1024,
            "maxConcurrency": 4,
            "placement": {"nodeSelector": {"e2e": self.label}},
        }
        body.update(spec)
        return {
            "apiVersion": "mlxfleet.io/v1alpha1",
            "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": body,
        }


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return dict(c)
    return {}


def is_true(obj: dict[str, Any], kind: str) -> bool:
    return condition(obj, kind).get("status") == "True"


@pytest.fixture
def e2e(cluster: controlplane.ControlPlane) -> Iterator[E2E]:
    label = f"t{uuid.uuid4().hex[:8]}"
    ws = E2E(cluster=cluster, namespace=f"e2e-{label}", label=label)
    cluster.kubectl("create", "namespace", ws.namespace)
    yield ws
    # Our finalizer needs the operator; it may be gone by now: strip it, then delete.
    for kind in ("modeldeployments", "swapplans"):
        out = cluster.kubectl(
            "get", kind, "-n", ws.namespace, "-o", "name", check=False
        ).stdout.split()
        for obj in out:
            cluster.kubectl(
                "-n",
                ws.namespace,
                "patch",
                obj,
                "--type=merge",
                "-p",
                '{"metadata":{"finalizers":null}}',
                check=False,
            )
            cluster.kubectl("-n", ws.namespace, "delete", obj, "--wait=false", check=False)
    for node in ws.nodes:
        cluster.kubectl("delete", "inferencenode", node, "--wait=false", check=False)
    for secret in ws.secrets:
        cluster.kubectl("-n", AGENT_SECRETS, "delete", "secret", secret, check=False)
