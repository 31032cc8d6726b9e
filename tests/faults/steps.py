"""Steps the fault scenarios share: a fleet (workspace, agents, operator replicas, admin API),
deploying and swapping under watch, and the whole "lose an agent, route around it, get it back"
sequence that a partition and a sleeping Mac both go through.
May import: tests.e2e, tests.faults.conftest, the standard library. Called by: tests/faults.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlxfleet_operator.core.kit import naming
from tests.e2e.conftest import E2E, Agent, Agents, condition, is_true, wait_for
from tests.e2e.loadgen import DiscoveredLoad
from tests.faults.conftest import Operators, endpoint_urls, plan_status, slots_everywhere, traffic
from tests.support.kubeapi import AdminApi


@dataclass
class Fleet:
    e2e: E2E
    agents: Agents
    operators: Operators
    admin: AdminApi

    def elect_two(self) -> None:
        """Replicas op-1 (the leader) and op-2 (its standby)."""
        self.operators.start("op-1")
        self.operators.leader()
        self.operators.start("op-2")

    def deploy(self, name: str, model: Path, *, replicas: int = 2, **spec: Any) -> dict[str, Any]:
        """Apply a deployment; return it once Ready with its endpoints published."""
        self.e2e.apply(self.e2e.deployment(name, model, replicas=replicas, **spec))
        found = wait_for(
            f"{name} Ready",
            lambda: (d := self.e2e.get("mdep", name)) and is_true(d, "Ready") and d,
        )
        wait_for(
            f"{name}: {replicas} endpoints",
            lambda: len(endpoint_urls(self.admin, self.e2e.namespace, name)) == replicas,
        )
        return dict(found)

    def add_node(self, name: str) -> tuple[Agent, str]:
        agent = self.agents.start(name)
        node = self.e2e.register(agent)
        wait_for(f"{node} Ready", lambda: self.node_ready(node))
        return agent, node

    def change_model(self, name: str, model: Path, **spec: Any) -> str:
        """Apply a new model; the name of the SwapPlan the operator made for it."""
        self.e2e.apply(self.e2e.deployment(name, model, **spec))
        return str(
            wait_for(
                "SwapPlan", lambda: self.e2e.get("mdep", name).get("status", {}).get("swapPlan")
            )
        )

    def wait_plan(self, plan: str, *, timeout: float = 300) -> float:
        """Wait for the plan to complete; the time it did."""
        wait_for(
            f"plan {plan} Completed",
            lambda: plan_status(self.e2e, plan).get("phase") == "Completed",
            timeout=timeout,
        )
        return time.time()

    def traffic(self, name: str) -> DiscoveredLoad:
        return traffic(self.admin, self.e2e, name)

    def node_ready(self, node: str) -> bool:
        return is_true(self.e2e.get("inode", node, namespaced=False), "Ready")

    def node_reason(self, node: str) -> str | None:
        reason = condition(self.e2e.get("inode", node, namespaced=False), "Ready").get("reason")
        return None if reason is None else str(reason)

    def placed(self, name: str) -> list[str]:
        md = self.e2e.get("mdep", name)
        return sorted(p["node"] for p in md.get("status", {}).get("placements", []))

    def event_reasons(self, node: str) -> list[str]:
        out = self.e2e.kubectl(
            "get", "events", "-A", "--field-selector", f"involvedObject.name={node}", "-o", "json"
        )
        return [str(e["reason"]) for e in json.loads(out)["items"]]


def swapped_once(pool: list[Agent], slot: str, source: str) -> None:
    """Each agent swapped `slot` exactly once, to `source`, successfully."""
    for agent in pool:
        assert [(r["toSource"], r["outcome"]) for r in agent.swaps(slot)] == [
            (source, "Completed")
        ], agent.name


def slot_counts(pool: list[Agent], slot: str) -> dict[str, int]:
    return {n: len(s) for n, s in slots_everywhere(pool, slot).items()}


@dataclass
class Outage:
    """What happened while an agent was lost and came back (unix times; `placements`: the
    deployment's nodes sampled every 0.5 s for 10 s after it was back)."""

    load: DiscoveredLoad
    lost_at: float = 0.0
    detected: float = 0.0
    withdrawn: float = 0.0
    replaced: float = 0.0
    restored_at: float = 0.0
    back: float = 0.0
    cleaned: float = 0.0
    placements: list[list[str]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        return {
            "detect_s": round(self.detected - self.lost_at, 2),
            "withdrawn_s": round(self.withdrawn - self.lost_at, 2),
            "replaced_s": round(self.replaced - self.lost_at, 2),
            "ready_after_return_s": round(self.back - self.restored_at, 2),
            "stale_slot_removed_s": round(self.cleaned - self.restored_at, 2),
        }


def lose_and_return(
    fleet: Fleet,
    *,
    lost: Agent,
    lose: Callable[[], None],
    restore: Callable[[], None],
    away: float = 0.0,
    before_restore: Callable[[], None] = lambda: None,
) -> Outage:
    """With deployment `chat` on `lost` and one other node, and a spare node: stream through the
    EndpointSlices, `lose()` the agent, follow detection, withdrawal and re-placement, keep it
    away at least `away` seconds, `restore()` it, follow its return and cleanup."""
    e2e, slot = fleet.e2e, naming.slot_name(fleet.e2e.namespace, "chat")
    node = next(n for n in e2e.nodes if n.endswith(f"-{lost.name}"))
    before = fleet.placed("chat")
    with fleet.traffic("chat") as load:
        out = Outage(load=load)
        time.sleep(2)
        out.lost_at = time.time()
        lose()
        wait_for("node NotReady", lambda: fleet.node_reason(node) == "HeartbeatMissed")
        out.detected = time.time()
        wait_for(
            "endpoint withdrawn",
            lambda: lost.data_url not in endpoint_urls(fleet.admin, e2e.namespace, "chat"),
            interval=0.1,
        )
        out.withdrawn = time.time()
        wait_for(
            "replica re-placed and Ready",
            lambda: (
                node not in (now := fleet.placed("chat"))
                and len(now) == len(before)
                and is_true(e2e.get("mdep", "chat"), "Ready")
            ),
        )
        out.replaced = time.time()
        time.sleep(max(3.0, out.lost_at + away - time.time()))
        before_restore()
        out.restored_at = time.time()
        restore()
        wait_for("node Ready again", lambda: fleet.node_ready(node))
        out.back = time.time()
        wait_for(
            "stale slot removed",
            lambda: slots_everywhere([lost], slot).get(lost.name) == [],
            interval=0.2,
        )
        out.cleaned = time.time()
        for _ in range(20):  # no flapping: the replica stays where it moved
            out.placements.append(fleet.placed("chat"))
            time.sleep(0.5)
    out.reasons = fleet.event_reasons(node)
    return out


def assert_routed_around(
    out: Outage, *, lost: Agent, pool: list[Agent], slot: str, moved_to: list[str]
) -> None:
    """Clients failed only on the lost agent and only until its endpoint was withdrawn; the
    replica stayed where it moved (no flapping); one NotReady flip; one slot per serving node."""
    load = out.load
    assert all(o.endpoint == lost.data_url for o in load.failures()), load.errors[:5]
    assert all(o.started < out.withdrawn + 1 for o in load.failures()), load.errors[:5]
    assert load.lost() == 0
    assert out.placements == [sorted(moved_to)] * len(out.placements)
    assert out.reasons.count("NodeNotReady") == 1, out.reasons
    serving = {a.name: (0 if a is lost else 1) for a in pool}
    assert slot_counts(pool, slot) == serving


@dataclass
class Swap:
    """A model change under load with a fault injected once the plan reached a given point."""

    plan: str
    load: DiscoveredLoad
    injected: float
    completed: float


def step_started(status: dict[str, Any]) -> bool:
    return [s["phase"] for s in status.get("steps", [])][:1] not in ([], ["Pending"])


def first_step_done(status: dict[str, Any]) -> bool:
    return status.get("progress") == "1/2"


def swap_during(
    fleet: Fleet,
    model: Path,
    *,
    when: Callable[[dict[str, Any]], bool] = step_started,
    inject: Callable[[], object] = lambda: None,
) -> Swap:
    """Change deployment `chat` to `model` while clients stream through its EndpointSlices;
    `inject()` once the plan's status satisfies `when`; return when the plan completed and the
    deployment is Ready again."""
    e2e = fleet.e2e
    with fleet.traffic("chat") as load:
        time.sleep(1)
        plan = fleet.change_model("chat", model)
        wait_for(
            "the plan far enough", lambda: when(plan_status(e2e, plan)), timeout=300, interval=0.1
        )
        injected = time.time()
        inject()
        completed = fleet.wait_plan(plan)
        wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
        time.sleep(1)
    return Swap(plan=plan, load=load, injected=injected, completed=completed)


def assert_swapped_cleanly(fleet: Fleet, swap: Swap, pool: list[Agent], model: Path) -> None:
    """No request failed or was left hanging, each node swapped exactly once (no step repeated),
    every step Completed, one slot per node, every replica Ready on the new model."""
    assert swap.load.failed == 0, swap.load.errors[:5]
    assert swap.load.lost() == 0
    assert swap.load.ok > 0
    slot = naming.slot_name(fleet.e2e.namespace, "chat")
    swapped_once(pool, slot, f"file://{model}")
    steps = plan_status(fleet.e2e, swap.plan)["steps"]
    assert [s["phase"] for s in steps] == ["Completed"] * len(pool)
    assert slot_counts(pool, slot) == {a.name: 1 for a in pool}
    status = fleet.e2e.get("mdep", "chat")["status"]
    assert status["readyReplicas"] == len(pool)
    assert [p["source"] for p in status["placements"]] == [f"file://{model}"] * len(pool)
