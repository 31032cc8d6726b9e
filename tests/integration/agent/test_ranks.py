"""Ranks of a sharded group on real agents, driven through the control API (no operator): a rank 0
waiting in the ring's accept for a peer that never comes is stopped as soon as its group is
replaced (a new group id), and the new group of two agents forms and serves; killing the
follower's agent makes rank 0 leave the route and stop (no rank runs alone)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest

from mlxfleet_operator.dev import processes
from tests.integration.agent.conftest import Agent, slot_spec

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]


def _rank(model: Path, group: str, rank: int, ports: list[int]) -> dict[str, Any]:
    shard = {
        "group": group,
        "rank": rank,
        "worldSize": len(ports),
        "hosts": [f"127.0.0.1:{p}" for p in ports],
    }
    return slot_spec(model, "big", shard=shard)


def _pids_of(agent: Agent, group: str) -> list[int]:
    out = []
    for p in agent.backends():
        try:
            if f"hostfile-{group}-" in p.environ().get("MLX_HOSTFILE", ""):
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def test_abandoned_rank_stops_at_once_and_the_new_group_serves(
    agent_factory: Callable[..., Agent], model_a: Path
) -> None:
    leader, follower = agent_factory(), agent_factory()
    lost = processes.free_ports(2)  # rank 1 of this group never starts: rank 0 waits in accept
    assert leader.put_slot("s", _rank(model_a, "g0-1", 0, lost)).status_code == 202
    deadline = time.monotonic() + 60
    while not _pids_of(leader, "g0-1") and time.monotonic() < deadline:
        time.sleep(0.1)
    stale = _pids_of(leader, "g0-1")
    assert stale, leader.log_tail()
    time.sleep(2.0)  # well into the ring's accept
    assert leader.slot("s")["phase"] in ("Loading", "Warming")

    ports = processes.free_ports(2)
    replaced = time.monotonic()
    assert leader.put_slot("s", _rank(model_a, "g0-2", 0, ports)).status_code == 202
    while any(psutil.pid_exists(p) for p in stale) and time.monotonic() - replaced < 10:
        time.sleep(0.05)
    gone_s = time.monotonic() - replaced
    assert not [p for p in stale if psutil.pid_exists(p)], f"abandoned rank still runs {gone_s}"
    assert follower.put_slot("s", _rank(model_a, "g0-2", 1, ports)).status_code == 202
    slot = leader.wait_ready("s")
    assert slot["spec"]["shard"]["group"] == "g0-2"
    reply = leader.openai(timeout=60.0).completions.create(model="big", prompt="hi", max_tokens=4)
    assert reply.choices[0].text is not None
    with pytest.raises(openai.NotFoundError):  # a follower's data plane does not route to it
        follower.openai(timeout=30.0).completions.create(model="big", prompt="hi", max_tokens=4)
    print(f"\nabandoned rank 0 stopped {gone_s:.2f}s after its group was replaced")

    follower.proc.kill()  # the follower's rank dies with its agent (PDEATHSIG)
    follower.proc.wait(timeout=10)
    failed = leader.wait_slot("s", lambda s: s["phase"] == "Failed", timeout_s=15)
    assert not failed["ready"]
    assert "peer rank was lost" in (failed["lastError"] or "")
    deadline = time.monotonic() + 10
    while _pids_of(leader, "g0-2") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _pids_of(leader, "g0-2"), "rank 0 kept running alone"
