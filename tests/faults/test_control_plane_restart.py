"""Scenario 2: kube-apiserver (or etcd) restarted in the middle of a SwapPlan and in the middle of
a failover, with two operator replicas and clients streaming through the EndpointSlices.

An API server that is gone longer than the renew deadline makes the leader stop (fencing; its
pod restarts as a standby); once the API server is back a replica takes the Lease, recovers its
watches, and finishes the work from status: the plan completes without a repeated step, the
lost node's replica is re-placed once, no slot exists twice, nothing is stuck."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mlxfleet_operator.core import naming
from mlxfleet_operator.dev import controlplane
from tests.e2e.conftest import E2E, Agents, condition, is_true, wait_for
from tests.faults.conftest import (
    Operators,
    endpoint_urls,
    plan_status,
    slots_everywhere,
    traffic,
)
from tests.support.kubeapi import AdminApi

pytestmark = [pytest.mark.faults, pytest.mark.cluster, pytest.mark.mlx, pytest.mark.timeout(600)]

DOWN = 2.0  # seconds the part stays stopped (on top of its stop and start)
PARTS = [
    pytest.param("kube-apiserver", id="apiserver"),
    pytest.param("etcd", id="etcd", marks=pytest.mark.slow),
]


def two_operators(operators: Operators) -> None:
    operators.start("op-1")
    operators.leader()
    operators.start("op-2")


@pytest.mark.parametrize("part", PARTS)
def test_restart_mid_plan(
    part: str,
    cluster: controlplane.ControlPlane,
    e2e: E2E,
    agents: Agents,
    operators: Operators,
    admin: AdminApi,
    figures: dict[str, object],
    model_a: Path,
    model_b: Path,
) -> None:
    pool = [agents.start("a"), agents.start("b")]
    for agent in pool:
        e2e.register(agent)
    two_operators(operators)
    e2e.apply(e2e.deployment("chat", model_a))
    wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
    wait_for("both endpoints", lambda: len(endpoint_urls(admin, e2e.namespace, "chat")) == 2)
    with traffic(admin, e2e, "chat") as load:
        time.sleep(1)
        e2e.apply(e2e.deployment("chat", model_b))
        plan = str(
            wait_for("SwapPlan", lambda: e2e.get("mdep", "chat").get("status", {}).get("swapPlan"))
        )
        wait_for(
            "first step running",
            lambda: (
                [s["phase"] for s in plan_status(e2e, plan).get("steps", [])][:1]
                not in ([], ["Pending"])
            ),
            interval=0.1,
        )
        began = time.time()
        controlplane.restart(cluster, part, down=DOWN)
        back = time.time()
        wait_for(
            "plan Completed",
            lambda: plan_status(e2e, plan).get("phase") == "Completed",
            timeout=300,
        )
        completed = time.time()
        wait_for("deployment Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
        time.sleep(1)
    fenced = sum(r.exits.count(75) for r in operators.replicas.values())
    figures.update(
        scenario=f"2 {part} restarted mid-SwapPlan",
        outage_s=round(back - began, 2),
        converge_s=round(completed - began, 2),
        leaders_fenced=fenced,
        requests_ok=load.ok,
        requests_failed=load.failed,
    )
    assert load.failed == 0, load.errors[:5]
    assert load.lost() == 0
    slot = naming.slot_name(e2e.namespace, "chat")
    new = f"file://{model_b}"
    for agent in pool:  # each node swapped exactly once
        assert [(r["toSource"], r["outcome"]) for r in agent.swaps(slot)] == [(new, "Completed")]
    assert {n: len(s) for n, s in slots_everywhere(pool, slot).items()} == {"a": 1, "b": 1}
    steps = plan_status(e2e, plan)["steps"]
    assert [s["phase"] for s in steps] == ["Completed", "Completed"]
    assert operators.leader().alive(), operators.logs()


@pytest.mark.parametrize("part", PARTS)
def test_restart_mid_failover(
    part: str,
    cluster: controlplane.ControlPlane,
    e2e: E2E,
    agents: Agents,
    operators: Operators,
    admin: AdminApi,
    figures: dict[str, object],
    model_a: Path,
) -> None:
    pool = {e2e.register(x): x for x in (agents.start("a"), agents.start("b"), agents.start("c"))}
    two_operators(operators)
    e2e.apply(e2e.deployment("chat", model_a))
    md = wait_for(
        "deployment Ready", lambda: (d := e2e.get("mdep", "chat")) and is_true(d, "Ready") and d
    )
    placed = sorted(p["node"] for p in md["status"]["placements"])
    lost, kept = placed
    spare = next(n for n in pool if n not in placed)
    wait_for("both endpoints", lambda: len(endpoint_urls(admin, e2e.namespace, "chat")) == 2)
    with traffic(admin, e2e, "chat") as load:
        time.sleep(1)
        pool[lost].kill()
        wait_for(
            "lost node NotReady",
            lambda: (
                condition(e2e.get("inode", lost, namespaced=False), "Ready").get("reason")
                == "HeartbeatMissed"
            ),
            interval=0.2,
        )
        began = time.time()  # within the failover delay: the replica has not moved yet
        controlplane.restart(cluster, part, down=DOWN)
        moved = wait_for(
            "replica re-placed on the spare node",
            lambda: (
                (d := e2e.get("mdep", "chat"))
                and sorted(p["node"] for p in d["status"]["placements"]) == sorted([kept, spare])
                and is_true(d, "Ready")
                and d
            ),
            timeout=300,
        )
        converged = time.time()
        time.sleep(2)
    slot = naming.slot_name(e2e.namespace, "chat")
    alive = [pool[kept], pool[spare]]
    late = load.failures(since=began)
    figures.update(
        scenario=f"2 {part} restarted mid-failover",
        converge_s=round(converged - began, 2),
        failed_on="the killed agent only, while its endpoint was still published",
        requests_ok=load.ok,
        requests_failed=load.failed,
        failed_after_restart=len(late),
        leaders_fenced=sum(r.exits.count(75) for r in operators.replicas.values()),
    )
    assert moved["status"]["readyReplicas"] == 2
    expected = {pool[kept].name: 1, pool[spare].name: 1}
    assert {n: len(s) for n, s in slots_everywhere(alive, slot).items()} == expected
    # Clients fail only on the dead agent, and only while the EndpointSlice still lists it: with
    # the API server down nobody can take it out (kube-proxy keeps the last endpoints too);
    # a gateway that ejects a dead agent and retries before the first byte would hide these.
    lost_url = pool[lost].data_url
    assert all(o.endpoint == lost_url for o in load.failures()), load.errors[:5]
    assert all(o.started < converged for o in load.failures()), load.errors[:5]
    assert load.lost() == 0
    assert operators.leader().alive(), operators.logs()
