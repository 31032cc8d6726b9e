"""Gather the host facts engine discovery decides from (the I/O edge of `discovery`).

Looks, without importing anything heavy: `importlib.util.find_spec` for top-level modules (it
locates a package without running it, so the agent still never imports mlx), installed
distributions by name, `shutil.which` for executables, and `nvidia-smi` for GPUs (5 s timeout;
absent or failing means no NVIDIA GPU).
May import: engines.discovery and the standard library. Called by: the agent at start (part 2),
tests.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import shutil
import subprocess
from collections.abc import Sequence

from mlxfleet_agent.engines import discovery

MODULES = ("mlx", "mlx_lm", "tokenizers", "vllm")
DISTRIBUTIONS = tuple(sorted(discovery.MLX_BACKENDS))
EXECUTABLES = ("vllm", "nvidia-smi")
NVIDIA_QUERY = ["--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def nvidia_gpus(nvidia_smi: str | None, *, timeout_s: float = 5.0) -> tuple[discovery.Gpu, ...]:
    if nvidia_smi is None:
        return ()
    try:
        done = subprocess.run(
            [nvidia_smi, *NVIDIA_QUERY],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return discovery.parse_nvidia_smi(done.stdout) if done.returncode == 0 else ()


def gather(*, command_programs: Sequence[str] = ()) -> discovery.HostFacts:
    executables = {}
    for name in (*EXECUTABLES, *command_programs):
        path = shutil.which(name)
        if path is not None:
            executables[name] = path
    return discovery.HostFacts(
        system=platform.system(),
        machine=platform.machine(),
        modules=frozenset(m for m in MODULES if _importable(m)),
        distributions=frozenset(d for d in DISTRIBUTIONS if _installed(d)),
        executables=executables,
        nvidia_gpus=nvidia_gpus(executables.get("nvidia-smi")),
        command_programs=tuple(command_programs),
    )


if __name__ == "__main__":
    import json

    for a in discovery.engines(gather()):
        print(json.dumps({"engine": a.engine, "available": a.available, "reason": a.reason}))
