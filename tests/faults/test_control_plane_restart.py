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

from mlxfleet_operator.adapters import leader
from mlxfleet_operator.core.kit import leadership, naming
from mlxfleet_operator.dev import controlplane
from tests.e2e.conftest import is_true, wait_for
from tests.faults.steps import Fleet, assert_swapped_cleanly, slot_counts, swap_during

pytestmark = [pytest.mark.faults, pytest.mark.cluster, pytest.mark.mlx, pytest.mark.timeout(600)]

RENEW_DEADLINE = leadership.Timing.renew_deadline  # the operator's default --renew-deadline
DOWN = 2.0  # seconds the part stays stopped (on top of its stop and start)
PARTS = [
    pytest.param("kube-apiserver", id="apiserver"),
    pytest.param("etcd", id="etcd", marks=pytest.mark.slow),
]


def fenced(fleet: Fleet) -> int:
    return sum(r.exits.count(75) for r in fleet.operators.replicas.values())


@pytest.mark.parametrize("part", PARTS)
def test_restart_mid_plan(
    part: str,
    cluster: controlplane.ControlPlane,
    fleet: Fleet,
    figures: dict[str, object],
    model_a: Path,
    model_b: Path,
) -> None:
    pool = [fleet.agents.start("a"), fleet.agents.start("b")]
    for agent in pool:
        fleet.e2e.register(agent)
    fleet.elect_two()
    fleet.deploy("chat", model_a)
    back: list[float] = []

    def restart() -> None:
        controlplane.restart(cluster, part, down=DOWN)
        back.append(time.time())

    swap = swap_during(fleet, model_b, inject=restart)
    figures.update(
        scenario=f"2 {part} restarted mid-SwapPlan",
        outage_s=round(back[0] - swap.injected, 2),
        converge_s=round(swap.completed - swap.injected, 2),
        leaders_fenced=fenced(fleet),
        requests_ok=swap.load.ok,
        requests_failed=swap.load.failed,
    )
    assert_swapped_cleanly(fleet, swap, pool, model_b)
    assert fleet.operators.leader().alive(), fleet.operators.logs()
    assert_fenced_in_time(fleet, swap.injected, back[0])


def assert_fenced_in_time(fleet: Fleet, began: float, back: float) -> None:
    """The API was away far longer than the renew deadline: the leader must have fenced (exit 75)
    by its renew deadline, before the API could be back (`back` is later: when restart() saw it
    answer), not once a standby took the Lease after it came back."""
    assert back - began > DOWN + RENEW_DEADLINE
    fenced_at = [
        t
        for r in fleet.operators.replicas.values()
        for code, t in zip(r.exits, r.exited_at, strict=False)  # the supervisor may be mid-append
        if code == leader.EXIT_LOST_LEASE
    ]
    in_time = began + DOWN + RENEW_DEADLINE
    assert [t for t in fenced_at if began < t < in_time], (fenced_at, began, back)


@pytest.mark.parametrize("part", PARTS)
def test_restart_mid_failover(
    part: str,
    cluster: controlplane.ControlPlane,
    fleet: Fleet,
    figures: dict[str, object],
    model_a: Path,
) -> None:
    e2e = fleet.e2e
    pool = {e2e.register(x): x for x in (fleet.agents.start(n) for n in ("a", "b", "c"))}
    fleet.elect_two()
    fleet.deploy("chat", model_a)
    lost, kept = fleet.placed("chat")
    spare = next(n for n in pool if n not in (lost, kept))
    with fleet.traffic("chat") as load:
        time.sleep(1)
        pool[lost].kill()
        wait_for("lost node NotReady", lambda: fleet.node_reason(lost) == "HeartbeatMissed")
        began = time.time()  # within the failover delay: the replica has not moved yet
        controlplane.restart(cluster, part, down=DOWN)
        back = time.time()
        wait_for(
            "replica re-placed on the spare node",
            lambda: (
                fleet.placed("chat") == sorted([kept, spare])
                and is_true(e2e.get("mdep", "chat"), "Ready")
            ),
            timeout=300,
        )
        converged = time.time()
        time.sleep(2)
    slot = naming.slot_name(e2e.namespace, "chat")
    figures.update(
        scenario=f"2 {part} restarted mid-failover",
        converge_s=round(converged - began, 2),
        requests_ok=load.ok,
        requests_failed=load.failed,
        failed_after_restart=len(load.failures(since=began)),
        leaders_fenced=fenced(fleet),
    )
    assert e2e.get("mdep", "chat")["status"]["readyReplicas"] == 2
    assert slot_counts([pool[kept], pool[spare]], slot) == {pool[kept].name: 1, pool[spare].name: 1}
    # Clients fail only on the dead agent, and only while the EndpointSlice still lists it: with
    # the API server down nobody can take it out (kube-proxy keeps the last endpoints too);
    # a gateway that ejects a dead agent and retries before the first byte would hide these.
    assert all(o.endpoint == pool[lost].data_url for o in load.failures()), load.errors[:5]
    assert all(o.started < converged for o in load.failures()), load.errors[:5]
    assert load.lost() == 0
    assert fleet.operators.leader().alive(), fleet.operators.logs()
    assert_fenced_in_time(fleet, began, back)
