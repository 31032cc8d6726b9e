"""Heat in the agent's telemetry: the interval's worst level, time under pressure, hottest
temperatures and GPU busy time; the series the alert rules read; GET /v1/state's `thermal`."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from mlxfleet_agent import contract
from mlxfleet_agent.telemetry import intervals, recorder

T0 = 1_790_000_040.0  # an exact multiple of 60 s
GIB = 2**30
COOL = intervals.HostSample(
    memory_total_bytes=64 * GIB,
    memory_used_bytes=20 * GIB,
    memory_available_bytes=44 * GIB,
    pressure="normal",
    power_watts=30.0,
    power_source="macmon",
    thermal="nominal",
    thermal_reason="macOS thermal pressure level 0",
    gpu_utilization=0.25,
    gpu_temperature_c=51.0,
    cpu_temperature_c=48.0,
)
HOT = replace(
    COOL,
    thermal="serious",
    thermal_reason="powermetrics thermal pressure Heavy",
    gpu_utilization=1.0,
    gpu_temperature_c=97.5,
    cpu_temperature_c=92.0,
)


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def sampled(*samples: intervals.HostSample, every: float = 5.0) -> recorder.Telemetry:
    """A telemetry that took `samples`, `every` seconds apart from T0."""
    clock = Clock(T0)
    tel = recorder.Telemetry(node="mac-1", interval_seconds=60, clock=clock)
    for s in samples:
        tel.add_host_sample(s)
        clock.t += every
    return tel


def test_an_interval_keeps_the_worst_level_and_the_time_under_pressure() -> None:
    tel = sampled(COOL, HOT, HOT, COOL)
    host = tel.checkpoint(T0 + 20).host
    # each sample stands for the time since the one before: two hot samples, 5 s each
    assert (host.thermal_pressure_max, host.thermal_pressure_seconds) == ("serious", 10.0)
    assert (host.gpu_temperature_max_celsius, host.cpu_temperature_max_celsius) == (97.5, 92.0)
    assert host.gpu_busy_seconds == pytest.approx(5 * 1.0 + 5 * 1.0 + 5 * 0.25)
    assert host.gpu_sampled_seconds == pytest.approx(15.0)
    assert host.power_source == "macmon"  # the meter, not "powermetrics"


def test_a_host_without_heat_sources_reports_none() -> None:
    bare = replace(
        COOL,
        thermal=None,
        thermal_reason=None,
        gpu_utilization=None,
        gpu_temperature_c=None,
        cpu_temperature_c=None,
        power_watts=None,
        power_source=None,
    )
    tel = sampled(bare, bare)
    host = tel.checkpoint(T0 + 10).host
    assert host.thermal_pressure_max is None
    assert (host.gpu_temperature_max_celsius, host.cpu_temperature_max_celsius) == (None, None)
    assert (host.thermal_pressure_seconds, host.gpu_sampled_seconds) == (0.0, 0.0)
    assert tel.thermal() == contract.ThermalInfo()  # sampled, and nothing to tell
    assert recorder.Telemetry(node="mac-1").thermal() is None  # not sampled yet
    text = tel.metrics.exposition().decode()
    assert "thermal_pressure" not in text
    assert "temperature" not in text


def test_a_checkpoint_restored_into_the_same_interval_keeps_the_heat() -> None:
    before = sampled(COOL, HOT, HOT)
    saved = before.checkpoint(T0 + 15)
    after = sampled()
    assert after.restore(saved) is None
    host = after.checkpoint(T0 + 15).host
    assert host.thermal_pressure_max == "serious"
    assert host.thermal_pressure_seconds == saved.host.thermal_pressure_seconds
    assert host.gpu_busy_seconds == saved.host.gpu_busy_seconds
    assert host.gpu_temperature_max_celsius == 97.5


def test_the_series_the_alert_rules_read() -> None:
    """`mlxfleet_agent_thermal_pressure{level}` (one-hot over nominal, fair, serious,
    critical), GPU utilisation and temperatures, power with its meter: the names the chart's
    PrometheusRule and dashboard use."""
    text = sampled(COOL, HOT).metrics.exposition().decode()
    levels = dict(
        re.findall(r'^mlxfleet_agent_thermal_pressure\{level="(\w+)"\} (\S+)$', text, re.M)
    )
    assert levels == {"nominal": "0.0", "fair": "0.0", "serious": "1.0", "critical": "0.0"}
    assert "mlxfleet_agent_gpu_utilization_ratio 1.0" in text
    assert "mlxfleet_agent_gpu_temperature_celsius 97.5" in text
    assert "mlxfleet_agent_cpu_temperature_celsius 92.0" in text
    assert 'mlxfleet_agent_power_watts{source="macmon"} 30.0' in text


def test_state_reports_the_last_sample() -> None:
    got = sampled(COOL, HOT).thermal()
    assert got == contract.ThermalInfo(
        level="serious",
        level_reason="powermetrics thermal pressure Heavy",
        gpu_utilization=1.0,
        gpu_temperature_celsius=97.5,
        cpu_temperature_celsius=92.0,
        power_watts=30.0,
        power_source="macmon",
    )
    wire = got.model_dump(by_alias=True, exclude_none=True)
    assert wire["levelReason"] == "powermetrics thermal pressure Heavy"
