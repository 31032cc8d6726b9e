"""Hardware facts join registers: chip, unified memory, GPU cores (macOS), best effort elsewhere.

The parsers are pure (unit-tested with captured outputs); `detect` runs sysctl/system_profiler on
macOS and reads /proc/meminfo on Linux. A fact that cannot be read is left out, never guessed.
May import: the standard library, `platform`, join.plan. Called by: join.command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mlxfleet_agent.host import platform
from mlxfleet_agent.join import plan


def meminfo_bytes(text: str) -> int | None:
    """MemTotal of /proc/meminfo (kB) in bytes."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


def gpu_cores(profiler_json: str) -> int | None:
    """`sppci_cores` of `system_profiler SPDisplaysDataType -json` (Apple GPUs)."""
    try:
        data = json.loads(profiler_json)
    except json.JSONDecodeError:
        return None
    for gpu in data.get("SPDisplaysDataType") or []:
        cores = str(gpu.get("sppci_cores", ""))
        if cores.isdigit():
            return int(cores)
    return None


def detect() -> plan.Facts:
    if sys.platform == "darwin":
        memsize = platform.sysctl("hw.memsize")
        try:
            profiler = subprocess.run(
                ["system_profiler", "SPDisplaysDataType", "-json"],
                capture_output=True, text=True, timeout=30, check=False,
            ).stdout  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            profiler = ""
        return plan.Facts(
            chip=platform.chip(),
            memory_bytes=int(memsize) if memsize and memsize.isdigit() else None,
            gpu_cores=gpu_cores(profiler),
        )
    try:
        memory = meminfo_bytes(Path("/proc/meminfo").read_text())
    except OSError:
        memory = None
    return plan.Facts(chip=platform.chip(), memory_bytes=memory)
