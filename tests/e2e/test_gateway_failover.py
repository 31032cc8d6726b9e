"""The gateway under failure, with real parts only: control plane, operator, agents with mlx-lm,
the gateway as its own ServiceAccount, and 14 openai clients (8 streaming, 6 not).

- an agent SIGKILLed under load: no non-streaming request fails, no stream that had not started
  fails, streams cut mid-flight are counted apart, and no request started more than 1 s after the
  kill goes to (or is tried on) the dead agent;
- the same with SIGSTOP (a frozen Mac: its kernel still accepts connections);
- a model swap under load through the gateway: 0 failed requests;
- fallback to an external OpenAI-compatible server (a plain `mlx_lm.server`) while the local
  replica is gone, marked so, and traffic returns when the replica is back.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxfleet_operator.dev import controlplane, processes
from tests.e2e import gwfleet
from tests.e2e.conftest import wait_for
from tests.support import gateway as gws
from tests.support.cluster import allow_provider_keys

pytestmark = [pytest.mark.cluster, pytest.mark.mlx, pytest.mark.slow]
ROUTE_AROUND_S = 1.0
STREAM_CUT_S = 3.0


def _report(load: gwfleet.GatewayLoad, label: str, at: float, victim: str) -> dict[str, float]:
    recs = load.snapshot()
    moved = [r for r in recs if r.start < at < r.end and r.ok and f"@{victim}" in "".join(r.tried)]
    figures = {
        "requests": len(recs),
        "moved": len(moved),  # in flight on the victim at the time, answered by another replica
        "moved_within_s": round(max((r.end - at for r in moved), default=0.0), 3),
        "after": sum(r.start >= at for r in recs),
        "failed_whole": len(load.failed_whole()),
        "failed_before_start": len(load.failed_before_start()),
        "cut": len(load.cut()),
        "route_around_s": round(load.last_touch(f"@{victim}", after=at), 3),
    }
    print(f"\n{label}: {json.dumps(figures)}")
    return figures


def _serving_fleet(
    cluster: controlplane.ControlPlane, root: Path, model: Path
) -> contextlib.AbstractContextManager[gwfleet.Fleet]:
    @contextlib.contextmanager
    def run() -> Iterator[gwfleet.Fleet]:
        with gwfleet.fleet(cluster, root, model.parent) as fl:
            fl.deploy("chat", model, replicas=2, maxConcurrency=8)
            fl.wait_ready("chat", replicas=2)
            fl.gateway = gws.start_gateway(
                cluster.gateway_kubeconfig,
                root / "gateway",
                anonymous=True,
                extra=["--stream-cut-after-s", str(STREAM_CUT_S)],
            )
            yield fl

    return run()


def _assert_failover(load: gwfleet.GatewayLoad, figures: dict[str, float]) -> None:
    assert load.failed_whole() == [], load.failed_whole()[:3]
    assert load.failed_before_start() == [], load.failed_before_start()[:3]
    assert figures["after"] > 20, figures  # traffic went on after the failure
    assert figures["route_around_s"] <= ROUTE_AROUND_S, figures


def _under_load(
    fl: gwfleet.Fleet, label: str, *, freeze: bool, after_s: float
) -> tuple[gwfleet.GatewayLoad, float, str]:
    """14 openai clients on `chat`; then n1 is SIGKILLed or SIGSTOPped; report the figures."""
    assert fl.gateway is not None
    victim = fl.node("n1")
    load = gwfleet.GatewayLoad(fl.gateway.base_url, "anonymous", "chat")
    with load:
        load.wait_count(30, after=0.0)
        assert any(r.touched(f"@{victim}") for r in load.snapshot())
        at = time.monotonic()
        (fl.nodes[victim].freeze if freeze else fl.nodes[victim].kill)()
        time.sleep(after_s)
    _assert_failover(load, _report(load, label, at, victim))
    return load, at, victim


def test_a_sigkilled_agent_stops_getting_requests_within_a_second(
    cluster: controlplane.ControlPlane, tmp_path: Path, model_a: Path
) -> None:
    with _serving_fleet(cluster, tmp_path, model_a) as fl:
        _under_load(fl, "SIGKILL", freeze=False, after_s=6)
        assert fl.gateway is not None
        assert fl.gateway.proc.poll() is None


def test_a_frozen_agent_stops_getting_requests_within_a_second(
    cluster: controlplane.ControlPlane, tmp_path: Path, model_a: Path
) -> None:
    with _serving_fleet(cluster, tmp_path, model_a) as fl:
        assert fl.gateway is not None
        try:
            load, frozen, victim = _under_load(fl, "SIGSTOP", freeze=True, after_s=STREAM_CUT_S + 4)
        finally:
            fl.nodes[fl.node("n1")].thaw()
        # streams that were mid-flight on the frozen agent were cut after STREAM_CUT_S, apart
        assert all(r.end - frozen >= STREAM_CUT_S - 0.5 for r in load.cut())
        # thawed, it answers probes again and gets traffic back
        back = time.monotonic()
        with gwfleet.GatewayLoad(
            fl.gateway.base_url, "anonymous", "chat", streams=2, whole=2
        ) as again:
            wait_for(
                "traffic back on the thawed agent",
                lambda: any(
                    r.ok and r.touched(f"@{victim}") and r.start > back for r in again.snapshot()
                ),
                timeout=60,
                interval=0.2,
            )
        assert again.failed_whole() == []


def test_a_swap_under_load_through_the_gateway_fails_nothing(
    cluster: controlplane.ControlPlane, tmp_path: Path, model_a: Path, model_b: Path
) -> None:
    with _serving_fleet(cluster, tmp_path, model_a) as fl:
        assert fl.gateway is not None
        load = gwfleet.GatewayLoad(fl.gateway.base_url, "anonymous", "chat", streams=4, whole=4)
        with load:
            load.wait_count(20, after=0.0)
            fl.ws.kubectl(
                "patch",
                "mdep",
                "chat",
                "-n",
                fl.ws.namespace,
                "--type=merge",
                "-p",
                json.dumps({"spec": {"model": {"source": f"file://{model_b}"}}}),
            )

            def completed() -> bool:
                plans = fl.ws.list("swapplans")
                return bool(plans) and all(
                    (p.get("status") or {}).get("phase") == "Completed" for p in plans
                )

            wait_for("SwapPlan Completed", completed, timeout=300)
            time.sleep(2)
        recs = load.snapshot()
        failed = [r for r in recs if not r.ok]
        print(f"\nswap: {len(recs)} requests, {len(failed)} failed")
        assert len(recs) > 40
        assert failed == []


@contextlib.contextmanager
def mlx_lm_server(model: Path, log: Path) -> Iterator[str]:
    """A plain `mlx_lm.server`: an OpenAI-compatible server outside the fleet."""
    (port,) = processes.free_ports(1)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlx_lm",
                "server",
                "--model",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:

        def answers() -> bool:
            try:
                r = httpx.post(
                    url + "/chat/completions",
                    timeout=30,
                    json={
                        "model": str(model),
                        "max_tokens": 1,
                        "messages": [{"role": "user", "content": "hi"}],
                    },
                )
                return r.status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("mlx_lm.server answers", answers, timeout=120)
        yield url
    finally:
        proc.send_signal(2)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_fallback_to_an_external_server_and_back(
    cluster: controlplane.ControlPlane, tmp_path: Path, model_a: Path, model_b: Path
) -> None:
    with (
        gwfleet.fleet(cluster, tmp_path, model_a.parent) as fl,
        mlx_lm_server(model_b, tmp_path / "external.log") as external,
    ):
        local = fl.node("n1")
        fl.deploy("local", model_a, replicas=1, placement={"nodes": [local]})
        fl.wait_ready("local")
        allow_provider_keys(cluster, f"{fl.ws.label}-provider")  # operator.providerKeySecrets
        fl.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "mlxfleet.io/provider-key",
                "metadata": {
                    "name": f"{fl.ws.label}-provider",
                    "namespace": "mlxfleet-system",
                    "annotations": {
                        "mlxfleet.io/allowed-namespaces": fl.ws.namespace,
                        # the owner allows this plain-http loopback server, and nothing else
                        "mlxfleet.io/allowed-urls": external,
                    },
                },
                "stringData": {"apiKey": "provider-secret"},
            }
        )
        fl.route(
            "assist",
            {
                "rules": [{"name": "default", "backends": [{"deployment": "local"}]}],
                "fallback": {
                    "when": ["Unavailable", "Failed"],
                    "backends": [
                        {
                            "name": "outside",
                            "external": {
                                "url": external,
                                "model": "default_model",
                                "apiKeySecretRef": {"name": f"{fl.ws.label}-provider"},
                            },
                        }
                    ],
                },
            },
        )
        fl.gateway = gws.start_gateway(
            cluster.gateway_kubeconfig,
            tmp_path / "gateway",
            anonymous=True,
        )
        wait_for(
            "route status Ready",
            lambda: (
                (fl.ws.get("mroute", "assist").get("status") or {}).get("backendsReady") == "2/2"
            ),
            timeout=60,
        )
        load = gwfleet.GatewayLoad(fl.gateway.base_url, "anonymous", "assist", streams=3, whole=3)
        with load:
            load.wait_count(10, after=0.0)
            assert all("@" + local in (r.backend or "") for r in load.snapshot() if r.ok)
            killed = time.monotonic()
            fl.nodes[local].kill()
            wait_for(
                "answers from the fallback",
                lambda: (
                    sum(
                        r.ok and r.backend == "outside" and r.start > killed
                        for r in load.snapshot()
                    )
                    >= 10
                ),
                timeout=60,
                interval=0.2,
            )
            marked = [r for r in load.snapshot() if r.backend == "outside"]
            assert all(r.fallback in ("Unavailable", "Failed") for r in marked)
            fl.nodes[local].start()  # same state: the agent restores its slot
            restarted = time.monotonic()
            wait_for(
                "traffic back on the local replica",
                lambda: (
                    sum(
                        r.ok and "@" + local in (r.backend or "") and r.start > restarted
                        for r in load.snapshot()
                    )
                    >= 5
                ),
                timeout=180,
                interval=0.2,
            )
        print(
            f"\nfallback: {len(marked)} requests served outside; local again "
            f"{time.monotonic() - restarted:.1f}s after the agent restarted"
        )
        assert load.failed_whole() == []
        assert load.failed_before_start() == []


def test_a_fallback_whose_provider_key_secret_is_missing_is_not_ready_and_says_so(
    cluster: controlplane.ControlPlane, tmp_path: Path, model_a: Path
) -> None:
    """The new-user repro: a route's external fallback names a provider-key Secret that is not
    there. Its status (the operator, as its own identity) says so, the gateway answers 503
    `backend_unusable`, and once the Secret exists (type and namespace right) the backend is
    ready."""
    with gwfleet.fleet(cluster, tmp_path, model_a.parent, agents=()) as fl:
        key = f"{fl.ws.label}-absent"
        allow_provider_keys(cluster, key)  # listed in operator.providerKeySecrets, not there yet
        fl.deploy("local", model_a, replicas=1)  # no node may take it: never ready
        external = {"url": "http://127.0.0.1:9/v1", "model": "m", "apiKeySecretRef": {"name": key}}
        fallback = {"name": "cloud", "external": external}
        fl.route(
            "chat",
            {
                "rules": [
                    {"name": "code", "backends": [{"deployment": "local"}]},
                    {"name": "default", "backends": [{"deployment": "local"}]},
                ],
                "fallback": {"backends": [fallback]},
            },
        )

        def status() -> dict[str, Any]:
            return fl.ws.get("mroute", "chat").get("status") or {}

        def cloud() -> dict[str, Any]:
            return next((b for b in status().get("backends", []) if b["name"] == "cloud"), {})

        wait_for(
            "cloud not ready", lambda: "not found" in (cloud().get("message") or ""), timeout=60
        )
        assert cloud()["ready"] is False
        assert f"provider-key Secret {key} not found" in cloud()["message"]
        assert status()["backendsReady"] == "0/3"
        assert {e["percent"] for e in status()["split"]} == {0.0}
        ready = {c["type"]: c for c in status()["conditions"]}["Ready"]
        assert ready["reason"] == "BackendNotFound"
        assert ready["message"].count("provider-key Secret") == 1, ready["message"]

        fl.gateway = gws.start_gateway(
            cluster.gateway_kubeconfig,
            tmp_path / "gateway",
            anonymous=True,
        )
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(f"{fl.gateway.base_url}/chat/completions", json=body, timeout=30)
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "backend_unusable"

        fl.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "mlxfleet.io/provider-key",
                "metadata": {
                    "name": key,
                    "namespace": "mlxfleet-system",
                    "annotations": {
                        "mlxfleet.io/allowed-namespaces": fl.ws.namespace,
                        "mlxfleet.io/allowed-urls": "http://127.0.0.1:9/v1",
                    },
                },
                "stringData": {"apiKey": "provider-secret"},
            }
        )
        wait_for("cloud ready", lambda: cloud().get("ready") is True, timeout=60)
        ready = {c["type"]: c for c in status()["conditions"]}["Ready"]
        assert (status()["backendsReady"], ready["reason"]) == ("1/3", "FallbackOnly")
