"""A replica held by a long prompt leaves routing, and comes back once its client hangs up: the
real control plane, operator, two agents with mlx-lm (`--busy-after-s 2`, `--hung-up-grace-s 2`),
the gateway, the openai client and `kubectl mlxfleet`.

A 12k-token prompt with a `seed` (mlx-lm processes such a prompt alone, minutes on this box, and
cannot be interrupted) goes through the gateway to one replica. Past 2 s its agent reports the
slot busy; the operator marks that placement not ready with the reason (`kubectl mlxfleet status`
and `top` show it, the gateway logs it) and the gateway sends the next requests to the other
replica only. The client
hangs up: within seconds the agent restarts that backend and the replica serves again.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_operator.dev import controlplane
from tests.e2e import gwfleet
from tests.e2e.conftest import BIN, wait_for
from tests.support import gateway as gws

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]
SENTENCE = "The quick brown fox jumps over the lazy dog. "  # 12 tokens of the dev tokenizer
BUSY = "busy, out of routing"


@pytest.fixture(scope="module")
def fleet(
    cluster: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory, model_a: Path
) -> Iterator[gwfleet.Fleet]:
    root = tmp_path_factory.mktemp("busy-e2e")
    flags = ("--busy-after-s", "2", "--hung-up-grace-s", "2")
    with gwfleet.fleet(cluster, root, model_a.parent, agent_flags=flags) as fl:
        fl.deploy("long", model_a, replicas=2, contextLength=16384, maxConcurrency=4)
        fl.wait_ready("long", replicas=2)
        fl.gateway = gws.start_gateway(
            cluster.gateway_kubeconfig,
            root / "gateway",
            anonymous=True,
        )
        yield fl


def _placements(fl: gwfleet.Fleet) -> list[dict[str, Any]]:
    out = fl.cluster.kubectl("get", "mdep", "long", "-n", fl.ws.namespace, "-o", "json")
    found: list[dict[str, Any]] = json.loads(out.stdout)["status"]["placements"]
    return found


def _plugin(fl: gwfleet.Fleet, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    done = subprocess.run(
        [str(BIN / "kubectl-mlxfleet"), *args, "--kubeconfig", str(fl.cluster.kubeconfig)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _served_by(fl: gwfleet.Fleet) -> str:
    assert fl.gateway is not None
    raw = fl.gateway.openai(timeout=60).completions.with_raw_response.create(
        model="long", prompt="hi", max_tokens=2
    )
    return str(raw.headers["x-mlxfleet-backend"]).rsplit("@", 1)[1]


def test_a_busy_replica_leaves_routing_and_comes_back_after_its_client_hangs_up(
    fleet: gwfleet.Fleet,
) -> None:
    fl = fleet
    assert fl.gateway is not None
    host, port = fl.gateway.url.removeprefix("http://").split(":")
    body = json.dumps(
        {
            "model": "long",
            "prompt": SENTENCE * 1000,
            "max_tokens": 8,
            "seed": 7,
            "stream": True,
        }
    ).encode()
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )

    def busy_node() -> str | None:
        for p in _placements(fl):
            if not p["ready"] and (p.get("message") or "").startswith(BUSY):
                return str(p["node"])
        return None

    victim = wait_for("a placement busy, out of routing", busy_node, timeout=60)
    [message] = [p["message"] for p in _placements(fl) if p["node"] == victim]
    assert "first token" in message
    # the gateway routes around it: every request goes to the other replica, and is served
    served = [_served_by(fl) for _ in range(6)]
    assert victim not in served, served
    logged = [json.loads(x) for x in fl.gateway.log().splitlines() if "out of routing" in x]
    assert [(r["replica"], r["why"][: len(BUSY)]) for r in logged] == [
        (f"{fl.ws.namespace}/long@{victim}", BUSY)
    ], logged
    status = _plugin(fl, "status", "-n", fl.ws.namespace)
    assert BUSY in status
    top = _plugin(fl, "top", "-n", fl.ws.namespace, "--interval", "1")
    assert f"not routed {victim}: {BUSY}" in top

    sock.close()  # the client hangs up while mlx-lm still processes the prompt
    hung_up = time.monotonic()

    def back() -> bool:
        return all(p["ready"] for p in _placements(fl))

    wait_for("the replica back in routing", back, timeout=90)
    took = time.monotonic() - hung_up
    print(f"\nreplica back in routing {took:.1f}s after the client hung up")
    assert took < 60, took
    [placement] = [p for p in _placements(fl) if p["node"] == victim]
    assert placement["ready"]
    seen = {_served_by(fl) for _ in range(20)}
    assert victim in seen, seen  # routed to again
