"""Reads the host's heat: thermal pressure, GPU utilisation, GPU and CPU temperature, power.

`HeatMeter.read()` asks every source this host has, each with a short timeout, and folds their
readings (`heatparse.combine`): on macOS `powermetrics` when the agent may run it (root, or a
sudoers rule for `sudo -n powermetrics`), `macmon pipe` when installed (sudoless temperatures,
GPU and power), the thermal pressure notification (`notifyutil`, sudoless), `pmset -g therm`;
on Linux the thermal zones and hwmon chips in sysfs, RAPL energy counters (power between two
reads) and `nvidia-smi` on a CUDA node. A source that is missing, refused or too slow is left
out for good (a refusal does not change while the agent runs), except sysfs, read every time.
`thermal_files` replace every source with recorded outputs, one source each (any format
`heatparse.any_format` knows), read again on each call and folded like the host's own sources:
tests and the e2e suite drive the sampler with them.
Called from the telemetry shipper's thread (never the event loop): a reading may take a second.
May import: the standard library, host (heatparse, platform). Called by: telemetry.shipper,
runtime.compose.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from mlxfleet_agent.host import heatparse
from mlxfleet_agent.host import platform as agent_platform

log = logging.getLogger("mlxfleet_agent.heat")
SYSFS = Path("/sys")
TIMEOUT_S = 5.0
MAX_FILE = 4 << 20  # a recorded output is read up to 4 MiB (a plist sample is about 500 KiB)
POWERMETRICS = [
    "sudo", "-n", "powermetrics",
    "--samplers", "cpu_power,gpu_power,thermal", "-i", "200", "-n", "1",
]  # fmt: skip
MACMON = ["macmon", "pipe", "-s", "1", "-i", "200"]
NOTIFYUTIL = ["notifyutil", "-g", heatparse.NOTIFY_KEY]
PMSET_THERM = ["pmset", "-g", "therm"]

Run = Callable[[list[str], float], str | None]


def run_command(argv: list[str], timeout: float) -> str | None:
    """The command's stdout, or None when it is missing, fails or outlasts `timeout`."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


class HeatMeter:
    """The host's heat, from every source it has (see the module docstring)."""

    def __init__(
        self,
        *,
        thermal_files: Sequence[Path] = (),
        powermetrics: bool = True,
        sysfs: Path = SYSFS,
        run: Run = run_command,
        clock: Callable[[], float] = time.monotonic,
        macos: bool = agent_platform.IS_MACOS,
    ) -> None:
        self.thermal_files = tuple(thermal_files)
        self._sysfs = sysfs
        self._run = run
        self._clock = clock
        self._macos = macos
        self._rapl: dict[str, heatparse.EnergyCounter] = {}
        # commands still worth trying; each is dropped after its first failure
        self._commands: dict[str, tuple[list[str], Callable[[str], heatparse.HeatReading]]] = {}
        if self.thermal_files:
            return
        if macos:
            if powermetrics:
                self._commands["powermetrics"] = (POWERMETRICS, heatparse.powermetrics_text)
            self._commands["macmon"] = (MACMON, heatparse.macmon)
            self._commands["notifyutil"] = (NOTIFYUTIL, heatparse.notify_level)
            self._commands["pmset"] = (PMSET_THERM, heatparse.pmset_therm)
        else:
            self._commands["nvidia-smi"] = (_nvidia_argv(heatparse.NVIDIA_QUERY), _nvidia)

    def read(self) -> heatparse.HeatReading:
        """One reading of every source this host has (empty: none tells anything)."""
        if self.thermal_files:
            return heatparse.combine(self._recorded(path) for path in self.thermal_files)
        readings = [self._command(name) for name in list(self._commands)]
        if not self._macos:
            readings += [self._zones(), self._hwmon(), self._rapl_reading()]
        return heatparse.combine(r for r in readings if r is not None)

    def _recorded(self, path: Path) -> heatparse.HeatReading:
        try:
            with path.open("rb") as f:
                return heatparse.any_format(f.read(MAX_FILE))
        except OSError as exc:
            log.warning("thermal file %s unreadable: %s", path, exc)
            return heatparse.HeatReading()

    def _command(self, name: str) -> heatparse.HeatReading | None:
        argv, parse = self._commands[name]
        out = self._run(argv, TIMEOUT_S)
        if out is None and name == "nvidia-smi":  # a driver older than clocks_event_reasons
            argv = _nvidia_argv(heatparse.NVIDIA_QUERY_OLD)
            out = self._run(argv, TIMEOUT_S)
            if out is not None:
                self._commands[name] = (argv, parse)
        reading = parse(out) if out is not None else None
        if reading is None or reading.empty:
            del self._commands[name]  # missing, refused or silent: not asked again
            return None
        return reading

    def _zones(self) -> heatparse.HeatReading:
        zones = []
        for path in sorted((self._sysfs / "class" / "thermal").glob("thermal_zone*")):
            zone = heatparse.zone_of(path.name, _files(path))
            if zone is not None:
                zones.append(zone)
        return heatparse.thermal_zones(zones) if zones else heatparse.HeatReading()

    def _hwmon(self) -> heatparse.HeatReading:
        chips = []
        for path in sorted((self._sysfs / "class" / "hwmon").glob("hwmon*")):
            files = _files(path)
            chips.append((files.get("name", "").strip(), files))
        return heatparse.hwmon(chips)

    def _rapl_reading(self) -> heatparse.HeatReading:
        """Package power: the sum over RAPL package domains of the energy used since the last
        read (the first read only starts the counters)."""
        watts: list[float] = []
        now = self._clock()
        for path in sorted((self._sysfs / "class" / "powercap").glob("intel-rapl:*")):
            if path.name.count(":") != 1:
                continue  # a sub-domain (core, uncore, dram) of a package
            files = _files(path, names=("energy_uj", "max_energy_range_uj"))
            uj, span = _int(files.get("energy_uj")), _int(files.get("max_energy_range_uj"))
            if uj is None or span is None:
                continue  # unreadable (root only since 2020 on most kernels)
            counter = heatparse.EnergyCounter(uj=uj, at=now, range_uj=span)
            before = self._rapl.get(path.name)
            self._rapl[path.name] = counter
            if before is not None and (w := heatparse.rapl_watts(before, counter)) is not None:
                watts.append(w)
        if not watts:
            return heatparse.HeatReading()
        return heatparse.HeatReading(power_watts=sum(watts), power_source="rapl")


def _nvidia_argv(query: str) -> list[str]:
    return ["nvidia-smi", f"--query-gpu={query}", "--format=csv"]


def _nvidia(text: str) -> heatparse.HeatReading:
    return heatparse.nvidia_smi(text)


def _files(path: Path, names: tuple[str, ...] | None = None) -> dict[str, str]:
    """The small text files of one sysfs directory (unreadable ones left out)."""
    out: dict[str, str] = {}
    try:
        entries = [path / n for n in names] if names else list(path.iterdir())
    except OSError:
        return out
    for entry in entries:
        if names is None and not entry.is_file():
            continue
        try:
            out[entry.name] = entry.read_text(encoding="ascii", errors="replace")[:256]
        except OSError:
            continue
    return out


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None
