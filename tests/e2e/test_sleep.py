"""Scale to zero, load on demand, scale on load (issue 24), with real parts only: the control
plane, the operator, three agents with mlx-lm, two gateway replicas as the gateway's own
ServiceAccount, and openai clients.

- `minReplicas: 0`, `idleTimeout: 15s`: after 15 s without requests the backend process is gone,
  the node's used memory is back in its status, the deployment is Ready with reason Sleeping
  (kstatus Current, the Argo CD check Healthy); bursts of concurrent clients (streaming and not,
  through both gateways) are served after a cold start with `x-mlxfleet-cold-start-ms`; 0 failed
  requests over 5 sleep/wake cycles.
- `minReplicas: 1`, `maxReplicas: 3`: a sustained queue scales it out to 3 and, once the load
  stops, back to 1, without oscillating (the Scaled Events are counted).
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest

from mlxfleet_operator.dev import controlplane
from tests.e2e import gwfleet
from tests.e2e.conftest import Agent, condition, wait_for
from tests.support import argocd
from tests.support import gateway as gws
from tests.support.tools import Kstatus

pytestmark = [pytest.mark.cluster, pytest.mark.mlx, pytest.mark.slow, pytest.mark.tools]
IDLE_S = 15
CYCLES = 5
UP_WINDOW_S, DOWN_WINDOW_S = 2, 10
COLD_HEADER = "x-mlxfleet-cold-start-ms"


@dataclass
class Setup:
    fleet: gwfleet.Fleet
    gateways: list[gws.Gateway]
    key: str


@pytest.fixture(scope="module")
def setup(
    cluster: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory, model_a: Path
) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("sleep-e2e")
    flags = (
        "--scale-up-window", str(UP_WINDOW_S),
        "--scale-down-window", str(DOWN_WINDOW_S),
        "--demand-namespace", "mlxfleet-system",
    )  # fmt: skip
    with gwfleet.fleet(
        cluster, root, model_a.parent, agents=("n1", "n2", "n3"), operator_flags=flags
    ) as fl:
        key = fl.key(f"{fl.ws.label}-sleep")
        gateways = [
            gws.start_gateway(
                cluster.gateway_kubeconfig,
                root / f"gateway-{name}",
                extra=["--name", f"{fl.ws.label}-{name}", "--cold-start-timeout-s", "90"],
            )
            for name in ("a", "b")
        ]
        fl.gateway = gateways[0]
        try:
            for gw in gateways:
                gw.wait_for("the key", lambda gw=gw: _knows(gw, key), timeout=60)
            yield Setup(fl, gateways, key)
        finally:
            gateways[1].stop()


def _knows(gw: gws.Gateway, key: str) -> bool:
    try:
        gw.openai(api_key=key).models.list()
    except openai.AuthenticationError:
        return False
    return True


def _mdep(fl: gwfleet.Fleet, name: str) -> dict[str, Any]:
    out = fl.cluster.kubectl("get", "mdep", name, "-n", fl.ws.namespace, "-o", "json")
    return dict(json.loads(out.stdout))


def _ask(gw: gws.Gateway, key: str, model: str, n: int, *, stream: bool) -> dict[str, Any]:
    """One request; what the test checks of it (never raises: a failure is recorded)."""
    t0 = time.monotonic()
    client = gw.openai(api_key=key, timeout=120)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=model,
            messages=[{"role": "user", "content": f"hello {n}"}],
            max_tokens=8,
            stream=stream,
        )
        parsed = raw.parse()
        if stream:
            with parsed as chunks:  # type: ignore[union-attr]
                finish = [c.choices[0].finish_reason for c in chunks if c.choices]
            assert finish, "stream without a choice"
            assert finish[-1] is not None, "stream ended without a finish reason"
        cold = raw.headers.get(COLD_HEADER)
        return {"ok": True, "cold_ms": float(cold) if cold else None, "s": time.monotonic() - t0}
    except Exception as exc:  # every failure is recorded, whatever its type
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        client.close()


def _burst(s: Setup, model: str, size: int) -> list[dict[str, Any]]:
    """`size` concurrent clients at once, half streaming, alternating between the gateways."""
    with concurrent.futures.ThreadPoolExecutor(size) as pool:
        futures = [
            pool.submit(_ask, s.gateways[i % 2], s.key, model, i, stream=i % 2 == 0)
            for i in range(size)
        ]
        return [f.result() for f in futures]


def _backends(agent: Any) -> list[psutil.Process]:
    """The agent's mlx_lm backend processes still alive."""
    assert agent.proc is not None
    try:
        kids = psutil.Process(agent.proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in kids:
        try:
            if (
                p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE
                and "mlx_lm" in " ".join(p.cmdline())
            ):
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def _used_bytes(fl: gwfleet.Fleet, node: str) -> int:
    out = fl.cluster.kubectl("get", "inferencenode", node, "-o", "json")
    return int(json.loads(out.stdout)["status"]["memory"].get("usedBytes") or 0)


def test_it_sleeps_when_idle_and_wakes_on_demand_without_failing_a_request(
    setup: Setup, kstatus: Kstatus, model_a: Path
) -> None:
    fl = setup.fleet
    fl.deploy(
        "sleepy",
        model_a,
        replicas=1,
        minReplicas=0,
        idleTimeout=f"{IDLE_S}s",
        maxConcurrency=4,
    )
    fl.wait_ready("sleepy")
    first = _mdep(fl, "sleepy")
    assert first["status"]["desiredReplicas"] == 1
    results: list[dict[str, Any]] = _burst(setup, "sleepy", 2)  # warm: the idle clock starts
    last_request = time.monotonic()
    cold: list[float] = []
    for cycle in range(CYCLES):
        # the requests were served before the operator's next poll marks the replica ready
        (placed,) = wait_for(
            f"cycle {cycle}: the replica ready in status",
            lambda: [p for p in _mdep(fl, "sleepy")["status"]["placements"] if p["ready"]],
            timeout=30,
        )
        node, agent = placed["node"], fl.nodes[placed["node"]]
        assert _backends(agent), "a serving replica runs an mlx_lm backend"
        used = _used_bytes(fl, node)
        assert used > 0

        def asleep() -> dict[str, Any] | None:
            found = _mdep(fl, "sleepy")
            ready = condition(found, "Ready")
            return found if ready.get("reason") == "Sleeping" else None

        slept = wait_for(f"cycle {cycle}: Sleeping", asleep, timeout=IDLE_S + 30)
        waited = time.monotonic() - last_request
        assert waited >= IDLE_S - 1, f"asleep after {waited:.1f}s, before idleTimeout"
        assert slept["status"]["desiredReplicas"] == 0
        assert condition(slept, "Ready")["status"] == "True"

        def backend_gone(agent: Agent = agent) -> bool:
            return not _backends(agent)

        def memory_back(node: str = node, used: int = used) -> bool:
            return _used_bytes(fl, node) <= used - 1

        wait_for("backend process gone", backend_gone, timeout=30)
        wait_for("memory back in the node's status", memory_back, timeout=30)
        if cycle == 0:  # Flux's and Argo CD's view of a sleeping deployment
            body = _mdep(fl, "sleepy")
            assert kstatus.judge(body)["status"] == "Current"
            assert argocd.health("ModelDeployment", body)[0] == "Healthy"
        burst = _burst(setup, "sleepy", 8)
        results += burst
        cold += [r["cold_ms"] for r in burst if r.get("cold_ms") is not None]
        results += _burst(setup, "sleepy", 8)  # warm now: a second burst right behind
        last_request = time.monotonic()
    failed = [r for r in results if not r["ok"]]
    assert not failed, failed[:3]
    assert len(results) == 2 + CYCLES * 16
    assert len(cold) >= CYCLES, "each wake's held requests say they waited for a cold start"
    assert all(ms > 0 for ms in cold)
    events = _events(fl, "sleepy")
    assert [e for e in events if e[0] == "Sleeping"][:CYCLES]
    assert len([e for e in events if e[0] == "Woken"]) >= CYCLES


def _events(fl: gwfleet.Fleet, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the deployment's scale Events, oldest first."""
    out = fl.cluster.kubectl(
        "get", "events", "-n", fl.ws.namespace,
        "--field-selector", f"involvedObject.name={name}", "-o", "json",
    )  # fmt: skip
    items = json.loads(out.stdout)["items"]
    items.sort(key=lambda e: e.get("firstTimestamp") or e.get("eventTime") or "")
    return [
        (e["reason"], e["message"]) for e in items if e["reason"] in ("Scaled", "Sleeping", "Woken")
    ]


def test_a_sustained_queue_scales_out_to_max_and_back_without_oscillating(
    setup: Setup, model_a: Path
) -> None:
    fl = setup.fleet
    fl.deploy("busy", model_a, replicas=1, minReplicas=1, maxReplicas=3, maxConcurrency=2)
    fl.wait_ready("busy")
    load = gwfleet.GatewayLoad(
        setup.gateways[0].base_url, setup.key, "busy", streams=6, whole=4, max_tokens=48
    )
    seen: list[int] = []

    def desired(want: int) -> bool:
        status = _mdep(fl, "busy")["status"]
        seen.append(int(status.get("desiredReplicas") or 0))
        return seen[-1] == want and int(status.get("readyReplicas") or 0) == want

    with load:
        wait_for("3 replicas under a sustained queue", lambda: desired(3), timeout=120)
        held_at = time.monotonic()
        while time.monotonic() - held_at < 8:  # the load goes on: the count stays
            desired(3)
            time.sleep(0.5)
    stopped = time.monotonic()
    wait_for("back to 1 once the load stopped", lambda: desired(1), timeout=DOWN_WINDOW_S + 60)
    assert time.monotonic() - stopped >= DOWN_WINDOW_S - 1  # the down window held it
    quiet = time.monotonic()
    while time.monotonic() - quiet < 5:
        desired(1)
        time.sleep(0.5)
    assert not load.failed_whole(), load.failed_whole()[:3]
    assert not load.failed_before_start(), load.failed_before_start()[:3]
    counts = [int(m.split(" -> ")[1].split()[0]) for r, m in _events(fl, "busy") if r == "Scaled"]
    peak = counts.index(max(counts))
    assert max(counts) == 3, counts
    assert counts[-1] == 1, counts
    assert counts[: peak + 1] == sorted(counts[: peak + 1]), f"up then down only: {counts}"
    assert counts[peak:] == sorted(counts[peak:], reverse=True), f"up then down only: {counts}"
    assert len(counts) <= 4, f"no flapping: {counts}"
    after_peak = seen[seen.index(3) :]
    assert after_peak == sorted(after_peak, reverse=True), "the count never went back up"
