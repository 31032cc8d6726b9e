"""The heat parsers against recorded outputs of the real tools (tests/fixtures/host, SOURCES.md
says where each comes from), and the meter that asks every source the host has."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlxfleet_agent.host import heatparse
from mlxfleet_agent.telemetry import heat

HOST = Path(__file__).resolve().parents[2] / "fixtures" / "host"
MACOS, LINUX = HOST / "macos", HOST / "linux"


def read(name: str) -> heatparse.HeatReading:
    return heatparse.any_format((HOST / name).read_bytes())


@pytest.mark.parametrize(
    ("name", "level", "said"),
    [
        pytest.param(
            "macos/powermetrics-thermal-nominal-macos26.txt", "nominal", "Nominal", id="nominal"
        ),
        pytest.param(
            "macos/powermetrics-thermal-moderate-macos26.txt", "fair", "Moderate", id="moderate"
        ),
        pytest.param(
            "macos/powermetrics-thermal-heavy-CONSTRUCTED.txt", "serious", "Heavy", id="heavy"
        ),
        pytest.param(
            "macos/powermetrics-thermal-trapping-CONSTRUCTED.txt", "critical", "Trapping", id="trap"
        ),
    ],
)
def test_powermetrics_thermal_pressure_maps_to_macos_levels(
    name: str, level: str, said: str
) -> None:
    got = read(name)
    assert got.level == level
    assert got.level_source == f"powermetrics thermal pressure {said}"


def test_powermetrics_cpu_gpu_and_thermal_samplers_of_macos_26() -> None:
    """Mac14,2 on macOS 26 (cpu_power + thermal): the last of its two samples counts."""
    got = read("macos/powermetrics-cpu_power-thermal-mac14.2-macos26.txt")
    assert (got.level, got.power_watts, got.power_source) == ("nominal", 0.445, "powermetrics")
    assert got.gpu_utilization is None  # no gpu_power sampler in this recording


def test_powermetrics_gpu_residency_and_combined_power_of_an_m4_max() -> None:
    got = read("macos/powermetrics-default-m4max-macos15.5.txt")
    assert got.gpu_utilization == pytest.approx(0.0163)
    assert got.power_watts == pytest.approx(0.983)  # Combined Power (CPU + GPU + ANE)
    assert got.level is None  # the default samplers have no thermal section


def test_powermetrics_package_power_of_an_m1_on_macos_12() -> None:
    """macOS 12 printed no combined line: package power stands in."""
    got = read("macos/powermetrics-cpu_power-m1-macos12.6.txt")
    assert got.power_watts == pytest.approx(1.473)
    assert got.gpu_utilization is None


def test_powermetrics_plist_of_an_m3_max() -> None:
    got = read("macos/powermetrics-default-m3max-macos15.4.1.plist")
    assert got.gpu_utilization == pytest.approx(1 - 0.922477)
    assert got.power_watts == pytest.approx(0.218952)  # processor.combined_power, mW
    assert got.power_source == "powermetrics"


def test_powermetrics_plist_thermal_key() -> None:
    """`thermal_pressure` is a top-level string of the plist (the thermal sampler)."""
    recorded = (MACOS / "powermetrics-default-m3max-macos15.4.1.plist").read_bytes()
    heavy = recorded.replace(
        b"<key>is_delta</key>",
        b"<key>thermal_pressure</key>\n\t<string>Heavy</string>\n\t<key>is_delta</key>",
        1,
    )
    assert heatparse.powermetrics_plist(heavy).level == "serious"


def test_macmon_gives_temperatures_gpu_and_system_power_without_root() -> None:
    got = read("macos/macmon-pipe.jsonl")  # its last line counts
    assert got.cpu_temperature_c == pytest.approx(46.749672)
    assert got.gpu_temperature_c == pytest.approx(44.735157)
    assert got.gpu_utilization == pytest.approx(0.09375177)
    assert got.power_watts == pytest.approx(12.072607)
    assert got.power_source == "macmon"
    assert got.level is None


def test_pmset_therm_without_a_speed_limit_is_nominal() -> None:
    got = read("macos/pmset-g-therm.txt")
    assert (got.level, got.level_source) == ("nominal", "pmset CPU_Speed_Limit 100")
    limited = (MACOS / "pmset-g-therm.txt").read_text().replace("= 100\n", "= 62\n")
    assert heatparse.pmset_therm(limited).level == "serious"


@pytest.mark.parametrize(
    ("line", "level"),
    [
        pytest.param(f"{heatparse.NOTIFY_KEY} 0\n", "nominal", id="0"),
        pytest.param(f"{heatparse.NOTIFY_KEY} 1\n", "fair", id="1"),
        pytest.param(f"{heatparse.NOTIFY_KEY} 2\n", "serious", id="2"),
        pytest.param(f"{heatparse.NOTIFY_KEY} 4\n", "critical", id="4"),
    ],
)
def test_the_thermal_pressure_notification_levels(line: str, level: str) -> None:
    """notifyutil's `<key> <n>` (OSThermalNotification.h levels; no public recording: built
    from the header's numbering)."""
    assert heatparse.any_format(line.encode()).level == level


def test_nvidia_smi_csv_recorded_on_real_gpus() -> None:
    rtx = read("linux/nvidia-smi-rtxpro6000.csv")
    assert (rtx.gpu_utilization, rtx.gpu_temperature_c) == (0.01, 35.0)
    assert (rtx.power_watts, rtx.power_source) == (91.74, "nvidia-smi")
    assert rtx.level == "nominal"  # clocks_event_reasons.active is 0
    gb10 = read("linux/nvidia-smi-gb10.csv")
    assert (gb10.gpu_temperature_c, gb10.power_watts, gb10.level) == (50.0, 15.57, None)
    hgx = read("linux/nvidia-smi-hgx-gpu0.csv")
    assert (hgx.gpu_temperature_c, hgx.power_watts) == (69.0, 892.33)


def test_nvidia_thermal_slowdown_is_pressure() -> None:
    got = read("linux/nvidia-smi-thermal-slowdown-CONSTRUCTED.csv")
    assert got.level == "critical"  # GPU 1: hardware thermal slowdown
    assert got.level_source == "nvidia-smi: GPU 1 hardware thermal slowdown active"
    assert (got.gpu_utilization, got.gpu_temperature_c) == (1.0, 91.0)
    assert got.power_watts == pytest.approx(689.20 + 694.71)  # every GPU of the node
    software = heatparse.nvidia_smi(
        "index, clocks_throttle_reasons.sw_thermal_slowdown\n0, Active\n"  # the old name
    )
    assert software.level == "serious"


def test_nothing_recognisable_reads_as_nothing() -> None:
    for text in (b"", b"garbage\n", b"{not json", b"<?xml version='1.0'?><plist><oops"):
        assert heatparse.any_format(text).empty


# ---- Linux sysfs, through the meter ------------------------------------------------------------


def meter_on(tree: Path, **kw: object) -> heat.HeatMeter:
    return heat.HeatMeter(sysfs=tree, run=lambda argv, timeout: None, macos=False, **kw)  # type: ignore[arg-type]


def test_the_kernel_documentation_zone_is_nominal() -> None:
    got = meter_on(LINUX / "sysfs-doc").read()
    assert got.level == "nominal"
    assert got.cpu_temperature_c == 37.0
    assert got.level_source == "thermal zone thermal_zone1 (acpitz) at 37.0 °C"


def test_a_zone_past_its_passive_trip_throttles_and_rapl_gives_power(tmp_path: Path) -> None:
    tree = tmp_path / "sys"
    shutil.copytree(LINUX / "sysfs-hot-CONSTRUCTED", tree)
    clock = iter([100.0, 102.0])
    meter = meter_on(tree, clock=lambda: next(clock))
    first = meter.read()
    assert first.level == "serious"  # 85 °C >= the passive trip at 80 °C
    assert first.cpu_temperature_c == 86.0  # coretemp's package, hotter than the zone
    assert first.power_watts is None  # RAPL needs two readings
    energy = tree / "class" / "powercap" / "intel-rapl:0" / "energy_uj"
    energy.write_text("31000000\n")  # 30 J in 2 s
    second = meter.read()
    assert second.power_watts == pytest.approx(15.0)
    assert second.power_source == "rapl"


@pytest.mark.parametrize(
    ("temp", "level"),
    [
        pytest.param(74_000, "nominal", id="cool"),
        pytest.param(76_000, "fair", id="near-passive"),
        pytest.param(80_000, "serious", id="passive"),
        pytest.param(100_000, "critical", id="critical"),
    ],
)
def test_zone_levels_follow_the_trip_points(temp: int, level: str) -> None:
    trips = (("active0", 70_000), ("critical", 100_000), ("passive", 80_000))
    zone = heatparse.Zone("thermal_zone0", "x86_pkg_temp", temp, trips)
    assert heatparse.thermal_zones([zone]).level == level


def test_rapl_wraps_around_its_range() -> None:
    before = heatparse.EnergyCounter(uj=990_000_000, at=0.0, range_uj=1_000_000_000)
    after = heatparse.EnergyCounter(uj=10_000_000, at=2.0, range_uj=1_000_000_000)
    assert heatparse.rapl_watts(before, after) == pytest.approx(10.0)


# ---- the meter's sources ---------------------------------------------------------------------


def test_the_meter_folds_every_macos_source_and_drops_a_refused_one() -> None:
    outputs = {
        "sudo": None,  # powermetrics refused (no sudoers rule)
        "macmon": (MACOS / "macmon-pipe.jsonl").read_text(),
        "notifyutil": f"{heatparse.NOTIFY_KEY} 1\n",
        "pmset": (MACOS / "pmset-g-therm.txt").read_text(),
    }
    asked: list[str] = []

    def run(argv: list[str], timeout: float) -> str | None:
        asked.append(argv[0])
        return outputs[argv[0]]

    meter = heat.HeatMeter(run=run, macos=True)
    got = meter.read()
    assert got.level == "fair"  # the notification's moderate beats pmset's nominal
    assert got.cpu_temperature_c == pytest.approx(46.749672)  # from macmon
    assert got.power_source == "macmon"
    assert asked == ["sudo", "macmon", "notifyutil", "pmset"]
    asked.clear()
    meter.read()
    assert asked == ["macmon", "notifyutil", "pmset"]  # a refusal is not asked again


def test_the_thermal_file_replaces_every_source(tmp_path: Path) -> None:
    recorded = tmp_path / "thermal.txt"
    shutil.copy(MACOS / "powermetrics-thermal-heavy-CONSTRUCTED.txt", recorded)

    def never(argv: list[str], timeout: float) -> str | None:
        raise AssertionError(f"ran {argv}")

    meter = heat.HeatMeter(thermal_files=[recorded], run=never, macos=True)
    assert meter.read().level == "serious"
    shutil.copy(MACOS / "powermetrics-thermal-nominal-macos26.txt", recorded)
    assert meter.read().level == "nominal"  # read again each time
    recorded.unlink()
    assert meter.read().empty
    two = heat.HeatMeter(
        thermal_files=[
            MACOS / "powermetrics-thermal-heavy-CONSTRUCTED.txt",
            MACOS / "macmon-pipe.jsonl",
        ],
        run=never,
    )
    got = two.read()  # folded as the host's own sources are: powermetrics' level, macmon's heat
    assert got.level == "serious"
    assert got.cpu_temperature_c == pytest.approx(46.749672)
    assert got.power_source == "powermetrics"  # the first file's power
