"""Host readings for telemetry: memory, memory pressure and (on macOS, when permitted) power.

Power comes from `powermetrics` only when the agent may run it (root or a sudoers rule for
`sudo -n powermetrics`); otherwise it is None and the interval's energy is estimated from the
node's nominal idle/busy watts and marked `estimated`.
May import: psutil, the standard library, host.platform, telemetry.intervals. Called by:
telemetry.shipper (samples), controlapi.state (the pressure level of GET /v1/state).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import psutil

from mlxfleet_agent.host import platform as agent_platform
from mlxfleet_agent.telemetry import intervals

_COMBINED_MW = re.compile(r"Combined Power \(CPU \+ GPU \+ ANE\):\s*([0-9.]+)\s*mW")
IS_MACOS = agent_platform.IS_MACOS
_PACKAGE_MW = re.compile(r"Package Power:\s*([0-9.]+)\s*mW")


def pressure_level(*, total: int, available: int, macos_level: int | None = None) -> str:
    """normal / warn / critical: macOS's own level when known, else from the available share."""
    if macos_level is not None:
        return {1: "normal", 2: "warn", 4: "critical"}.get(macos_level, "normal")
    share = available / total if total else 1.0
    if share < 0.05:
        return "critical"
    if share < 0.15:
        return "warn"
    return "normal"


def _macos_pressure() -> int | None:
    level = agent_platform.sysctl("kern.memorystatus_vm_pressure_level")
    try:
        return int(level) if level is not None else None
    except ValueError:
        return None


def parse_powermetrics(text: str) -> float | None:
    """Watts from one powermetrics sample (combined CPU+GPU+ANE, else package power)."""
    for pattern in (_COMBINED_MW, _PACKAGE_MW):
        match = pattern.search(text)
        if match:
            return float(match.group(1)) / 1000.0
    return None


class PowerMeter:
    """Reads powermetrics on macOS when permitted; gives up for good after the first refusal."""

    def __init__(self, *, enabled: bool = True) -> None:
        self._usable = enabled and IS_MACOS and shutil.which("powermetrics") is not None

    def read_watts(self) -> float | None:
        if not self._usable:
            return None
        try:
            out = subprocess.run(
                [
                    "sudo",
                    "-n",
                    "powermetrics",
                    "--samplers",
                    "cpu_power,gpu_power",
                    "-i",
                    "200",
                    "-n",
                    "1",
                ],
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            self._usable = False
            return None
        watts = parse_powermetrics(out)
        if watts is None:
            self._usable = False
        return watts


def sample(power: PowerMeter | None = None) -> intervals.HostSample:
    vm = psutil.virtual_memory()
    total, available = int(vm.total), int(vm.available)
    return intervals.HostSample(
        memory_total_bytes=total,
        memory_used_bytes=total - available,
        memory_available_bytes=available,
        pressure=pressure_level(total=total, available=available, macos_level=_macos_pressure()),
        power_watts=power.read_watts() if power is not None else None,
    )
