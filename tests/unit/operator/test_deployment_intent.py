"""ModelDeployment decisions taken out of the handler: sizing from prefetch answers, what one
reconcile sets out to do, conditions from typed facts (never from message text), Events."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from mlxfleet_agent import contract, sizing
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.deployment import footprint, intent, replicas
from mlxfleet_operator.core.deployment import plan as dplan
from mlxfleet_operator.core.deployment import slots as dslots
from mlxfleet_operator.core.deployment import status as mdstatus
from mlxfleet_operator.core.fleet import facts as dfacts
from mlxfleet_operator.core.fleet import placement
from mlxfleet_operator.core.kit import heartbeat, naming
from mlxfleet_operator.core.node import status as nodestatus
from tests.unit.operator.builders import GIB, NOW, SHAPE, A, B, fact, md, state
from tests.unit.operator.test_placement_views import _fleet

SLOT = naming.slot_name("ns", "chat")


def one(source: str = A, **spec: Any) -> mdep.ModelDeployment:
    """A one-replica deployment (the builders' default is two)."""
    return md(source, **{"replicas": 1, **spec})


def slot(source: str = A, *, phase: str = "Ready", error: str | None = None) -> contract.SlotStatus:
    return contract.SlotStatus(
        name=SLOT,
        served_name="chat",
        source=source,
        phase=phase,
        ready=phase == "Ready",
        last_error=error,
    )


def on(name: str, *slots: contract.SlotStatus, ready: bool = True) -> dfacts.NodeFacts:
    return fact(name, state(slots=slots), ready=ready)


def probe(*, fits_nowhere: bool = False) -> placement.Decision:
    return placement.Decision(
        nodes=(), kept=(), added=(), dropped=(), rejections=(), missing=1,
        fits_nowhere=fits_nowhere,
    )  # fmt: skip


# ------------------------------------------------------------------------------- sizing


CACHED = contract.CachedModel(id="a", source=A, size_bytes=400_000, shape=SHAPE)


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        pytest.param([], "WaitingForCapacity", id="nobody-asked"),
        pytest.param([dfacts.Prefetch("n1", error="HTTP 404: source: no such repo", status=404)],
                     "SourceInvalid", id="cannot-exist"),
        pytest.param([dfacts.Prefetch("n1", error="HTTP 502: hub", status=502),
                      dfacts.Prefetch("n2", error="unreachable")],
                     "SourceUnavailable", id="fetch-failed-everywhere"),
        pytest.param([dfacts.Prefetch("n1")], "SizeUnknown", id="fetched-without-size"),
    ],
)  # fmt: skip
def test_prefetch_answers_decide_the_sizing_verdict(
    answers: list[dfacts.Prefetch], reason: str
) -> None:
    judged = footprint.sized(one(), [], probe=probe(), answers=answers)
    assert not isinstance(judged, int)
    assert judged.reason == reason
    for answer in answers:
        assert answer.node in judged.message


def test_a_fetched_model_is_sized_and_nothing_matching_stalls() -> None:
    fetched = footprint.sized(one(), [], probe=probe(), answers=[dfacts.Prefetch("n1", CACHED)])
    expected = sizing.estimate(
        weights_bytes=400_000, shape=SHAPE, context_length=8192, max_concurrency=4, kv_bits=None
    )
    assert fetched == expected.total_bytes
    nowhere = footprint.sized(one(), [], probe=probe(fits_nowhere=True), answers=[])
    assert not isinstance(nowhere, int)
    assert (nowhere.reason, nowhere.stalled) == ("NoMatchingNodes", True)


def test_only_a_fetched_model_or_a_permanent_refusal_stops_asking() -> None:
    assert dfacts.Prefetch("n1", CACHED).settled
    assert dfacts.Prefetch("n1", error="no", status=422).settled
    assert not dfacts.Prefetch("n1", error="no", status=502).settled
    assert not dfacts.Prefetch("n1", error="no answer").settled


# ------------------------------------------------------------------------------- intent


def decide(
    d: mdep.ModelDeployment, facts: Sequence[dfacts.NodeFacts], plan: dplan.PlanInfo | None = None
) -> intent.Intent:
    return intent.intent(
        d, facts, plan=plan, footprint_bytes=GIB, now=NOW, failover_delay=timedelta(seconds=15)
    )


def test_a_new_replica_is_put_once_and_an_identical_slot_is_left_alone() -> None:
    want = decide(one(), [on("n1")])
    assert [(r.node, r.spec) for r in want.puts] == [("n1", dslots.slot_spec(one(), ModelRef(A)))]
    assert (want.create, want.deletes) == (None, ())
    running = slot().model_copy(update={"spec": want.puts[0].spec})
    assert decide(one(), [on("n1", running)]).puts == ()


def test_a_model_change_of_kept_replicas_creates_a_plan_and_puts_nothing() -> None:
    served = [{"node": "n1", "phase": "Ready", "ready": True, "source": A}]
    want = decide(one(B, placements=served), [on("n1", slot(A))])
    assert want.create is not None
    assert want.create.spec.nodes == ["n1"]
    assert want.create.metadata.owner_references[0].uid == "u"
    assert want.plan == dplan.created(one(B), want.create)
    assert want.puts == ()  # the plan alone swaps kept replicas
    assert want.desired == {"n1": ModelRef(A)}
    event = dplan.created_event(want.create)
    assert event.message == f"SwapPlan {want.create.metadata.name}: 1 replicas to {B}"


def test_a_slot_without_a_replica_goes_unless_a_running_plan_brings_one_up_there() -> None:
    facts = [on("n1"), on("n2", slot())]
    assert decide(one(placement={"nodes": ["n1"]}), facts).deletes == ("n2",)
    moving = dplan.PlanInfo(
        name="p", target=ModelRef(A), phase=None, paused=False, holds=frozenset({"n2"})
    )
    assert decide(one(placement={"nodes": ["n1"]}), facts, moving).deletes == ()


def test_a_move_is_announced_with_where_from_and_where_to() -> None:
    placed = [{"node": "n1", "phase": "Ready", "ready": True, "source": A}]
    want = decide(one(placements=placed, placement={"nodes": ["n2"]}), [on("n1"), on("n2")])
    assert want.rescheduled is not None
    assert want.rescheduled.message == "replicas moved from n1 to n2"
    assert decide(one(placements=placed), [on("n1")]).rescheduled is None


# ------------------------------------------------------------------- conditions from facts


def test_node_lost_comes_from_node_readiness_not_from_a_message() -> None:
    """An agent error that happens to contain 'not Ready' is a loading replica on a Ready
    node, not a lost node; a NotReady node is lost whatever its slot says."""
    chosen = replicas.place(one(), [on("n1")], footprint_bytes=GIB, now=NOW,
                           failover_delay=timedelta(seconds=15))  # fmt: skip

    def judged(fact: dfacts.NodeFacts) -> mdstatus.Result:
        return mdstatus.status(
            one(),
            decision=chosen,
            facts={"n1": fact},
            desired={"n1": ModelRef(A)},
            outcomes={},
            plan=None,
            footprint_bytes=GIB,
            endpoint="http://chat.ns.svc:80",
            now=NOW,
        )

    result = judged(on("n1", slot(phase="Loading", error="backend not Ready yet")))
    assert result.status.placements[0].message == "backend not Ready yet"
    assert result.verdict.reason == "Loading"
    lost = judged(on("n1", slot(), ready=False))
    assert lost.verdict.reason == "NodeLost"
    assert lost.status.placements[0].message == "node n1 is not Ready"


@pytest.mark.parametrize(
    ("outcome", "reported", "warns"),
    [
        pytest.param(dfacts.Outcome("n1"), True, False, id="removed"),
        pytest.param(dfacts.Outcome("n1", "HTTP 409", status=409), False, True, id="refused"),
        pytest.param(dfacts.Outcome("n1", "timeout", unreachable=True), True, True,
                     id="unreachable-with-the-slot"),
        pytest.param(dfacts.Outcome("n1", "timeout", unreachable=True), False, False,
                     id="unreachable-never-had-it"),
    ],
)  # fmt: skip
def test_a_slot_left_behind_on_delete_warns_only_where_it_matters(
    outcome: dfacts.Outcome, reported: bool, warns: bool
) -> None:
    event = dslots.not_removed(outcome, reported=reported)
    assert (event is not None) is warns
    if event is not None:
        assert (event.type, event.reason) == ("Warning", "SlotNotRemoved")


def test_node_events_a_ready_flip_and_an_ignored_field() -> None:
    down = heartbeat.Observation(heartbeat.Health(ready=False, misses=3), flipped=True)
    event = nodestatus.flip_event(
        down, nodestatus.Poll(None, nodestatus.PollError.UNREACHABLE, "refused")
    )
    assert event is not None
    assert (event.type, event.reason, event.message) == (
        "Warning",
        "NodeNotReady",
        "heartbeat missed: refused",
    )
    up = heartbeat.Observation(heartbeat.Health(ready=True), flipped=True)
    assert nodestatus.flip_event(up, nodestatus.Poll(None)) is not None
    assert (
        nodestatus.flip_event(
            heartbeat.Observation(heartbeat.Health(), False), nodestatus.Poll(None)
        )
        is None
    )
    assert nodestatus.ignored_fields(on("n1").node) is None
    reserved = on("n1").node.model_copy(deep=True)
    reserved.spec.reserved_memory = "1Gi"
    ignored = nodestatus.ignored_fields(reserved)
    assert ignored is not None
    assert ignored.reason == "ReservedMemoryIgnored"


def test_an_engine_no_node_can_run_is_ready_false_naming_it() -> None:
    """An agent that cannot run the engine (and one older than engines) make the deployment
    Ready=False EngineUnavailable (Stalled: waiting changes nothing), both at sizing and after."""
    no_embed = state().model_copy(
        update={
            "engines": [
                contract.EngineInfo(name="mlx-lm", available=True),
                contract.EngineInfo(name="mlx-embed", available=False, reason="mlx not installed"),
            ]
        }
    )
    fleet = [fact("mac-1", no_embed), fact("mac-2")]
    d = one(engine={"name": "mlx-embed"})
    decision = replicas.place(d, fleet, footprint_bytes=GIB, now=NOW, failover_delay=timedelta(0))
    assert decision.fits_nowhere
    verdict = mdstatus.verdict(d, decision, [], {}, None)
    assert (verdict.ready, verdict.reason, verdict.stalled) == (False, "EngineUnavailable", True)
    assert "mac-1: cannot run engine mlx-embed: mlx not installed" in verdict.message
    assert "mac-2: cannot run engine mlx-embed" in verdict.message
    sized = footprint.sized(d, fleet, probe=decision, answers=[])
    assert not isinstance(sized, int)
    assert sized.reason == "EngineUnavailable"
    chat = replicas.place(one(), fleet, footprint_bytes=GIB, now=NOW, failover_delay=timedelta(0))
    assert chat.nodes  # the same fleet still takes mlx-lm
    slot = dslots.slot_spec(d, d.model_ref())
    assert slot.engine.name is contract.EngineName.MLX_EMBED


# ------------------------------------------------------------------ a status not written yet


@pytest.mark.parametrize("indexed", [False, True])
def test_a_reconcile_that_reads_no_placements_yet_keeps_the_replica_an_agent_runs(
    indexed: bool,
) -> None:
    """Under load a reconcile may read the object as it was before the previous reconcile's
    status write (bench-scale 100 nodes x 300 deployments: 85 slot DELETEs, each from a
    decision on an empty status that chose another node and deleted the replica just placed).
    The node whose agent lists the slot carries the replica: kept, nothing deleted, although
    a node with the model cached would score better for a new replica."""
    cached = contract.CachedModel(id="a", source=A, size_bytes=GIB, shape=SHAPE)
    answers = [("n1", state(slots=[slot(phase="Loading")])), ("n2", state(cached=[cached]))]
    found = [fact(n, st) for n, st in answers]
    kw: dict[str, Any] = {}
    if indexed:
        f = _fleet([n for n, _ in answers])
        for n, st in answers:
            f.record(n, st, now=NOW)
        found = f.node_facts([fact(n).node for n, _ in answers], slot=SLOT)
        kw["index"] = f.placement_index(found)
    want = intent.intent(
        one(), found, plan=None, footprint_bytes=GIB, now=NOW,
        failover_delay=timedelta(0), **kw,
    )  # fmt: skip
    assert want.decision.nodes == ("n1",)
    assert want.deletes == ()
    assert [p.node for p in want.puts] in ([], ["n1"])


def test_a_failed_slot_the_status_does_not_name_is_not_a_replica_to_keep() -> None:
    """A slot its agent lists as Failed carries no replica: placement chooses afresh."""
    cached = contract.CachedModel(id="a", source=A, size_bytes=GIB, shape=SHAPE)
    found = [on("n1", slot(phase="Failed", error="boom")), fact("n2", state(cached=[cached]))]
    want = intent.intent(
        one(), found, plan=None, footprint_bytes=GIB, now=NOW, failover_delay=timedelta(0)
    )
    assert want.decision.nodes == ("n2",)


def _reserving(
    d: mdep.ModelDeployment,
    *,
    reserved: str = SLOT,
    objects: Sequence[Any] | None = None,
    indexed: bool,
) -> intent.Intent:
    """A stale reconcile of `d` (status names no placement) on n1 (a reservation for the slot
    `reserved`: the PUT decided on, its agent not listing it yet), n2 (its agent lists this
    deployment's slot, Loading) and n3 (free, the model cached: a new replica's best node),
    facts made by the fleet adapter as the handler gets them (on `objects`: the InferenceNodes
    that exist now, default all three as they are)."""
    cached = contract.CachedModel(id="a", source=A, size_bytes=GIB, shape=SHAPE)
    answers = {
        "n1": state(),
        "n2": state(slots=[slot(phase="Loading")]),
        "n3": state(cached=[cached]),
    }
    f = _fleet(list(answers))
    for n, st in answers.items():
        f.record(n, st, now=NOW)
    put = dfacts.SlotRequest("n1", dslots.slot_spec(d, d.model_ref()))
    f.reserve(reserved, put, GIB)
    found = f.node_facts(objects or [fact(n).node for n in answers], slot=SLOT)
    kw: dict[str, Any] = {"index": f.placement_index(found)} if indexed else {}
    return intent.intent(
        d, found, plan=None, footprint_bytes=GIB, now=NOW, failover_delay=timedelta(0), **kw
    )


@pytest.mark.parametrize("indexed", [False, True])
def test_a_reconcile_that_reads_no_placements_yet_keeps_the_replica_it_reserved(
    indexed: bool,
) -> None:
    """The same stale read, one step earlier: the previous reconcile reserved n1 for the slot
    and its PUT is in flight (n1's agent does not list the slot yet). n1 carries a replica as
    much as n2, whose agent lists it: both kept, no replica added on n3 (a surplus a later
    reconcile would delete again: a slot loaded for nothing), nothing deleted."""
    want = _reserving(md(), indexed=indexed)
    assert sorted(want.decision.kept) == ["n1", "n2"]
    assert want.decision.added == ()
    assert want.decision.dropped == ()
    assert want.deletes == ()
    assert {p.node for p in want.puts} <= {"n1", "n2"}  # the spec again at most (idempotent)


@pytest.mark.parametrize("indexed", [False, True])
def test_another_deployments_reservation_is_not_a_replica_of_this_one(indexed: bool) -> None:
    """n1 holds a reservation for another deployment's slot: this one's replicas are n2 and a
    new one (n3, the model cached), never n1 counted as its own."""
    want = _reserving(md(), reserved="ns--other", indexed=indexed)
    assert want.decision.kept == ("n2",)
    assert want.decision.added == ("n3",)
    assert want.deletes == ()


def _relabelled(name: str, **labels: str) -> Any:
    base = fact(name).node
    return base.model_copy(update={"metadata": base.metadata.model_copy(update={"labels": labels})})


@pytest.mark.parametrize("indexed", [False, True])
@pytest.mark.parametrize(
    ("spec", "objects"),
    [
        pytest.param({}, ["n2", "n3"], id="node-deleted"),
        pytest.param({"placement": {"nodes": ["n2", "n3"]}}, None, id="not-in-explicit-nodes"),
        pytest.param({"placement": {"nodeSelector": {"pool": "a"}}}, "n1-relabelled",
                     id="selector-no-longer-matches"),
    ],
)  # fmt: skip
def test_a_reservation_on_a_node_placement_now_refuses_is_not_a_replica(
    indexed: bool, spec: dict[str, Any], objects: list[str] | str | None
) -> None:
    """This deployment's reservation on n1, but n1 is gone or statically out (not in the
    explicit nodes, labels no longer match the selector): no replica there, n3 takes it."""
    found: list[Any] | None = None
    if isinstance(objects, list):
        found = [fact(n).node for n in objects]
    elif objects == "n1-relabelled":
        found = [_relabelled("n1", pool="b"), *(_relabelled(n, pool="a") for n in ("n2", "n3"))]
    want = _reserving(md(**spec), objects=found, indexed=indexed)
    assert want.decision.kept == ("n2",)
    assert want.decision.added == ("n3",)
    assert "n1" not in want.decision.nodes
    assert want.deletes == ()
