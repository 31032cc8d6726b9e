"""A sharded deployment's rank health and status (core.sharded.health, groupstatus): a rank is
ready, starting or failed from its agent's answer; a group is ready when every rank is; only
rank 0 is published; a group waiting to re-form keeps its ranks, not ready; a swapping group is
published while rank 0's agent serves; the verdict names what the groups wait for."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import swapplan as swp
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core import sharded
from mlxfleet_operator.core.deployment import plan as plans
from mlxfleet_operator.core.fleet import facts as dep
from mlxfleet_operator.core.fleet import groupplacement
from mlxfleet_operator.core.kit import naming
from tests.unit.operator import builders
from tests.unit.operator.builders import GIB, fact

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
SOURCE = "file:///models/big"
SLOT = naming.slot_name("ns", "big")
BOTH = frozenset({"a", "b"})


def deployment(*, groups: list[dict[str, Any]] | None = None) -> mdep.ModelDeployment:
    return builders.sharded_md(SOURCE, groups=groups)


def rank(node: str, group: str, **kw: Any) -> dep.NodeFacts:
    return builders.rank(node, group, slot=SLOT, source=SOURCE, **kw)


@pytest.mark.parametrize(
    ("found", "fresh", "health"),
    [
        pytest.param(rank("a", "g0-1"), True, (True, False, None), id="ready"),
        pytest.param(rank("a", "g0-1", phase="Loading"), True, (False, False, "loading"), id="up"),
        pytest.param(fact("a"), True, (False, False, "starting"), id="no-slot-yet"),
        pytest.param(rank("a", "g0-0"), True, (False, False, "starting"), id="old-formation"),
        pytest.param(
            rank("a", "g0-1", phase="Failed", error="peer lost"),
            True,
            (False, True, "peer lost"),
            id="failed-by-its-agent",
        ),
        pytest.param(rank("a", "g0-1", swap=True), True, (False, False, "swapping"), id="swap"),
        pytest.param(
            rank("a", "g0-1", swap=True, serving="g0-0", phase="Swapping", ready=True),
            True,
            (False, False, "swapping"),
            id="swap-old-formation-serves",
        ),
        pytest.param(  # the switch happened, the old rank drains: a poll before the plan ends
            rank("a", "g0-1", swap=True, serving="g0-1", phase="Swapping", ready=True),
            True,
            (True, False, None),
            id="swap-switched",
        ),
        pytest.param(rank("a", "g0-1"), False, (False, True, "node is not answering"), id="stale"),
        pytest.param(None, True, (False, True, "node is not answering"), id="no-node"),
        pytest.param(
            fact("a", ready=False), True, (False, True, "node is not answering"), id="not-ready"
        ),
    ],
)
def test_rank_health_from_the_agents_answer(
    found: dep.NodeFacts | None, fresh: bool, health: tuple[bool, bool, str | None]
) -> None:
    got = sharded.rank_health(found, slot=SLOT, group_id="g0-1", fresh=fresh)
    assert (got.ready, got.failed, got.message) == health


def on_a_and_b(*, kept: bool = False) -> groupplacement.GroupDecision:
    ranks = (
        groupplacement.RankPlan(0, "a", 3 * GIB, 2),
        groupplacement.RankPlan(1, "b", 3 * GIB, 2),
    )
    return groupplacement.GroupDecision(
        groups=(groupplacement.GroupPlan(index=0, ranks=ranks, kept=kept),),
        rejections=(),
        missing=0,
    )


def judge(
    md: mdep.ModelDeployment,
    found: dict[str, dep.NodeFacts],
    *,
    decision: groupplacement.GroupDecision | None = None,
    reforming: frozenset[int] = frozenset(),
    plan: plans.PlanInfo | None = None,
) -> sharded.Result:
    decision = decision if decision is not None else on_a_and_b()
    forms = sharded.formations(md, decision, found, frozenset(), slot=SLOT)
    return sharded.status(
        md,
        decision=decision,
        forms=forms,
        facts=found,
        fresh=BOTH,
        outcomes={},
        endpoint="big.ns.svc",
        now=NOW,
        reforming=reforming,
        slot=SLOT,
        plan=plan,
    )


def ready(result: sharded.Result) -> cond.Condition:
    found = cond.find(result.status.conditions, cond.ConditionType.READY)
    assert found is not None
    return found


def test_a_group_is_ready_when_every_rank_is_and_only_rank_0_is_published() -> None:
    md = deployment()
    loading = judge(md, {"a": rank("a", "g0-1"), "b": rank("b", "g0-1", phase="Loading")})
    (group,) = loading.status.groups
    assert (group.id, group.ready, [r.ready for r in group.ranks]) == ("g0-1", False, [True, False])
    (placed,) = loading.status.placements
    assert placed.node == "a"
    assert placed.phase == mdep.PlacementPhase.LOADING
    assert placed.message == "rank 1 on b: loading"
    assert loading.endpoints == (("a", "http://a:9000", False),)
    port = sharded.ring_port(SLOT, "g0-1", 1, salt=md.metadata.uid or "")
    assert group.ranks[1].endpoint == f"10.0.0.1:{port}"  # the ring address
    assert ready(loading).reason == cond.Reason.LOADING
    serving = judge(md, {"a": rank("a", "g0-1"), "b": rank("b", "g0-1")})
    assert serving.status.ready_replicas == 1
    assert serving.endpoints == (("a", "http://a:9000", True),)
    assert ready(serving).status == "True"
    assert ready(serving).message == "1/1 groups ready"
    assert serving.status.estimated_memory_bytes == 6 * GIB


def test_a_group_waiting_to_re_form_keeps_its_ranks_not_ready() -> None:
    ranks = [
        {"rank": 0, "node": "a", "ready": True, "endpoint": "http://a:9000", "memoryBytes": 1},
        {"rank": 1, "node": "b", "ready": True, "memoryBytes": 1},
    ]
    md = deployment(groups=[{"index": 0, "id": "g0-1", "ready": True, "ranks": ranks}])
    nothing = groupplacement.GroupDecision(groups=(), rejections=(), missing=1)
    result = judge(md, {}, decision=nothing, reforming=frozenset({0}))
    (group,) = result.status.groups
    assert not group.ready
    assert group.broken_at == NOW.isoformat()
    assert {r.message for r in group.ranks} == {"group is re-forming"}
    assert result.endpoints == (("a", "http://a:9000", False),)
    assert ready(result).reason == cond.Reason.GROUP_REFORMING
    assert "re-forming group(s) [0]" in ready(result).message


def test_a_swapping_group_is_published_while_rank_0s_agent_serves() -> None:
    md = deployment(groups=[{"index": 0, "id": "g0-1", "ready": True, "ranks": []}])
    swapping = plans.PlanInfo(
        name="p",
        target=ModelRef(SOURCE),
        phase=swp.SwapPhase.PROGRESSING,
        paused=False,
        swapping=frozenset({0}),
    )
    found = {"a": rank("a", "g0-1", swap=True), "b": rank("b", "g0-1", swap=True)}
    result = judge(md, found, decision=on_a_and_b(kept=True), plan=swapping)
    assert not result.status.groups[0].ready  # its ranks are swapping
    assert result.endpoints == (("a", "http://a:9000", True),)  # the old rank 0 serves
    assert ready(result).reason == cond.Reason.SWAP_IN_PROGRESS
    assert result.status.swap_plan == "p"
