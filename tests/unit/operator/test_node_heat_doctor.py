"""A node's heat and its macOS doctor as the operator writes them: the ThermalPressure condition
and `status.thermal`, one condition per doctor check with its fix, none of it rewritten while
only the figures move; and placement, which keeps new replicas off a hot node and prefers cool
ones."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.core.deployment import replicas
from mlxfleet_operator.core.fleet import facts as dfacts
from mlxfleet_operator.core.fleet import placement
from mlxfleet_operator.core.kit import heartbeat
from mlxfleet_operator.core.node import doctor
from mlxfleet_operator.core.node import status as nodestatus
from tests.unit.operator.builders import GIB, NOW, md, node, state

T = cond.ConditionType
DOC = (Path(__file__).resolve().parents[3] / "docs" / "troubleshooting.md").read_text()


def heated(level: str | None, why: str = "", **figures: Any) -> contract.AgentState:
    info = contract.ThermalInfo(level=level, level_reason=why or None, **figures)
    return state().model_copy(update={"thermal": info})


def poll(
    n: inode.InferenceNode,
    st: contract.AgentState,
    *,
    at: timedelta = timedelta(0),
    every: timedelta = timedelta(seconds=60),
) -> inode.InferenceNodeStatus:
    return nodestatus.status(
        n,
        nodestatus.Poll(st),
        heartbeat.Health(ready=True, last_heartbeat=NOW + at),
        threshold=3,
        now=NOW + at,
        heartbeat_every=every,
    )


def written(n: inode.InferenceNode, status: inode.InferenceNodeStatus) -> inode.InferenceNode:
    return n.model_copy(update={"status": status})


# ---- ThermalPressure -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "status", "reason", "then"),
    [
        pytest.param("nominal", "False", "ThermalNominal", "", id="nominal"),
        pytest.param("fair", "False", "ThermalFair", "placement prefers cooler nodes", id="fair"),
        pytest.param("serious", "True", "ThermalSerious", "no new replicas", id="serious"),
        pytest.param("critical", "True", "ThermalCritical", "no new replicas", id="critical"),
    ],
)
def test_thermal_pressure_mirrors_the_agent(
    level: str, status: str, reason: str, then: str
) -> None:
    got = cond.find(
        poll(node("n1"), heated(level, "powermetrics thermal pressure X")).conditions,
        T.THERMAL_PRESSURE,
    )
    assert got is not None
    assert (got.status.value, got.reason) == (status, reason)
    assert got.message.startswith(f"agent reports thermal pressure {level}: powermetrics")
    assert then in got.message


def test_the_message_stays_while_the_level_does_and_figures_wait_for_the_heartbeat() -> None:
    """A warm Mac's readings move on every poll: its status is rewritten only when the level
    changes or the heartbeat is written (every 60 s here), never poll by poll."""
    n = node("n1")
    first = poll(
        n,
        heated(
            "serious",
            "thermal zone thermal_zone0 (x86_pkg_temp) at 85.0 °C",
            cpu_temperature_celsius=85.2,
        ),
    )
    assert first.thermal is not None
    assert (first.thermal.level, first.thermal.cpu_temperature_celsius) == ("serious", 85)
    second = poll(
        written(n, first),
        heated(
            "serious",
            "thermal zone thermal_zone0 (x86_pkg_temp) at 86.0 °C",
            cpu_temperature_celsius=86.4,
        ),
        at=timedelta(seconds=5),
    )
    assert second == first  # nothing to write
    cooler = poll(
        written(n, first),
        heated("fair", "thermal zone ... at 78.0 °C", cpu_temperature_celsius=78.0),
        at=timedelta(seconds=10),
    )
    assert cooler.thermal is not None
    assert (cooler.thermal.level, cooler.thermal.cpu_temperature_celsius) == ("fair", 78)
    pressure = cond.find(cooler.conditions, T.THERMAL_PRESSURE)
    assert pressure is not None
    assert pressure.status is cond.ConditionStatus.FALSE
    assert pressure.last_transition_time == NOW + timedelta(seconds=10)
    later = poll(
        written(n, cooler),
        heated("fair", "zone at 77.0 °C", cpu_temperature_celsius=77.1, gpu_utilization=0.5),
        at=timedelta(seconds=75),
    )
    assert later.thermal is not None
    assert (later.thermal.cpu_temperature_celsius, later.thermal.gpu_utilization_percent) == (
        77,
        50,
    )
    assert later.last_heartbeat_time == NOW + timedelta(seconds=75)


def test_no_level_no_condition_and_odd_figures_never_fail_the_status() -> None:
    n = node("n1")
    hot = poll(n, heated("critical"))
    assert cond.find(hot.conditions, T.THERMAL_PRESSURE) is not None
    silent = poll(written(n, hot), heated(None, gpu_temperature_celsius=900.0))
    assert cond.find(silent.conditions, T.THERMAL_PRESSURE) is None
    assert silent.thermal is not None
    assert silent.thermal.gpu_temperature_celsius == 200


def test_a_restarted_agent_that_has_not_sampled_yet_leaves_the_heat_as_written() -> None:
    """Its first answers have no `thermal`: a hot node stays closed to new replicas."""
    n = node("n1")
    hot = poll(n, heated("serious", "powermetrics thermal pressure Heavy", power_watts=41.0))
    restarted = poll(written(n, hot), state(), at=timedelta(seconds=5))
    assert restarted.conditions == hot.conditions
    assert restarted.thermal == hot.thermal
    bare = poll(written(n, hot), heated(None), at=timedelta(seconds=10))  # sampled: no source
    assert cond.find(bare.conditions, T.THERMAL_PRESSURE) is None
    assert bare.thermal is None


# ---- placement -------------------------------------------------------------------------------


def hot_fact(name: str, level: str, **kw: Any) -> dfacts.NodeFacts:
    n = node(name)
    st = heated(level, f"powermetrics thermal pressure {level}")
    return dfacts.NodeFacts(
        node=written(n, poll(n, st)), state=st, endpoint=f"http://{name}:9000", **kw
    )


def place(*facts: dfacts.NodeFacts, **spec: Any) -> placement.Decision:
    return replicas.place(
        md(**spec), list(facts), footprint_bytes=GIB, now=NOW, failover_delay=timedelta(seconds=15)
    )


def test_a_node_under_thermal_pressure_takes_no_new_replica_and_says_why() -> None:
    decision = place(hot_fact("n1", "serious"), replicas=1)
    assert decision.missing == 1
    (rejection,) = decision.rejections
    assert rejection.reason == placement.Reason.THERMAL_PRESSURE
    assert "agent reports thermal pressure serious" in rejection.message
    assert "no new replicas are placed here" in rejection.message
    placed = md(replicas=1, placements=[{"node": "n1", "phase": "Ready", "ready": True}])
    kept = replicas.place(
        placed,
        [hot_fact("n1", "critical")],
        footprint_bytes=GIB,
        now=NOW,
        failover_delay=timedelta(seconds=15),
    )
    assert (kept.kept, kept.missing) == (("n1",), 0)  # its own replica stays


@pytest.mark.parametrize("strategy", ["Spread", "BinPack"])
def test_placement_prefers_a_cool_node_to_a_warm_one(strategy: str) -> None:
    decision = place(
        hot_fact("a-warm", "fair"),
        hot_fact("b-cool", "nominal"),
        replicas=1,
        placement={"strategy": strategy},
    )
    assert decision.added == ("b-cool",)
    both = place(hot_fact("a-warm", "fair"), hot_fact("b-cool", "nominal"), replicas=2)
    assert set(both.added) == {"a-warm", "b-cool"}  # warm still serves when needed


# ---- the macOS doctor ------------------------------------------------------------------------


def report(**fields: Any) -> contract.DoctorReport:
    return contract.DoctorReport.model_validate({"checkedAt": NOW, **fields}, by_name=True)


def examined(
    rep: contract.DoctorReport | None,
    *,
    labels: dict[str, str] | None = None,
    free: int = 100 * GIB,
) -> inode.InferenceNodeStatus:
    n = node("mac-1")
    if labels:
        n = n.model_copy(update={"metadata": n.metadata.model_copy(update={"labels": labels})})
    st = state().model_copy(
        update={"doctor": rep, "disk": contract.DiskInfo(free_bytes=free, total_bytes=460 * GIB)}
    )
    return poll(n, st)


def by_type(status: inode.InferenceNodeStatus) -> dict[str, cond.Condition]:
    return {c.type: c for c in status.conditions}


LAPTOP = report(
    sleep_minutes=1,
    display_sleep_minutes=10,
    sleep_prevented_by=["bluetoothd", "coreaudiod"],
    filevault="on",
    restart_updates=["macOS Ventura 13.3.1-22E261"],
    updates_checked_at=NOW,
    thunderbolt_bridge=False,
    disk_min_free_bytes=20 * GIB,
)


def test_a_mac_set_up_badly_shows_each_finding_with_its_fix() -> None:
    got = by_type(examined(LAPTOP, labels={"topology.mlxfleet.io/fabric": "ring-1"}, free=3 * GIB))
    expected = {
        "SleepEnabled": ("SystemSleepEnabled", "sudo pmset -a sleep 0"),
        "FileVaultEnabled": ("FileVaultOn", "sudo fdesetup disable"),
        "DiskPressure": ("ModelStoreDiskLow", "3.0 GiB free of 460.0 GiB (below 20.0 GiB)"),
        "UpdatePending": ("RestartUpdatePending", "macOS Ventura 13.3.1-22E261"),
        "ThunderboltBridgeMissing": (
            "ThunderboltBridgeAbsent",
            "topology.mlxfleet.io/fabric=ring-1",
        ),
    }
    for kind, (reason, said) in expected.items():
        c = got[kind]
        assert (c.status, c.reason) == (cond.ConditionStatus.TRUE, reason), c
        assert said in c.message, c.message
        assert f"docs/troubleshooting.md#{reason.lower()}" in c.message
    assert "held off now by bluetoothd, coreaudiod" in got["SleepEnabled"].message
    assert "AutoRestartDisabled" not in got  # a laptop's pmset has no autorestart line
    assert got["Ready"].status is cond.ConditionStatus.TRUE  # warnings: the node serves
    assert got["Stalled"].status is cond.ConditionStatus.FALSE


def test_a_headless_ready_mac_is_all_clear() -> None:
    ready = report(
        sleep_minutes=0,
        display_sleep_minutes=0,
        auto_restart=True,
        filevault="off",
        restart_updates=[],
        updates_checked_at=NOW,
        thunderbolt_bridge=True,
        disk_min_free_bytes=20 * GIB,
    )
    got = by_type(examined(ready, labels={"topology.mlxfleet.io/fabric": "ring-1"}))
    reasons = {t: got[t].reason for t in map(str, doctor.TYPES)}
    assert reasons == {
        "SleepEnabled": "SleepDisabled",
        "AutoRestartDisabled": "AutoRestartOn",
        "FileVaultEnabled": "FileVaultOff",
        "DiskPressure": "ModelStoreDiskOK",
        "UpdatePending": "NoUpdatePending",
        "ThunderboltBridgeMissing": "ThunderboltBridgePresent",
    }
    assert all(got[t].status is cond.ConditionStatus.FALSE for t in reasons)


@pytest.mark.parametrize(
    ("fields", "kind", "reason"),
    [
        pytest.param(
            {"sleep_minutes": 0, "display_sleep_minutes": 15},
            "SleepEnabled",
            "DisplaySleepEnabled",
            id="display",
        ),
        pytest.param(
            {"auto_restart": False}, "AutoRestartDisabled", "AutoRestartOff", id="restart"
        ),
        pytest.param(
            {"filevault": "encrypting"}, "FileVaultEnabled", "FileVaultOn", id="encrypting"
        ),
    ],
)
def test_other_findings(fields: dict[str, Any], kind: str, reason: str) -> None:
    got = by_type(examined(report(**fields)))[kind]
    assert (got.status, got.reason) == (cond.ConditionStatus.TRUE, reason)


def test_linux_gets_only_the_disk_check_and_a_failed_read_is_unknown() -> None:
    got = by_type(examined(report(disk_min_free_bytes=20 * GIB)))
    assert [t for t in got if t in map(str, doctor.TYPES)] == ["DiskPressure"]
    failed = by_type(
        examined(report(errors={"os-update": "softwareupdate -l: Scan finished with error"}))
    )
    update = failed["UpdatePending"]
    assert (update.status, update.reason) == (cond.ConditionStatus.UNKNOWN, "DoctorCheckFailed")
    assert "Scan finished with error" in update.message


def test_the_bridge_check_needs_a_thunderbolt_fabric() -> None:
    assert "ThunderboltBridgeMissing" not in by_type(examined(LAPTOP))
    ethernet = {
        "topology.mlxfleet.io/fabric": "ring-1",
        "topology.mlxfleet.io/fabric-link": "ethernet",
    }
    assert "ThunderboltBridgeMissing" not in by_type(examined(LAPTOP, labels=ethernet))


def test_free_disk_moving_rewrites_nothing_and_no_report_keeps_what_was_written() -> None:
    n = node("mac-1")
    low = state().model_copy(
        update={
            "doctor": LAPTOP,
            "disk": contract.DiskInfo(free_bytes=3 * GIB, total_bytes=460 * GIB),
        }
    )
    first = poll(n, low)
    lower = low.model_copy(
        update={"disk": contract.DiskInfo(free_bytes=2 * GIB + 5, total_bytes=460 * GIB)}
    )
    assert poll(written(n, first), lower, at=timedelta(seconds=5)).conditions == first.conditions
    before_report = state()  # the agent restarted: no examination yet
    assert (
        poll(written(n, first), before_report, at=timedelta(seconds=5)).conditions
        == first.conditions
    )


def test_every_doctor_reason_has_its_troubleshooting_section_with_a_fix() -> None:
    sections = dict(re.findall(r"^### `(\w+)`\n(.*?)(?=^#{2,3} )", DOC, flags=re.M | re.S))
    for reason in doctor.REASONS:
        assert reason.value in sections, f"docs/troubleshooting.md: no section for {reason.value}"
        assert "**Do:**" in sections[reason.value]
    for reason in doctor.FINDINGS:
        assert "`sudo " in sections[reason.value] or "kubectl" in sections[reason.value], reason
