"""The hollow fleet on its own: many nodes on their own ports, the slot state machine's timing,
memory budget and swaps, and every injected fault."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.integration.hollow.conftest import HollowFleet

GIB = 1024**3
Factory = Callable[..., HollowFleet]


def slot(source: str, served: str, gib: float, **extra: Any) -> dict[str, Any]:
    return {"source": source, "servedName": served, "memoryBytes": int(gib * GIB), **extra}


def wait(check: Callable[[], Any], *, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out; last {check()!r}")


def test_hundreds_of_nodes_answer_on_their_own_ports(hollow_factory: Factory) -> None:
    fleet = hollow_factory("--nodes=300", "--seed=3")
    urls = {n["url"] for n in fleet.nodes}
    assert len(urls) == 300
    memories = {n["memoryBytes"] // GIB for n in fleet.nodes}
    assert min(memories) == 16
    assert max(memories) == 192

    async def poll_all() -> list[int]:
        async with httpx.AsyncClient(timeout=20) as client:
            answers = await asyncio.gather(
                *(
                    client.get(
                        n["url"] + "/v1/state", headers={"Authorization": f"Bearer {n['token']}"}
                    )
                    for n in fleet.nodes
                )
            )
        return [a.status_code for a in answers]

    started = time.monotonic()
    assert set(asyncio.run(poll_all())) == {200}
    assert time.monotonic() - started < 20
    other = fleet.nodes[1]["token"]  # a node's token does not open another node
    assert (
        fleet.api(0, "GET", "/v1/state", headers={"Authorization": f"Bearer {other}"}).status_code
        == 401
    )


def test_cold_start_walks_the_phases_in_the_configured_time(hollow_factory: Factory) -> None:
    fleet = hollow_factory(
        "--nodes=1", "--download-s=0.6", "--load-s=0.6", "--warm-s=0.6", "--jitter=0"
    )
    started = time.monotonic()
    assert fleet.api(0, "PUT", "/v1/slots/a", json=slot("hf://org/m", "m", 2)).status_code == 202
    seen: list[str] = []

    def ready() -> bool:
        s = fleet.api(0, "GET", "/v1/slots/a").json()
        if not seen or seen[-1] != s["phase"]:
            seen.append(s["phase"])
        return bool(s["ready"])

    wait(ready)
    assert seen == ["Downloading", "Loading", "Warming", "Ready"] or seen[0] == "Pending"
    assert 1.7 < time.monotonic() - started < 5
    state = fleet.api(0, "GET", "/v1/state").json()
    assert state["cachedModels"][0]["source"] == "hf://org/m"
    assert state["memory"]["slotsEstimatedBytes"] == 2 * GIB


def test_the_budget_decides_fit_surge_and_hold(hollow_factory: Factory) -> None:
    fleet = hollow_factory("--nodes=1", f"--memory-budget={10 * GIB}", "--load-s=0.2")
    assert fleet.api(0, "PUT", "/v1/slots/a", json=slot("hf://o/a", "a", 4)).status_code == 202
    assert fleet.api(0, "PUT", "/v1/slots/b", json=slot("hf://o/b", "b", 4)).status_code == 202
    # as in the real agent, admission counts loaded backends only: wait until both hold memory
    wait(lambda: all(s["ready"] for s in fleet.api(0, "GET", "/v1/state").json()["slots"]))
    full = fleet.api(0, "PUT", "/v1/slots/c", json=slot("hf://o/c", "c", 4))
    assert full.status_code == 507
    assert full.json()["freeBytes"] == 2 * GIB
    # a + b + new a (5 GiB) > 10 GiB: auto becomes hold; alone (4 + 5) it fits
    assert fleet.api(0, "PUT", "/v1/slots/a", json=slot("hf://o/a2", "a", 5)).status_code == 202
    record = wait(lambda: _finished(fleet, "a"))
    assert (record["strategy"], record["outcome"]) == ("hold", "Completed")
    # 7 GiB up front: refused at once; a model sized only after its download (4 GiB weights +
    # 4 GiB KV cache at 8k x 4) does not fit beside a's 5 GiB: rolled back, b keeps serving
    assert fleet.api(0, "PUT", "/v1/slots/b", json=slot("hf://o/b2", "b", 7)).status_code == 507
    unsized = {"source": "hf://o/big", "servedName": "b"}
    assert fleet.api(0, "PUT", "/v1/slots/b", json=unsized).status_code == 202
    record = wait(lambda: _finished(fleet, "b"))
    assert record["outcome"] == "RolledBack"
    assert "exceed the budget" in record["reason"]
    b = fleet.api(0, "GET", "/v1/slots/b").json()
    assert (b["source"], b["ready"], b["spec"]["source"]) == ("hf://o/b", True, "hf://o/b")


def test_injected_faults(hollow_factory: Factory) -> None:
    fleet = hollow_factory("--nodes=3", "--load-s=0.1", "--warm-s=0.1")
    names = [n["name"] for n in fleet.nodes]
    fleet.faults([names[0]], down="refuse")
    with pytest.raises(httpx.ConnectError):
        fleet.api(0, "GET", "/healthz")
    fleet.faults([names[0]])
    assert fleet.api(0, "GET", "/healthz").status_code == 200
    fleet.faults([names[1]], down="hang")
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(fleet.nodes[1]["url"] + "/healthz", timeout=1)
    fleet.faults([names[1]], slow_s=0.5)
    started = time.monotonic()
    assert fleet.api(1, "GET", "/healthz").status_code == 200
    assert time.monotonic() - started >= 0.5
    fleet.faults([names[2]], fail_loads=True)
    fleet.api(2, "PUT", "/v1/slots/a", json=slot("hf://o/a", "a", 1))
    failed = wait(lambda: _phase(fleet, 2, "Failed"))
    assert "injected fault" in failed["lastError"]
    fleet.faults([names[2]])  # the retry (backoff 1 s, then 2 s) succeeds once loads work
    ready = wait(lambda: _phase(fleet, 2, "Ready"), timeout=15)
    assert ready["restarts"] >= 1
    assert fleet.stats()["phases"] == {"Ready": 1}


def _finished(fleet: HollowFleet, name: str) -> dict[str, Any] | None:
    items = fleet.api(0, "GET", f"/v1/slots/{name}/swaps").json()["items"]
    return items[0] if items and items[0]["outcome"] else None


def _phase(fleet: HollowFleet, index: int, phase: str) -> dict[str, Any] | None:
    found = fleet.api(index, "GET", "/v1/slots/a").json()
    return found if found["phase"] == phase else None


def test_a_hollow_node_runs_the_agents_own_slots() -> None:
    """The slot state machine of a scale run is the code users run (slots.slot, convergence,
    swap), over simulated backends: no process, no port bound, one task per slot."""
    from mlxfleet_agent import contract
    from mlxfleet_agent.slots.slot import Slot
    from tests.support.hollow import config, node, slots

    fast = config.Timing(download_s=0.05, load_s=0.05, warm_s=0.05, stop_s=0.05, jitter=0)
    cfg = config.NodeConfig(name="n0", memory_bytes=64 * GIB)
    fleet = config.FleetConfig(nodes=[cfg], timing=fast)

    def spec(source: str) -> contract.SlotSpec:
        return contract.SlotSpec.model_validate(slot(source, "m", 2))

    async def scenario() -> None:
        n = node.HollowNode(cfg, fleet)
        n.apply("a", spec("hf://o/a"))
        hollow = n.slots["a"]
        assert type(hollow) is Slot
        await _until(lambda: hollow.status().ready)
        active = hollow.active
        assert active is not None
        assert isinstance(active.backend, slots.Backend)
        assert active.backend.proc is None  # simulated: nothing was spawned
        n.apply("a", spec("hf://o/b"), request_id="plan-1")
        await _until(lambda: bool(hollow.swaps) and hollow.swaps[0].outcome is not None)
        record = hollow.swaps[0]
        assert (record.strategy, record.outcome, record.request_id) == (
            contract.SwapStrategy.SURGE,
            contract.SwapOutcome.COMPLETED,
            "plan-1",
        )
        assert hollow.status().source == "hf://o/b"
        n.delete("a")
        await _until(lambda: "a" not in n.slots)
        assert not any(n.pins.values())  # every backend's weights unpinned
        await n.close()

    asyncio.run(scenario())


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(1000):  # 10 s
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")
