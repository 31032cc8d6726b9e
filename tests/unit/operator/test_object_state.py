"""What the operator keeps per object lives in one typed record per uid (`adapters.objects`),
dropped whole when the object goes (each kind's delete handler runs `guard.guarded(...,
last=True)`) and never cleared wholesale (issue 27: six `Runtime` dicts, a module global in
`statuspatch` cleared at 100k entries, kopf memo; the locks and node announcements were never
dropped at all). The sharded group watch is a kopf daemon reading the record."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kopf
import pytest

from mlxfleet_operator import settings
from mlxfleet_operator.adapters import (
    agent,
    fleet,
    fleetview,
    leader,
    objects,
    publishing,
    runtime,
    statuspatch,
)
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api import resources
from mlxfleet_operator.core.fleet import facts as dfacts
from mlxfleet_operator.handlers import (
    deployments,
    guard,
    modelroutes,
    nodes,
    registry,
    sharded,
    swapplans,
)
from tests.unit.operator.builders import kopf_body, node


class _Publisher:
    """The publisher's two calls these handlers make, recorded (no API server in unit tests)."""

    def __init__(self) -> None:
        self.slices: list[list[publishing.Endpoint]] = []
        self.unpublished: list[object] = []

    async def publish_slices(
        self, target: Mapping[str, Any], endpoints: Sequence[publishing.Endpoint]
    ) -> set[str]:
        self.slices.append(list(endpoints))
        return set()

    async def unpublish(self, target: object) -> None:
        self.unpublished.append(target)


def _runtime() -> tuple[runtime.Runtime, _Publisher]:
    pub = _Publisher()
    rt = runtime.Runtime(
        config=settings.OperatorSettings(),
        kube=None,  # type: ignore[arg-type]
        fleet=fleet.Fleet(None),  # type: ignore[arg-type]
        publisher=pub,  # type: ignore[arg-type]
    )
    return rt, pub


def _remember(rt: runtime.Runtime, uid: str) -> None:
    """Everything a handler may keep about the object."""
    kept = rt.objects.of(uid)
    rt.settle(uid, ("inputs",), at=1.0)
    assert rt.first_time(uid, "Ready", about="ready")
    kept.waiting, kept.scale_told, kept.withdrawn = 1, "t", {"g"}
    body = {"metadata": {"uid": uid, "resourceVersion": "1"}}
    statuspatch.write_status({}, inode.InferenceNodeStatus(agent_version="2"), body, rt.objects)
    assert kept.sent is not None


def test_the_registry_makes_a_record_on_first_use_and_forget_drops_all_of_it() -> None:
    rt, _ = _runtime()
    assert rt.objects.get("u") is None
    assert not rt.unchanged("u", ("inputs",), at=1.0, resync=60)
    assert rt.objects.get("u") is None  # reading makes no record
    _remember(rt, "u")
    _remember(rt, "other")
    assert rt.lock("u") is rt.lock("u")
    assert rt.unchanged("u", ("inputs",), at=2.0, resync=60)
    assert not rt.first_time("u", "Ready", about="ready")
    assert rt.first_time("u", "Ready", about="metrics")  # another topic: told on its own
    rt.objects.forget("u")
    assert "u" not in rt.objects
    assert len(rt.objects) == 1
    assert not rt.unchanged("u", ("inputs",), at=2.0, resync=60)
    assert rt.first_time("u", "Ready", about="ready")  # a new object of that uid: told again
    assert rt.objects.of("other").withdrawn == {"g"}


def test_a_status_sent_is_kept_per_object_with_no_wholesale_clear() -> None:
    """The last status sent used to live in a module global cleared whole past 100,000 entries:
    a live object then sent its unchanged status again. Now each object's entry lives in its
    record, as long as the object, whatever the number of objects."""
    rt, _ = _runtime()
    status = inode.InferenceNodeStatus(agent_version="2")

    def write(uid: str) -> dict[str, object]:
        patch: dict[str, object] = {}
        body = {"metadata": {"uid": uid, "resourceVersion": "1"}, "status": {}}
        statuspatch.write_status(patch, status, body, rt.objects, clock=lambda: 0.0)
        return patch

    assert write("live")
    others = objects.ObjectState(sent=objects.Sent("1", {}, 0.0))  # one record, many uids
    rt.objects._by_uid.update(dict.fromkeys((f"u{i}" for i in range(100_001)), others))
    assert write("live") == {}  # still known: not sent again
    rt.objects.forget("live")
    assert write("live")  # forgotten with its object: nothing kept about it


def _guard_run(rt: runtime.Runtime, uid: str, *, last: bool, fail: bool = False) -> None:
    body = kopf.Body({"metadata": {"uid": uid, "name": "x", "namespace": "ns"}})

    async def go() -> None:
        async with guard.guarded(resources.SWAP_PLAN, body, kopf.Memo({runtime.KEY: rt})):
            pass
        async with guard.guarded(
            resources.SWAP_PLAN, body, kopf.Memo({runtime.KEY: rt}), last=last
        ):
            if fail:
                raise kopf.TemporaryError("again", delay=1)

    asyncio.run(go())


def test_a_delete_run_forgets_the_record_when_it_ends_even_on_a_retry() -> None:
    rt, _ = _runtime()
    _remember(rt, "u")
    _guard_run(rt, "u", last=False)
    assert "u" in rt.objects  # an ordinary run keeps it
    _guard_run(rt, "u", last=True)
    assert "u" not in rt.objects
    _remember(rt, "u")
    with pytest.raises(kopf.TemporaryError):
        _guard_run(rt, "u", last=True, fail=True)
    assert "u" not in rt.objects  # the retry starts a record again and forgets it again


def _delete(handler: Any, rt: runtime.Runtime, body: dict[str, Any], **kwargs: Any) -> None:
    memo = kopf.Memo({runtime.KEY: rt})
    asyncio.run(handler(body=kopf_body(body), memo=memo, **kwargs))


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("ModelDeployment", id="deployment"),
        pytest.param("InferenceNode", id="node"),
        pytest.param("SwapPlan", id="swapplan"),
        pytest.param("ModelRoute", id="modelroute"),
    ],
)
def test_each_kinds_delete_handler_forgets_its_object(kind: str) -> None:
    rt, pub = _runtime()
    _remember(rt, "u")
    _remember(rt, "other")
    meta = {"uid": "u", "name": "n1", "namespace": "ns"}
    if kind == "ModelDeployment":
        rt.woken[("ns", "n1")] = "since"
        none: dict[str, Any] = {}
        idx = {
            "inference_nodes": none,
            "deployments": none,
            "swap_plans": none,
        }
        _delete(deployments.teardown, rt, {"metadata": meta}, namespace="ns", name="n1", **idx)
        assert pub.unpublished
        assert ("ns", "n1") not in rt.woken
    elif kind == "InferenceNode":
        wire = node("n1").model_dump(mode="json", by_alias=True, exclude_none=True)
        wire["metadata"]["uid"] = "u"
        _delete(nodes.forget, rt, wire, name="n1")
    elif kind == "SwapPlan":
        _delete(swapplans.gone, rt, {"metadata": meta})
    else:
        _delete(modelroutes.gone, rt, {"metadata": meta})
    assert "u" not in rt.objects
    assert "other" in rt.objects


def test_every_kind_that_keeps_a_record_has_a_delete_handler() -> None:
    """A kind whose handlers keep a record but have no delete handler would leak it."""
    reg = registry(settings.OperatorSettings())
    plurals = {
        h.selector.any_name
        for h in reg._changing.get_all_handlers()
        if h.reason == kopf.Reason.DELETE and h.selector is not None
    }
    kinds = (
        resources.MODEL_DEPLOYMENT,
        resources.INFERENCE_NODE,
        resources.SWAP_PLAN,
        resources.MODEL_ROUTE,
    )
    assert {k.plural for k in kinds} <= plurals


class _Unreachable:
    """An agent client whose state requests go unanswered."""

    def __init__(self) -> None:
        self.asked = 0

    async def state(self) -> object:
        self.asked += 1
        raise agent.AgentUnreachable("GET /v1/state: timeout")


class _Stopped:
    """kopf's `stopped` flag for a daemon (set: stop)."""

    def __init__(self) -> None:
        self.set = False

    def __bool__(self) -> bool:
        return self.set


def _group_watch(rt: runtime.Runtime, uid: str) -> objects.GroupWatch:
    facts = {}
    for name in ("r0", "r1"):
        client = _Unreachable()
        rt.fleet.entries[name] = fleetview.Entry(client=client)  # type: ignore[arg-type]
        facts[name] = dfacts.NodeFacts(node=node(name), state=None, endpoint=f"http://{name}")
    return objects.GroupWatch(
        {"metadata": {"uid": uid, "name": "big", "namespace": "ns"}},
        {"g1": ["r0", "r1"]},
        [("r0", "http://r0:9000", True)],
        facts,
        slot="ns-big",
    )


def _watch(rt: runtime.Runtime, uid: str, stopped: _Stopped, seconds: float) -> None:
    body = kopf.Body({"metadata": {"uid": uid, "name": "big", "namespace": "ns"}})
    memo = kopf.Memo({runtime.KEY: rt})

    async def go() -> None:
        task = asyncio.create_task(sharded.watch_groups(body=body, memo=memo, stopped=stopped))  # type: ignore[arg-type]
        await asyncio.sleep(seconds)
        stopped.set = True
        await asyncio.wait_for(task, timeout=2)

    asyncio.run(go())


def _watched(kept: objects.ObjectState) -> objects.GroupWatch | None:
    """`kept.groups` read afresh: the watch clears it, which mypy's narrowing cannot see."""
    return kept.groups


def test_the_group_watch_withdraws_rank_0_of_a_group_whose_rank_stops_answering() -> None:
    rt, pub = _runtime()
    kept = rt.objects.of("u")
    kept.groups = _group_watch(rt, "u")
    _watch(rt, "u", _Stopped(), sharded.WATCH_INTERVAL_S * (sharded.WATCH_MISSES + 3))
    assert kept.withdrawn == {"g1"}  # the next reconcile treats it as broken
    assert _watched(kept) is None  # watched again only when a reconcile hands it over
    assert [[e.ready for e in endpoints] for endpoints in pub.slices] == [[False]]


def test_the_group_watch_idles_without_groups_when_not_leading_and_when_stopped() -> None:
    rt, pub = _runtime()
    _watch(rt, "u", _Stopped(), sharded.WATCH_INTERVAL_S * 3)  # no record: nothing to do
    kept = rt.objects.of("u")
    kept.groups = _group_watch(rt, "u")
    leader.lead_with(None)  # a standby, or a leader past its renew deadline
    try:
        _watch(rt, "u", _Stopped(), sharded.WATCH_INTERVAL_S * (sharded.WATCH_MISSES + 3))
    finally:
        leader.lead_with(leader.ALONE)
    assert pub.slices == []
    assert kept.withdrawn == set()
    client = rt.fleet.entries["r0"].client
    assert client.asked == 0  # type: ignore[attr-defined]
    stopped = _Stopped()
    stopped.set = True
    _watch(rt, "u", stopped, 0.0)  # returns at once
    assert pub.slices == []


def test_a_sharded_deployment_gets_the_group_watch_daemon_only_while_sharded() -> None:
    reg = registry(settings.OperatorSettings())
    daemons = [h for h in reg._spawning.get_all_handlers() if h.fn is sharded.watch_groups]
    assert len(daemons) == 1
    when: Callable[..., bool] | None = daemons[0].when  # kopf passes every kwarg; it reads spec
    assert when is not None
    assert when(spec=kopf.Spec(kopf.Body({"spec": {"sharding": {"size": 2}}})))
    assert not when(spec=kopf.Spec(kopf.Body({"spec": {"replicas": 1}})))
