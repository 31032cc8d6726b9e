"""The scale benchmark at CI size: 50 hollow Macs and 100 ModelDeployments on a real control plane
with the operator as its own identity. Everything converges, a lost tenth of the fleet fails over
without a replica counted twice or flapping back, and model changes of a fifth complete."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.scale import run

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(1800)]


def test_hollow_fleet_and_operator_converge_fail_over_and_swap(tmp_path: Path) -> None:
    settings = run.Settings(
        nodes=50,
        deployments=100,
        steady_s=15,
        converge_timeout_s=600,
        phase_timeout_s=400,
        root=tmp_path,
    )
    r = run.run(settings)
    assert r["nodes_ready_s"] is not None
    assert r["ready_at_end"] == 100, r["converge_timeline"]
    assert r["converge_total_s"] is not None
    assert r["lost_nodes"] == 5
    assert r["failover_moved"] == r["affected_deployments"] > 0
    assert r["failover_s"] is not None
    assert r["counted_twice"] == {"status": 0, "agents": 0, "handover": 0}
    assert r["flap_watched"] == r["affected_deployments"]  # every one failed over, all watched
    assert r["flapping_deployments"] == 0
    assert r["stale_slots_after_window"] == 0
    assert r["swap_plan_phases"] == {"Completed": 20}
