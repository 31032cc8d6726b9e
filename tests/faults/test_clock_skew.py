"""Scenario 8: the clock of an agent's Mac is 5 minutes ahead of or behind the operator's
(libfaketime from Debian's `faketime` package, preloaded into the agent and its backends; the
monotonic clock is left alone, as NTP would).

Heartbeats are the operator's own clock and stay right: the node is Ready, its
`lastHeartbeatTime` is the operator's now, the deployment serves. A SwapPlan on that node must
complete with a timeline on one clock (startedAt <= warmAt <= switchedAt <= finishedAt, inside the
plan's own start and end): the step finds the agent's swap record by the requestId it PUT with
(never by comparing the two clocks), and puts the record's times on the operator's clock with the
offset it measures on each /v1/state answer (the agent's `now`)."""

from __future__ import annotations

import glob
import itertools
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.faults.steps import Fleet

LIBFAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
pytestmark = [
    pytest.mark.faults,
    pytest.mark.cluster,
    pytest.mark.mlx,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not LIBFAKETIME, reason="libfaketime missing: apt-get install faketime"),
]
SKEW = timedelta(minutes=5)
PLAN_WAIT = 120.0


def when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


@pytest.mark.parametrize("sign", [pytest.param(1, id="ahead"), pytest.param(-1, id="behind")])
def test_clock_skew_between_operator_and_agent(
    sign: int, fleet: Fleet, figures: dict[str, object], model_a: Path, model_b: Path
) -> None:
    e2e = fleet.e2e
    offset = f"{'+' if sign > 0 else '-'}{int(SKEW.total_seconds())}"
    skewed = fleet.agents.start(
        "skewed",
        env={
            "LD_PRELOAD": LIBFAKETIME[0],
            "FAKETIME": offset,
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        },
    )
    node = e2e.register(skewed)
    fleet.operators.start("op-1", standalone=True)
    fleet.deploy("chat", model_a, replicas=1)
    status = e2e.get("inode", node, namespaced=False)["status"]
    beat = when(status["lastHeartbeatTime"])
    assert beat is not None
    assert abs((datetime.now(UTC) - beat).total_seconds()) < 10  # the operator's clock
    assert fleet.node_ready(node)
    with fleet.traffic("chat") as load:
        time.sleep(1)
        plan = fleet.change_model("chat", model_b, replicas=1)
        deadline = time.monotonic() + PLAN_WAIT
        while time.monotonic() < deadline:
            swp = e2e.get("swp", plan)
            if swp.get("status", {}).get("phase") in ("Completed", "Failed", "RolledBack"):
                break
            time.sleep(1)
        time.sleep(1)
    st = swp.get("status", {})
    step = (st.get("steps") or [{}])[0]
    figures.update(
        scenario=f"8 agent clock {offset} s",
        plan_phase=st.get("phase"),
        step_phase=step.get("phase"),
        requests_ok=load.ok,
        requests_failed=load.failed,
    )
    assert load.failed == 0, load.errors[:5]  # the data plane never cares about clocks
    assert fleet.node_ready(node)
    assert st.get("phase") == "Completed", f"plan {st.get('phase')}, step {step}"
    times = [when(step.get(k)) for k in ("startedAt", "warmAt", "switchedAt", "finishedAt")]
    began, ended = when(st.get("startedAt")), when(st.get("completedAt"))
    assert began is not None
    assert ended is not None
    slack = timedelta(seconds=5)
    on_one_clock = all(t is not None and began - slack <= t <= ended + slack for t in times)
    ordered = all(a <= b for a, b in itertools.pairwise(times) if a and b)
    figures["step_times"] = [t.isoformat() if t else None for t in times]
    figures["plan_seconds"] = round((ended - began).total_seconds(), 1)
    assert on_one_clock, f"timeline {times} outside plan {began} - {ended}"
    assert ordered, f"timeline {times} out of order"
    assert step.get("requestId") == f"{swp['metadata']['uid']}.0"
