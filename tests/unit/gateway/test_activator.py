"""The activator (requests for a sleeping deployment wait while it loads) and its pure parts:
which placements count as starting (on approved nodes only, with each node's own header), the
bounded queue, the refusals, the ModelDemand body."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mlxfleet_agent import contract
from mlxfleet_gateway import activator, calls, metrics, view
from mlxfleet_gateway.core import balancer, catalog, coldstart, errors, keys, plan, traits
from mlxfleet_operator.api import modeldemand
from mlxfleet_operator.api import modeldeployment as mdep

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NODES = {"n1": b"Bearer k1"}  # the approved nodes and the header value each accepts
FLEET_KEY = "f" * 64


def body(
    *placements: dict[str, Any], min_replicas: int | None = 0, replicas: int = 1
) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"source": "file:///m/x"}, "replicas": replicas}
    if min_replicas is not None:
        spec |= {"minReplicas": min_replicas, "idleTimeout": "15s"}
    return {
        "metadata": {"name": "chat", "namespace": "a"},
        "spec": spec,
        "status": {"placements": list(placements)},
    }


def placed(
    phase: str, *, ready: bool = False, message: str | None = None, node: str = "n1"
) -> dict[str, Any]:
    return {
        "node": node,
        "phase": phase,
        "ready": ready,
        "endpoint": "http://10.0.0.1:8471",
        "slot": "a-chat",
        "message": message,
    }


def dep(raw: dict[str, Any]) -> catalog.Deployment:
    return catalog.deployment(mdep.ModelDeployment.model_validate(raw), NODES)


def inode(name: str, *, approved: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"agent": {"url": f"https://{name}:8470"}}
    if approved is not None:
        spec["approved"] = approved
    return {"metadata": {"name": name}, "spec": spec, "status": {}}


@pytest.mark.parametrize(
    ("raw", "wakeable", "starting"),
    [
        pytest.param(body(), True, 0, id="asleep: nothing placed"),
        pytest.param(body(placed("Pending")), True, 1, id="placed, the agent has the slot"),
        pytest.param(body(placed("Loading", message="loading (2 MB)")), True, 1, id="loading"),
        pytest.param(body(placed("Pending", message="n1: 507")), True, 0, id="the PUT failed"),
        pytest.param(body(placed("Failed")), True, 0, id="failed"),
        pytest.param(body(placed("Removing")), True, 0, id="going to sleep"),
        pytest.param(body(placed("Pending"), min_replicas=None), False, 0, id="may not sleep"),
        pytest.param(body(min_replicas=0, replicas=0), False, 0, id="off"),
        pytest.param(body(placed("Pending", node="rogue")), True, 0, id="on a node not approved"),
    ],
)
def test_which_deployments_hold_and_which_replicas_are_starting(
    raw: dict[str, Any], wakeable: bool, starting: int
) -> None:
    found = dep(raw)
    assert found.wakeable is wakeable
    assert len(found.starting) == starting
    assert all(r.auth == NODES[r.node] for r in found.starting)  # the node's own header
    assert not found.replicas


def test_a_sleeping_model_is_listed() -> None:
    cat = catalog.build([mdep.ModelDeployment.model_validate(body())], [], nodes=NODES)
    assert [r.name for r in cat.listed(["a"])] == ["chat"]
    off = catalog.build([mdep.ModelDeployment.model_validate(body(replicas=0))], [], nodes=NODES)
    assert off.listed(["a"]) == []


def test_held_is_bounded_per_deployment_and_knows_the_oldest() -> None:
    held = coldstart.Held(limit=2)
    k = ("a", "chat")
    assert held.admit(k, at=NOW + timedelta(seconds=1))
    assert held.admit(k, at=NOW)
    assert not held.admit(k, at=NOW + timedelta(seconds=2))
    assert held.admit(("a", "other"), at=NOW)
    assert held.entries() == [
        coldstart.Entry("a", "chat", 2, NOW),
        coldstart.Entry("a", "other", 1, NOW),
    ]
    held.leave(k, at=NOW)
    held.leave(k, at=NOW + timedelta(seconds=1))
    held.leave(("a", "other"), at=NOW)
    assert held.entries() == []
    assert held.total == 0


def test_refusals_are_503_with_retry_after() -> None:
    for err in (coldstart.queue_full("a/chat", 8), coldstart.timed_out("a/chat", 90.0)):
        assert err.status == 503
        assert (b"retry-after", str(coldstart.RETRY_AFTER_S).encode()) in err.headers
    assert coldstart.queue_full("a/chat", 8).code == "cold_start_queue_full"
    assert coldstart.timed_out("a/chat", 9).code == "cold_start_timeout"


def test_the_demand_body_is_a_valid_model_demand_and_none_when_nothing_is_held() -> None:
    entries = [coldstart.Entry("team-a", "coder", 3, NOW)]
    made = coldstart.demand(entries, gateway="Gateway_7f/x", namespace="mlxfleet-system", now=NOW)
    assert made is not None
    parsed = modeldemand.ModelDemand.model_validate(made)
    assert parsed.metadata.name == "gateway-7f-x"
    assert parsed.spec.deployments[0].waiting == 3
    assert parsed.spec.renew_time == NOW
    assert coldstart.demand([], gateway="g", namespace="n", now=NOW) is None


class Recorder:
    def __init__(self) -> None:
        self.published: list[list[coldstart.Entry]] = []

    def publish(self, entries: list[coldstart.Entry]) -> None:
        self.published.append(entries)


def _call() -> calls.Call:
    ask = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    req = traits.traits(ask, {}, endpoint="chat/completions", min_affinity_chars=64)
    found = catalog.Resolved("a", "chat", deployment=dep(body()))

    async def send(_: Any) -> None:
        return None

    return calls.Call(
        key=keys.ANONYMOUS_KEY,
        endpoint="chat/completions",
        req=req,
        body={},
        raw=b"{}",
        plan=plan.plan(found, req, rng=lambda: 0.0),
        send=send,
        t0=0.0,
    )


def _setup(
    limit: int = 4, timeout_s: float = 5.0
) -> tuple[view.View, activator.Activator, Recorder]:
    v = view.View(balancer.Balancer(), fleet_key=FLEET_KEY)
    v.replace("nodes", {"/n1": inode("n1"), "/rogue": inode("rogue", approved=False)})
    v.replace("deployments", {"a/chat": body()})
    rec = Recorder()
    act = activator.Activator(
        state=v, demand=rec, gauges=metrics.GatewayMetrics(), limit=limit, timeout_s=timeout_s
    )
    return v, act, rec


def test_a_held_request_goes_to_the_replica_the_operator_places() -> None:
    async def go() -> None:
        v, act, rec = _setup()
        call = _call()
        target = v.catalog.deployments[("a", "chat")]
        waiting = asyncio.ensure_future(act.hold(call, target))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        assert [e.name for e in rec.published[-1]] == ["chat"]  # the operator is told
        v.replace("deployments", {"a/chat": body(placed("Pending"))})
        found = await asyncio.wait_for(waiting, 1)
        assert [r.id for r in found.starting] == ["a/chat@n1"]
        assert rec.published[-1] == []  # nothing held any more
        assert call.held_ms is not None
        assert call.held_ms >= 40

    asyncio.run(go())


def test_a_held_request_waits_for_a_replica_on_an_approved_node_with_its_own_key() -> None:
    """A replica placed on a node that is not approved is no place to send a held request (its
    data plane has no key the gateway holds); once the node is approved it goes there, with the
    key derived for that node."""

    async def go() -> None:
        v, act, _ = _setup()
        call = _call()
        target = v.catalog.deployments[("a", "chat")]
        waiting = asyncio.ensure_future(act.hold(call, target))
        v.replace("deployments", {"a/chat": body(placed("Pending", node="rogue"))})
        await asyncio.sleep(0.05)
        assert not waiting.done()
        v.replace("nodes", {"/n1": inode("n1"), "/rogue": inode("rogue", approved=True)})
        found = await asyncio.wait_for(waiting, 1)
        assert [r.id for r in found.starting] == ["a/chat@rogue"]
        key = contract.credentials.data_plane_key(FLEET_KEY, "rogue")
        assert found.starting[0].auth == f"Bearer {key}".encode()

    asyncio.run(go())


def test_past_the_bound_or_the_deadline_it_is_503() -> None:
    async def go() -> None:
        v, act, _ = _setup(limit=1, timeout_s=0.2)
        target = v.catalog.deployments[("a", "chat")]
        first = asyncio.ensure_future(act.hold(_call(), target))
        await asyncio.sleep(0.02)
        with pytest.raises(errors.GatewayError) as full:
            await act.hold(_call(), target)
        assert full.value.code == "cold_start_queue_full"
        with pytest.raises(errors.GatewayError) as late:
            await first
        assert late.value.code == "cold_start_timeout"

    asyncio.run(go())


def test_a_deployment_turned_off_while_a_request_waits_is_refused_at_once() -> None:
    async def go() -> None:
        v, act, _ = _setup()
        target = v.catalog.deployments[("a", "chat")]
        waiting = asyncio.ensure_future(act.hold(_call(), target))
        await asyncio.sleep(0.02)
        off = copy.deepcopy(body(replicas=0))
        v.replace("deployments", {"a/chat": off})
        with pytest.raises(errors.GatewayError) as gone:
            await asyncio.wait_for(waiting, 1)
        assert gone.value.code == "no_backend"

    asyncio.run(go())


def test_a_retry_with_replicas_there_pauses_and_is_no_demand() -> None:
    """A call whose attempts failed while the deployment has replicas (a backend that keeps
    failing) pauses and goes back to them: it wakes nothing, and the deadline still bounds it."""

    async def go() -> None:
        v, act, rec = _setup(timeout_s=0.8)
        v.replace("deployments", {"a/chat": body(placed("Ready", ready=True))})
        target = v.catalog.deployments[("a", "chat")]
        call = _call()
        call.cold_start_t0 = act.clock()  # held before: this is a retry
        found = await act.hold(call, target)
        assert [r.id for r in found.replicas] == ["a/chat@n1"]
        assert rec.published == []  # no ModelDemand write
        await asyncio.sleep(0.4)
        with pytest.raises(errors.GatewayError) as late:
            await act.hold(call, target)
        assert late.value.code == "cold_start_timeout"

    asyncio.run(go())
