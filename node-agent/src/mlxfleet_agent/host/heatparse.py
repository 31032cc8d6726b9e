"""What the host's heat tools print, parsed (pure): thermal pressure level, GPU utilisation, GPU
and CPU temperature, power. One `HeatReading` per source; `combine` folds several into one.

Sources: `powermetrics` text or plist (`--samplers cpu_power,gpu_power,thermal`, root or a
sudoers rule), `macmon pipe` (sudoless, github.com/vladkens/macmon), macOS's thermal pressure
notification (`notifyutil -g com.apple.system.thermalpressurelevel`), `pmset -g therm`, Linux
thermal zones and hwmon from sysfs, RAPL energy counters, `nvidia-smi --format=csv`.
Levels use the names of macOS's `ProcessInfo.thermalState` (nominal, fair, serious, critical):
powermetrics' Nominal, Moderate, Heavy and Trapping/Sleeping map to them. Tested against recorded
outputs of the real tools (tests/fixtures/host, SOURCES.md there says where each comes from).
May import: the standard library only. Called by: telemetry.heat.
"""

from __future__ import annotations

import csv
import io
import json
import plistlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from xml.parsers.expat import ExpatError

LEVELS = ("nominal", "fair", "serious", "critical")
# powermetrics' words (and ProcessInfo's own) for the levels
_WORDS = {
    "nominal": "nominal",
    "moderate": "fair",
    "fair": "fair",
    "heavy": "serious",
    "serious": "serious",
    "trapping": "critical",
    "sleeping": "critical",
    "critical": "critical",
}
# OSThermalNotification.h: kOSThermalPressureLevelNominal = 0, Moderate, Heavy, Trapping, Sleeping
_NOTIFY_LEVELS = ("nominal", "fair", "serious", "critical", "critical")
NOTIFY_KEY = "com.apple.system.thermalpressurelevel"
NEAR_PASSIVE_C = 5.0  # a Linux zone this close to its passive trip point reads fair


@dataclass(frozen=True, slots=True)
class HeatReading:
    """One look at the host's heat; None: this source does not tell."""

    level: str | None = None  # one of LEVELS
    level_source: str | None = None  # what the level was read from, for people
    gpu_utilization: float | None = None  # 0 to 1
    gpu_temperature_c: float | None = None
    cpu_temperature_c: float | None = None
    power_watts: float | None = None
    power_source: str | None = None  # powermetrics, macmon, rapl, nvidia-smi

    @property
    def empty(self) -> bool:
        return all(getattr(self, f) is None for f in self.__slots__)


def rank(level: str | None) -> int:
    """0 nominal ... 3 critical; -1 unknown."""
    return LEVELS.index(level) if level in LEVELS else -1


def combine(readings: Iterable[HeatReading]) -> HeatReading:
    """One reading of several sources: the worst level (with its source), the hottest
    temperatures, the busiest GPU, the first power figure (sources are given best first)."""
    out = HeatReading()
    for r in readings:
        if r.level is not None and rank(r.level) > rank(out.level):
            out = replace(out, level=r.level, level_source=r.level_source)
        out = replace(
            out,
            gpu_utilization=_most(out.gpu_utilization, r.gpu_utilization),
            gpu_temperature_c=_most(out.gpu_temperature_c, r.gpu_temperature_c),
            cpu_temperature_c=_most(out.cpu_temperature_c, r.cpu_temperature_c),
        )
        if out.power_watts is None and r.power_watts is not None:
            out = replace(out, power_watts=r.power_watts, power_source=r.power_source)
    return out


def _most(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def level_word(word: str) -> str | None:
    """A level from powermetrics' (or ProcessInfo's) word for it; None for anything else."""
    return _WORDS.get(word.strip().lower())


# ---- powermetrics ----------------------------------------------------------------------------

_SAMPLE = "*** Sampled system activity"
_PRESSURE = re.compile(r"^Current pressure level:\s*(\w+)", re.MULTILINE)
_GPU_ACTIVE = re.compile(r"^GPU HW active residency:\s*([0-9.]+)%", re.MULTILINE)
_GPU_IDLE = re.compile(r"^GPU idle residency:\s*([0-9.]+)%", re.MULTILINE)
_GPU_BUSY_INTEL = re.compile(r"^GPU 0 GPU Busy\s*:\s*([0-9.]+)%", re.MULTILINE)
_COMBINED_MW = re.compile(r"^Combined Power \(CPU \+ GPU \+ ANE\):\s*([0-9.]+)\s*mW", re.MULTILINE)
_PACKAGE_MW = re.compile(r"^Package Power:\s*([0-9.]+)\s*mW", re.MULTILINE)
_CPU_DIE = re.compile(r"^CPU die temperature:\s*([0-9.]+)\s*C", re.MULTILINE)
_GPU_DIE = re.compile(r"^GPU die temperature:\s*([0-9.]+)\s*C", re.MULTILINE)


def powermetrics_text(text: str) -> HeatReading:
    """The last sample of `powermetrics` text output: thermal pressure (`thermal` sampler), GPU
    active residency (`gpu_power`; Intel: GPU Busy), combined CPU+GPU+ANE power (else package
    power), Intel's SMC die temperatures when the `smc` sampler ran."""
    samples = [s for s in text.split(_SAMPLE)[1:] if s.strip()] or [text]
    sample = samples[-1]
    level = None
    source = None
    if (found := _PRESSURE.search(sample)) is not None:
        level = level_word(found.group(1))
        source = f"powermetrics thermal pressure {found.group(1)}" if level else None
    gpu = _first_float(sample, _GPU_ACTIVE, _GPU_BUSY_INTEL)
    if gpu is None and (idle := _first_float(sample, _GPU_IDLE)) is not None:
        gpu = 100.0 - idle
    power = _first_float(sample, _COMBINED_MW, _PACKAGE_MW)
    return HeatReading(
        level=level,
        level_source=source,
        gpu_utilization=_ratio(gpu),
        cpu_temperature_c=_first_float(sample, _CPU_DIE),
        gpu_temperature_c=_first_float(sample, _GPU_DIE),
        power_watts=power / 1000.0 if power is not None else None,
        power_source="powermetrics" if power is not None else None,
    )


def powermetrics_plist(data: bytes) -> HeatReading:
    """The last sample of `powermetrics -f plist` (samples are separated by NUL bytes)."""
    parts = [p for p in data.split(b"\x00") if p.strip()]
    if not parts:
        return HeatReading()
    try:
        sample = plistlib.loads(parts[-1])
    except (plistlib.InvalidFileException, ExpatError, ValueError, TypeError):
        return HeatReading()
    if not isinstance(sample, dict):
        return HeatReading()
    word = sample.get("thermal_pressure")
    level = level_word(word) if isinstance(word, str) else None
    processor = sample.get("processor")
    processor = processor if isinstance(processor, dict) else {}
    power_mw = _number(processor.get("combined_power"))
    if power_mw is None:
        parts_mw = [_number(processor.get(k)) for k in ("cpu_power", "gpu_power", "ane_power")]
        power_mw = sum(p for p in parts_mw if p is not None) if any(parts_mw) else None
    gpu = sample.get("gpu")
    idle = _number(gpu.get("idle_ratio")) if isinstance(gpu, dict) else None
    return HeatReading(
        level=level,
        level_source=f"powermetrics thermal pressure {word}" if level else None,
        gpu_utilization=_clamp(1.0 - idle) if idle is not None else None,
        power_watts=power_mw / 1000.0 if power_mw is not None else None,
        power_source="powermetrics" if power_mw is not None else None,
    )


# ---- macmon, notifyutil, pmset ---------------------------------------------------------------


def macmon(text: str) -> HeatReading:
    """The last JSON line of `macmon pipe`: average CPU and GPU temperature, GPU usage, system
    power (`sys_power`, the whole Mac; else `all_power`, CPU+GPU+ANE). No thermal level."""
    for line in reversed(text.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        found = doc.get("temp")
        temp: dict[str, Any] = found if isinstance(found, dict) else {}
        usage = doc.get("gpu_usage")
        gpu = _number(usage[1]) if isinstance(usage, list) and len(usage) == 2 else None
        sys_power = _number(doc.get("sys_power"))
        power = sys_power if sys_power else _number(doc.get("all_power"))
        return HeatReading(
            gpu_utilization=_clamp(gpu) if gpu is not None else None,
            cpu_temperature_c=_number(temp.get("cpu_temp_avg")),
            gpu_temperature_c=_number(temp.get("gpu_temp_avg")),
            power_watts=power,
            power_source="macmon" if power is not None else None,
        )
    return HeatReading()


_NOTIFY = re.compile(rf"^{re.escape(NOTIFY_KEY)}\s+(\d+)\s*$", re.MULTILINE)


def notify_level(text: str) -> HeatReading:
    """`notifyutil -g com.apple.system.thermalpressurelevel`: `<key> <n>`, n as in
    OSThermalNotification.h (0 nominal, 1 moderate, 2 heavy, 3 trapping, 4 sleeping)."""
    found = _NOTIFY.search(text)
    if found is None:
        return HeatReading()
    n = int(found.group(1))
    level = _NOTIFY_LEVELS[n] if n < len(_NOTIFY_LEVELS) else "critical"
    return HeatReading(level=level, level_source=f"macOS thermal pressure level {n}")


_SPEED_LIMIT = re.compile(r"^\s*CPU_Speed_Limit\s*=\s*(\d+)", re.MULTILINE)
_NO_WARNING = "No thermal warning level has been recorded"


def pmset_therm(text: str) -> HeatReading:
    """`pmset -g therm`: a CPU speed limit below 100 % means macOS throttles the CPU for heat
    (serious); "No thermal warning level has been recorded" with no limit is nominal."""
    found = _SPEED_LIMIT.search(text)
    if found is not None:
        limit = int(found.group(1))
        level = "serious" if limit < 100 else "nominal"
        return HeatReading(level=level, level_source=f"pmset CPU_Speed_Limit {limit}")
    if _NO_WARNING in text:
        return HeatReading(level="nominal", level_source="pmset: no thermal warning level")
    return HeatReading()


# ---- Linux: sysfs and RAPL -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Zone:
    """One `/sys/class/thermal/thermal_zone*`: its type, temperature and trip points (millidegrees
    Celsius, as the kernel gives them)."""

    name: str
    type: str
    temp_mc: int
    trips: tuple[tuple[str, int], ...] = ()  # (type, temperature)


CPU_ZONES = ("x86_pkg_temp", "cpu-thermal", "cpu_thermal", "cpu", "soc_thermal", "acpitz")


def thermal_zones(zones: Sequence[Zone]) -> HeatReading:
    """Level from each zone's trip points (at a critical or hot trip: critical; at a passive
    trip: serious, the kernel throttles; within 5 °C of it: fair; else nominal; the worst zone
    decides), CPU temperature from the CPU's zone (else the hottest)."""
    level, source = None, None
    for zone in zones:
        zone_level = _zone_level(zone)
        if zone_level is not None and rank(zone_level) > rank(level):
            level = zone_level
            source = f"thermal zone {zone.name} ({zone.type}) at {zone.temp_mc / 1000:.1f} °C"
    cpu = [z for t in CPU_ZONES for z in zones if z.type == t]
    pick = cpu[0] if cpu else max(zones, key=lambda z: z.temp_mc, default=None)
    return HeatReading(
        level=level,
        level_source=source,
        cpu_temperature_c=pick.temp_mc / 1000.0 if pick is not None else None,
    )


def _zone_level(zone: Zone) -> str | None:
    if not zone.trips:
        return "nominal"
    hot = [t for kind, t in zone.trips if kind in ("critical", "hot")]
    passive = [t for kind, t in zone.trips if kind == "passive"]
    if hot and zone.temp_mc >= min(hot):
        return "critical"
    if passive and zone.temp_mc >= min(passive):
        return "serious"
    if passive and zone.temp_mc >= min(passive) - NEAR_PASSIVE_C * 1000:
        return "fair"
    return "nominal"


def zone_of(name: str, files: Mapping[str, str]) -> Zone | None:
    """A `Zone` from the files of one thermal_zone directory (name -> content); None without
    a type or a readable temperature."""
    kind, temp = files.get("type", "").strip(), _int(files.get("temp"))
    if not kind or temp is None:
        return None
    trips = []
    for key, value in files.items():
        found = re.fullmatch(r"trip_point_(\d+)_type", key)
        if found is None:
            continue
        at = _int(files.get(f"trip_point_{found.group(1)}_temp"))
        if at is not None and at > 0:
            trips.append((value.strip(), at))
    return Zone(name=name, type=kind, temp_mc=temp, trips=tuple(sorted(trips)))


# hwmon chips and the labels of their package (CPU) or edge (GPU) temperature
_HWMON_CPU = {"coretemp": ("Package id 0",), "k10temp": ("Tctl", "Tdie"), "zenpower": ("Tdie",)}
_HWMON_GPU = {"amdgpu": ("edge", "junction")}


def hwmon(chips: Sequence[tuple[str, Mapping[str, str]]]) -> HeatReading:
    """CPU and GPU temperature from hwmon chips: (chip name, its files): coretemp's package,
    k10temp's Tctl/Tdie, amdgpu's edge; the hottest sensor of each kind."""
    cpu: list[float] = []
    gpu: list[float] = []
    for name, files in chips:
        for key, label in files.items():
            found = re.fullmatch(r"temp(\d+)_label", key)
            if found is None:
                continue
            value = _int(files.get(f"temp{found.group(1)}_input"))
            if value is None:
                continue
            if label.strip() in _HWMON_CPU.get(name, ()):
                cpu.append(value / 1000.0)
            elif label.strip() in _HWMON_GPU.get(name, ()):
                gpu.append(value / 1000.0)
    return HeatReading(
        cpu_temperature_c=max(cpu) if cpu else None,
        gpu_temperature_c=max(gpu) if gpu else None,
    )


@dataclass(frozen=True, slots=True)
class EnergyCounter:
    """A RAPL domain's `energy_uj` at a moment (seconds), with its wrap-around range."""

    uj: int
    at: float
    range_uj: int


def rapl_watts(before: EnergyCounter, after: EnergyCounter) -> float | None:
    """Average watts between two readings of one domain (the counter wraps at its range)."""
    seconds = after.at - before.at
    if seconds <= 0:
        return None
    delta = after.uj - before.uj
    if delta < 0:
        delta += after.range_uj
    if delta < 0:
        return None
    return delta / 1e6 / seconds


# ---- nvidia-smi ------------------------------------------------------------------------------

NVIDIA_QUERY = (
    "index,utilization.gpu,temperature.gpu,power.draw,"
    "clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.sw_thermal_slowdown"
)
# drivers before clocks_event_reasons (R535) name the same fields clocks_throttle_reasons
NVIDIA_QUERY_OLD = NVIDIA_QUERY.replace("clocks_event_reasons", "clocks_throttle_reasons")
_SW_THERMAL, _HW_THERMAL = 0x20, 0x40  # nvmlClocksEventReason{Sw,Hw}ThermalSlowdown


def nvidia_smi(text: str) -> HeatReading:
    """`nvidia-smi --query-gpu=... --format=csv` (with its header; units allowed): the busiest
    GPU's utilisation, the hottest temperature, the power of all GPUs together; a GPU slowing
    its clocks for heat makes the level serious (software slowdown) or critical (hardware)."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if len(rows) < 2:
        return HeatReading()
    header = [_field(h) for h in rows[0]]
    utils, temps, powers = [], [], []
    level, source = None, None
    for row in rows[1:]:
        cells = dict(zip(header, (c.strip() for c in row), strict=False))
        if (u := _nv_number(cells.get("utilization.gpu"))) is not None:
            utils.append(u / 100.0)
        if (t := _nv_number(cells.get("temperature.gpu"))) is not None:
            temps.append(t)
        if (p := _nv_number(cells.get("power.draw"))) is not None:
            powers.append(p)
        gpu = cells.get("index") or str(rows.index(row) - 1)
        slow = _slowdown(cells)
        if slow is not None and rank(slow) > rank(level):
            kind = "hardware" if slow == "critical" else "software"
            level, source = slow, f"nvidia-smi: GPU {gpu} {kind} thermal slowdown active"
        elif slow is None and level is None and _reports_slowdown(cells):
            level, source = "nominal", "nvidia-smi: no thermal slowdown"
    return HeatReading(
        level=level,
        level_source=source,
        gpu_utilization=max(utils) if utils else None,
        gpu_temperature_c=max(temps) if temps else None,
        power_watts=sum(powers) if powers else None,
        power_source="nvidia-smi" if powers else None,
    )


def _field(header: str) -> str:
    """`power.draw [W]` -> `power.draw`; throttle names -> event names."""
    name = header.split("[")[0].strip()
    return name.replace("clocks_throttle_reasons", "clocks_event_reasons")


def _slowdown(cells: Mapping[str, str]) -> str | None:
    if cells.get("clocks_event_reasons.hw_thermal_slowdown") == "Active":
        return "critical"
    if cells.get("clocks_event_reasons.sw_thermal_slowdown") == "Active":
        return "serious"
    mask = cells.get("clocks_event_reasons.active")
    if mask:
        try:
            bits = int(mask, 16)
        except ValueError:
            return None
        if bits & _HW_THERMAL:
            return "critical"
        if bits & _SW_THERMAL:
            return "serious"
    return None


def _reports_slowdown(cells: Mapping[str, str]) -> bool:
    keys = ("hw_thermal_slowdown", "sw_thermal_slowdown", "active")
    return any(cells.get(f"clocks_event_reasons.{k}") for k in keys)


def _nv_number(cell: str | None) -> float | None:
    """`91.74 W`, `1 %`, `35` -> the number; `[N/A]`, `[Not Supported]` -> None."""
    if not cell:
        return None
    found = re.match(r"^\s*([0-9.]+)", cell)
    return float(found.group(1)) if found else None


# ---- one file, any of the formats above (the agent's --thermal-file) --------------------------


def any_format(data: bytes) -> HeatReading:
    """A recorded output of any tool above, told apart by its content: a plist, JSON lines
    (macmon), nvidia-smi CSV, powermetrics text, the notifyutil line, `pmset -g therm`."""
    head = data.lstrip()[:64]
    if head.startswith(b"<?xml") or head.startswith(b"bplist"):
        return powermetrics_plist(data)
    text = data.decode("utf-8", errors="replace")
    if head.startswith(b"{"):
        return macmon(text)
    first = text.strip().splitlines()[0] if text.strip() else ""
    if "temperature.gpu" in first or "utilization.gpu" in first:
        return nvidia_smi(text)
    if NOTIFY_KEY in text:
        return notify_level(text)
    if "CPU_Speed_Limit" in text or _NO_WARNING in text:
        return pmset_therm(text)
    return powermetrics_text(text)


# ---- helpers ---------------------------------------------------------------------------------


def _first_float(text: str, *patterns: re.Pattern[str]) -> float | None:
    for pattern in patterns:
        found = pattern.search(text)
        if found is not None:
            return float(found.group(1))
    return None


def _ratio(percent: float | None) -> float | None:
    return _clamp(percent / 100.0) if percent is not None else None


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None
