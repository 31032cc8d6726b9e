"""Facts about this machine and the OS-specific bits of process handling.

Chip, OS, mlx/mlx-lm versions, memory (psutil), disk; the `preexec` hook that makes a backend die
with the agent on Linux (PR_SET_PDEATHSIG) and restores SIGINT; `caffeinate` on macOS.
May import: psutil and the standard library. Called by: runtime (caffeinate), backends.process
(preexec), slots.registry (memory budget), controlapi.state (GET /v1/state), telemetry.hoststats.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import os
import platform as _platform
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

PR_SET_PDEATHSIG = 1
IS_LINUX = sys.platform.startswith("linux")
IS_MACOS = sys.platform == "darwin"


@dataclass(frozen=True, slots=True)
class MemoryFacts:
    total_bytes: int
    available_bytes: int
    percent_used: float


def memory() -> MemoryFacts:
    vm = psutil.virtual_memory()
    return MemoryFacts(
        total_bytes=int(vm.total), available_bytes=int(vm.available), percent_used=vm.percent
    )


def disk(path: Path) -> tuple[int, int]:
    """(free, total) bytes of the file system holding `path`."""
    usage = shutil.disk_usage(path)
    return usage.free, usage.total


def version_of(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def os_name() -> str:
    if IS_MACOS:
        return f"macOS {_platform.mac_ver()[0]}"
    return f"{_platform.system()} {_platform.release()}"


def sysctl(name: str) -> str | None:
    """`sysctl -n NAME` on macOS (stripped), or None elsewhere or when it fails."""
    if not IS_MACOS:
        return None
    try:
        out = subprocess.run(
            ["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def chip() -> str:
    """`Apple M2 Pro` on a Mac (sysctl), else the CPU model or architecture."""
    if IS_MACOS:
        return sysctl("machdep.cpu.brand_string") or _platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.machine()


def _libc() -> ctypes.CDLL | None:
    if not IS_LINUX:
        return None
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


SETPRIV = shutil.which("setpriv") if IS_LINUX else None  # util-linux


def backend_spawn(argv: Sequence[str]) -> tuple[list[str], Callable[[], None] | None]:
    """The argv and `preexec_fn` to spawn a backend with: default SIGINT, and (Linux) it dies
    with the agent.

    A `preexec_fn` runs Python in the forked child of a process that has threads; the child can
    deadlock there before exec (a lock another thread held at fork), and asyncio waits for the
    exec in the event loop's thread: the whole agent hung (seen under libfaketime in
    `tests/faults/test_clock_skew.py`). So where it can, nothing runs in the child: on Linux
    `setpriv --pdeathsig KILL` sets PDEATHSIG and execs the backend (same pid), and SIGINT,
    which the agent handles, is reset to default by exec. The preexec_fn stays for what that
    cannot do: no `setpriv` on Linux, SIGINT ignored (inherited by exec), and macOS (no
    PDEATHSIG; SIGINT only)."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if SETPRIV is not None and not ignored:
        return [SETPRIV, "--pdeathsig", "KILL", "--", *argv], None
    if IS_MACOS and not ignored:
        return list(argv), None
    return list(argv), backend_preexec


def backend_preexec() -> None:
    """Runs in the forked child before exec: default SIGINT, and (Linux) die with the parent.

    SIGINT may be inherited as ignored (agents started from a non-interactive shell with `&`);
    mlx_lm stops only on SIGINT, so reset it. Must be called from the thread that lives as long
    as the agent (the event loop's), because PDEATHSIG fires when the forking *thread* exits.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def start_caffeinate() -> subprocess.Popen[bytes] | None:
    """Keep a Mac awake while this process lives (`caffeinate -i -w <pid>`); no-op elsewhere."""
    if not IS_MACOS or shutil.which("caffeinate") is None:
        return None
    return subprocess.Popen(["caffeinate", "-i", "-s", "-w", str(os.getpid())])
