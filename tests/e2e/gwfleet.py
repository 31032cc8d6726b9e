"""A small fleet behind a real gateway for e2e tests: agents (the operator, which holds the fleet
key, sends each its own data-plane key, and their data planes then accept only that), the operator,
InferenceNodes, ModelDeployments, and `mlxfleet-gateway` as its own ServiceAccount; plus
`GatewayLoad`, openai clients (streaming and not) that record, per request, when it started,
whether it failed before or after its first byte, and which replicas served it or were tried first
(`x-mlxfleet-backend`, `x-mlxfleet-tried`).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageParam,
    ChatCompletionStreamOptionsParam,
)

from mlxfleet_operator.dev import controlplane
from tests.e2e.conftest import AGENT_SECRETS, E2E, Agent, Agents, Operator, is_true, wait_for

__all__ = ["Fleet", "GatewayLoad", "Record", "fleet", "wait_for"]
from mlxfleet_agent import contract
from tests.support import gateway as gws


def fingerprint(node: str) -> str:
    """What a node's agent reports once it holds its own keys (from gws.FLEET_KEY)."""
    creds = contract.credentials.for_node((gws.FLEET_KEY,), node)
    return contract.credentials.fingerprint(creds)


def wait_for_own_key(agent: Agent, node: str) -> None:
    """Until the operator has sent the node its own keys (its agent reports their fingerprint)."""
    want = fingerprint(node)
    wait_for(f"{node}'s own keys", lambda: agent.state().get("credentials") == want, timeout=60)


@dataclass
class Fleet:
    cluster: controlplane.ControlPlane
    agents: Agents
    operator: Operator
    ws: E2E
    nodes: dict[str, Agent] = field(default_factory=dict)  # InferenceNode name -> agent
    gateway: gws.Gateway | None = None
    keys: list[tuple[str, str]] = field(default_factory=list)  # API key Secrets (namespace, name)

    def node(self, short: str) -> str:
        return f"{self.ws.label}-{short}"

    def deploy(self, name: str, source: Path, *, namespace: str | None = None, **spec: Any) -> None:
        body = self.ws.deployment(name, source, **spec)
        body["metadata"]["namespace"] = namespace or self.ws.namespace
        self.ws.apply(body)

    def wait_ready(self, name: str, *, namespace: str | None = None, replicas: int = 1) -> None:
        ns = namespace or self.ws.namespace

        def check() -> bool:
            out = self.cluster.kubectl("get", "mdep", name, "-n", ns, "-o", "json", check=False)
            if out.returncode != 0:
                return False
            md = json.loads(out.stdout)
            return is_true(md, "Ready") and (md["status"].get("readyReplicas") or 0) >= replicas

        wait_for(f"{ns}/{name} Ready", check, timeout=240)

    def apply(self, manifest: dict[str, Any]) -> None:
        self.ws.apply(manifest)

    def key(self, name: str, *, namespaces: str | None = None, **fields: Any) -> str:
        key, secret = gws.api_key_secret(name, namespaces=namespaces or self.ws.namespace, **fields)
        self.keys.append((secret["metadata"]["namespace"], name))
        self.ws.apply(secret)
        return key

    def route(self, name: str, spec: dict[str, Any], *, namespace: str | None = None) -> None:
        self.apply(
            {
                "apiVersion": "mlxfleet.io/v1alpha1",
                "kind": "ModelRoute",
                "metadata": {"name": name, "namespace": namespace or self.ws.namespace},
                "spec": spec,
            }
        )


@contextlib.contextmanager
def fleet(
    cluster: controlplane.ControlPlane,
    root: Path,
    models_root: Path,
    *,
    agents: tuple[str, ...] = ("n1", "n2"),
    namespaces: tuple[str, ...] = (),
    agent_flags: tuple[str, ...] = (),
    operator_flags: tuple[str, ...] = (),
    operator_metrics_port: int = 0,
) -> Iterator[Fleet]:
    label = f"g{uuid.uuid4().hex[:8]}"
    ws = E2E(cluster=cluster, namespace=f"gw-{label}", label=label)
    cluster.kubectl("create", "namespace", ws.namespace)
    for extra in namespaces:
        cluster.kubectl("create", "namespace", f"{ws.namespace}-{extra}")
    pool = Agents(root=root / "agents", models_root=models_root)
    key_file = gws.write_fleet_key(root / "operator")
    op = Operator(
        cluster=cluster,
        root=root / "operator",
        flags=["--fleet-key-file", str(key_file)],
        metrics_port=operator_metrics_port,
    )
    fl = Fleet(cluster=cluster, agents=pool, operator=op, ws=ws)
    try:
        for short in agents:
            agent = pool.start(short, flags=list(agent_flags))
            fl.nodes[ws.register(agent)] = agent
        op.start(*operator_flags)
        for name, agent in fl.nodes.items():
            wait_for_own_key(agent, name)
        yield fl
    finally:
        if fl.gateway is not None:
            fl.gateway.stop()
        op.stop()
        for agent in pool.started:
            agent.stop()
        for ns in (ws.namespace, *(f"{ws.namespace}-{e}" for e in namespaces)):
            for kind in ("modeldeployments", "swapplans", "modelroutes"):
                names = cluster.kubectl("get", kind, "-n", ns, "-o", "name", check=False)
                for obj in names.stdout.split():
                    cluster.kubectl(
                        "-n",
                        ns,
                        "patch",
                        obj,
                        "--type=merge",
                        "-p",
                        '{"metadata":{"finalizers":null}}',
                        check=False,
                    )
                    cluster.kubectl("-n", ns, "delete", obj, "--wait=false", check=False)
        for node in ws.nodes:
            cluster.kubectl("delete", "inferencenode", node, "--wait=false", check=False)
            cluster.kubectl("-n", AGENT_SECRETS, "delete", "secret", f"agent-{node}", check=False)
        for secret in ws.secrets:
            cluster.kubectl("-n", AGENT_SECRETS, "delete", "secret", secret, check=False)
        # the keys live in the gateway's namespace, shared by every test's gateway: a key left
        # there (an expired one, one near its limit) shows in the next module's gateway metrics
        for namespace, name in fl.keys:
            cluster.kubectl("-n", namespace, "delete", "secret", name, check=False)


# ---------------------------------------------------------------------------------- load


@dataclass
class Record:
    start: float
    end: float
    stream: bool
    ok: bool
    started: bool  # a stream's first chunk arrived (a whole answer: it arrived)
    backend: str | None = None
    tried: tuple[str, ...] = ()
    fallback: str | None = None
    error: str | None = None
    chunks: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def touched(self, fragment: str) -> bool:
        """This request went to (or was tried on) a replica whose id contains `fragment`."""
        return fragment in (self.backend or "") or any(fragment in t for t in self.tried)


@dataclass
class GatewayLoad:
    base_url: str
    api_key: str
    model: str
    streams: int = 8
    whole: int = 6
    max_tokens: int = 24
    headers: dict[str, str] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _client(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.base_url,
            api_key=self.api_key,
            max_retries=0,
            timeout=60,
            default_headers=self.headers,
        )

    def _one(self, client: openai.OpenAI, stream: bool, n: int) -> Record:
        t0 = time.monotonic()
        rec = Record(start=t0, end=t0, stream=stream, ok=False, started=False)
        messages: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": f"worker says hello {n}"}
        ]
        usage_event: ChatCompletionStreamOptionsParam = {"include_usage": True}
        try:
            raw = client.chat.completions.with_raw_response.create(
                model=self.model,
                messages=messages,
                max_tokens=self.max_tokens,
                stream=stream,
                stream_options=usage_event if stream else openai.omit,
            )
            rec.backend = raw.headers.get("x-mlxfleet-backend")
            rec.tried = tuple(
                t for t in (raw.headers.get("x-mlxfleet-tried") or "").split(",") if t
            )
            rec.fallback = raw.headers.get("x-mlxfleet-fallback")
            parsed = raw.parse()
            if stream:
                assert isinstance(parsed, openai.Stream)
                finish = None
                with parsed as events:
                    for chunk in events:
                        rec.started = True
                        rec.chunks += 1
                        if chunk.usage is not None:
                            rec.prompt_tokens = chunk.usage.prompt_tokens
                            rec.completion_tokens = chunk.usage.completion_tokens
                        if chunk.choices and chunk.choices[0].finish_reason:
                            finish = chunk.choices[0].finish_reason
                if finish is None:
                    raise RuntimeError("stream ended without a finish reason")
            else:
                rec.started = True
                assert isinstance(parsed, ChatCompletion)
                usage = parsed.usage
                if usage is not None:
                    rec.prompt_tokens, rec.completion_tokens = (
                        usage.prompt_tokens,
                        usage.completion_tokens,
                    )
            rec.ok = True
        except Exception as exc:  # every failure is recorded, whatever its type
            rec.error = f"{type(exc).__name__}: {exc}"[:300]
        rec.end = time.monotonic()
        return rec

    def _work(self, stream: bool) -> None:
        with self._client() as client:
            n = 0
            while not self._stop.is_set():
                rec = self._one(client, stream, n)
                n += 1
                with self._lock:
                    self.records.append(rec)
                if not rec.ok:
                    time.sleep(0.05)

    def __enter__(self) -> GatewayLoad:
        for stream in [True] * self.streams + [False] * self.whole:
            t = threading.Thread(target=self._work, args=(stream,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=120)

    # ---- summaries ---------------------------------------------------------------------

    def snapshot(self) -> list[Record]:
        with self._lock:
            return list(self.records)

    def failed_whole(self) -> list[Record]:
        return [r for r in self.snapshot() if not r.stream and not r.ok]

    def failed_before_start(self) -> list[Record]:
        return [r for r in self.snapshot() if r.stream and not r.ok and not r.started]

    def cut(self) -> list[Record]:
        return [r for r in self.snapshot() if r.stream and not r.ok and r.started]

    def last_touch(self, fragment: str, *, after: float) -> float:
        """Seconds after `after` of the last request *started* after it that went to, or was
        tried on, a replica matching `fragment` (0 when none did)."""
        starts = [r.start for r in self.snapshot() if r.start >= after and r.touched(fragment)]
        return max(starts) - after if starts else 0.0

    def wait_count(self, n: int, *, after: float, timeout: float = 60.0) -> None:
        wait_for(
            f"{n} requests finished",
            lambda: sum(r.ok and r.start >= after for r in self.snapshot()) >= n,
            timeout=timeout,
            interval=0.1,
        )
