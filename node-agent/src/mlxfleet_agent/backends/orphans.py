"""The backend processes this agent started, on disk, so a restarted agent can stop orphans.

`record` writes `<state-dir>/backends.json` (pids with their start times and command lines, to
tell a reused pid apart) whenever the set of live backends changes; `sweep`, at start-up, kills
(process group and
all) the recorded backends of a previous agent that still run: the macOS path after a SIGKILL,
where PR_SET_PDEATHSIG does not exist.
May import: psutil, the standard library, host.files, engines.registry. Called by: slots.registry
(record), runtime (sweep at start-up).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil

from mlxfleet_agent.engines import registry
from mlxfleet_agent.host import files

BACKENDS_FILE = "backends.json"
CMDLINE_CHARS = 2048
# what a backend's command line must contain to be killed (each engine's `swept_mark`): mlx_lm
# and the embeddings/rerank server. vllm and command engines are not swept (their command lines
# are arbitrary; on Linux PR_SET_PDEATHSIG stops them with the agent, on macOS a SIGKILLed agent
# leaves them running)
SWEPT = registry.swept_marks()


def record(state_dir: Path, pids: list[int]) -> None:
    """Remember live backend pids with their start times and command lines (to tell a reused
    pid apart, whatever the engine)."""
    entries = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            cmd = " ".join(proc.cmdline())[:CMDLINE_CHARS]
            entries.append({"pid": pid, "created": proc.create_time(), "cmdline": cmd})
        except psutil.Error:
            continue
    files.write_atomic(state_dir / BACKENDS_FILE, json.dumps(entries).encode())


def sweep(state_dir: Path) -> list[int]:
    """Kill (process group and all) backends recorded by a previous agent that still run."""
    path = state_dir / BACKENDS_FILE
    if not path.exists():
        return []
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        entries = []
    killed = []
    for entry in entries if isinstance(entries, list) else []:
        try:
            proc = psutil.Process(int(entry["pid"]))
            if abs(proc.create_time() - float(entry["created"])) > 0.01:
                continue
            cmdline = " ".join(proc.cmdline())
            recorded = entry.get("cmdline")
            if isinstance(recorded, str) and cmdline[:CMDLINE_CHARS] != recorded:
                continue
            if not any(mark in cmdline for mark in SWEPT):
                continue  # only engines the agent runs from its own interpreter (see SWEPT)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            killed.append(proc.pid)
        except (psutil.Error, KeyError, TypeError, ValueError):
            continue
    path.unlink(missing_ok=True)
    return killed
