"""Host readings for telemetry: memory, memory pressure and, from `heat.HeatMeter`, thermal
pressure, GPU utilisation, temperatures and measured power.

Memory pressure (`pressure`, pure; `read_pressure` reads the host): macOS's own level where
there is one (`kern.memorystatus_vm_pressure_level`, what `memory_pressure` reports), else the
worse of the share of memory available and Linux pressure stall information
(`/proc/pressure/memory`, or a cgroup's `memory.pressure`), with the reading that decided it.

Power is measured when a meter can read it (powermetrics where permitted, macmon, RAPL,
nvidia-smi: `telemetry.heat`); otherwise it is None and the interval's energy is estimated from
the node's nominal idle/busy watts and marked `estimated`.
May import: psutil, the standard library, host (platform, heatparse), telemetry (intervals,
heat). Called by:
telemetry.shipper (samples), controlapi.state (the pressure level of GET /v1/state).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import psutil

from mlxfleet_agent.host import heatparse
from mlxfleet_agent.host import platform as agent_platform
from mlxfleet_agent.telemetry import heat, intervals

IS_MACOS = agent_platform.IS_MACOS


PSI_FILE = Path("/proc/pressure/memory")  # Linux pressure stall information (kernel 4.20+)
AVAILABLE_WARN = 0.15  # share of memory available below which the level is warn
AVAILABLE_CRITICAL = 0.05  # ... critical
PSI_SOME_WARN = 10.0  # % of the last 10 s in which some task stalled on memory: warn
PSI_FULL_CRITICAL = 10.0  # % of the last 10 s in which every task stalled on memory: critical
LEVELS = ("normal", "warn", "critical")
_MACOS_LEVELS = {1: "normal", 2: "warn", 4: "critical"}
_PSI_LINE = re.compile(r"^(some|full)\s.*?\bavg10=([0-9.]+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Pressure:
    """The host's memory pressure level and what it comes from (the InferenceNode's
    MemoryPressure condition says it)."""

    level: str  # one of LEVELS
    why: str


def parse_psi(text: str) -> tuple[float, float] | None:
    """(some avg10, full avg10) from a PSI file (`/proc/pressure/memory`, a cgroup's
    `memory.pressure`); None when it has neither line."""
    found = {kind: float(value) for kind, value in _PSI_LINE.findall(text)}
    if "some" not in found:
        return None
    return found["some"], found.get("full", 0.0)


def pressure(
    *,
    total: int,
    available: int,
    macos_level: int | None = None,
    psi: tuple[float, float] | None = None,
) -> Pressure:
    """The level: macOS's own when known (`kern.memorystatus_vm_pressure_level`, what
    `memory_pressure` prints), else the worse of the share of memory available and, on Linux,
    pressure stall information (the time tasks waited for memory over the last 10 s)."""
    if macos_level is not None:
        level = _MACOS_LEVELS.get(macos_level, "normal")
        return Pressure(level, f"macOS memory pressure level {macos_level} ({level})")
    share = available / total if total else 1.0
    level = (
        "critical" if share < AVAILABLE_CRITICAL else "warn" if share < AVAILABLE_WARN else "normal"
    )
    why = f"{share * 100:.1f}% of memory available"
    if psi is not None:
        some, full = psi
        stalled = (
            "critical"
            if full >= PSI_FULL_CRITICAL
            else "warn"
            if some >= PSI_SOME_WARN
            else "normal"
        )
        stall = f"PSI memory some avg10={some:.2f}% full avg10={full:.2f}%"
        if LEVELS.index(stalled) > LEVELS.index(level):
            level, why = stalled, f"{stall}, {why}"
        else:
            why = f"{why}, {stall}"
    return Pressure(level, why)


def pressure_level(*, total: int, available: int, macos_level: int | None = None) -> str:
    """normal / warn / critical: macOS's own level when known, else from the available share."""
    return pressure(total=total, available=available, macos_level=macos_level).level


def read_pressure(psi_file: Path | None = PSI_FILE) -> Pressure:
    """This host's memory pressure now (psutil, macOS's sysctl, the PSI file when readable)."""
    mem = agent_platform.memory()
    return pressure(
        total=mem.total_bytes,
        available=mem.available_bytes,
        macos_level=_macos_pressure(),
        psi=_psi(psi_file),
    )


def _psi(path: Path | None) -> tuple[float, float] | None:
    if path is None or agent_platform.IS_MACOS:
        return None
    try:
        return parse_psi(path.read_text(encoding="ascii", errors="replace"))
    except OSError:  # no PSI (older kernel, disabled, a container without it)
        return None


def _macos_pressure() -> int | None:
    level = agent_platform.sysctl("kern.memorystatus_vm_pressure_level")
    try:
        return int(level) if level is not None else None
    except ValueError:
        return None


def sample(
    meter: heat.HeatMeter | None = None, psi_file: Path | None = PSI_FILE
) -> intervals.HostSample:
    """Memory, memory pressure and (with a meter) the host's heat and measured power."""
    vm = psutil.virtual_memory()
    total, available = int(vm.total), int(vm.available)
    level = pressure(
        total=total, available=available, macos_level=_macos_pressure(), psi=_psi(psi_file)
    ).level
    reading = meter.read() if meter is not None else heatparse.HeatReading()
    return intervals.HostSample(
        memory_total_bytes=total,
        memory_used_bytes=total - available,
        memory_available_bytes=available,
        pressure=level,
        power_watts=reading.power_watts,
        power_source=reading.power_source,
        thermal=reading.level,
        thermal_reason=reading.level_source,
        gpu_utilization=reading.gpu_utilization,
        gpu_temperature_c=reading.gpu_temperature_c,
        cpu_temperature_c=reading.cpu_temperature_c,
    )
