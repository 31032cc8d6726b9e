"""Desired state on disk: the slot specs, and the backend processes this agent started.

Written atomically (temp file in the same directory, fsync, rename, fsync the directory), so a
SIGKILL at any moment leaves either the old or the new file. `backends.json` lets a restarted agent
find and stop backends orphaned by a crash (on macOS, where PR_SET_PDEATHSIG does not exist).
May import: contract, psutil and the standard library. Called by: slots (save/load), app (sweep).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import psutil
from pydantic import TypeAdapter, ValidationError

from mlxfleet_agent import contract

log = logging.getLogger(__name__)
SLOTS_FILE = "slots.json"
BACKENDS_FILE = "backends.json"
_SPECS = TypeAdapter(dict[str, contract.SlotSpec])


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that readers and crashes only ever see a whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save_slots(state_dir: Path, specs: dict[str, contract.SlotSpec]) -> None:
    body = {name: spec.model_dump(mode="json", exclude_none=True) for name, spec in specs.items()}
    write_atomic(state_dir / SLOTS_FILE, json.dumps({"slots": body}, indent=2).encode())


def load_slots(state_dir: Path) -> dict[str, contract.SlotSpec]:
    """The persisted desired slots; an unreadable file is logged and moved aside, never fatal."""
    path = state_dir / SLOTS_FILE
    if not path.exists():
        return {}
    try:
        raw: Any = json.loads(path.read_text())
        return _SPECS.validate_python(raw.get("slots", {}))
    except (OSError, ValueError, AttributeError, ValidationError) as exc:
        aside = path.with_suffix(".corrupt")
        log.error(
            "state file unreadable, moved aside", extra={"path": str(path), "error": str(exc)}
        )
        os.replace(path, aside)
        return {}


def record_backends(state_dir: Path, pids: list[int]) -> None:
    """Remember live backend pids with their start times (to tell a reused pid apart)."""
    entries = []
    for pid in pids:
        try:
            entries.append({"pid": pid, "created": psutil.Process(pid).create_time()})
        except psutil.Error:
            continue
    write_atomic(state_dir / BACKENDS_FILE, json.dumps(entries).encode())


def sweep_orphans(state_dir: Path) -> list[int]:
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
            if "mlx_lm" not in " ".join(proc.cmdline()):
                continue
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            killed.append(proc.pid)
        except (psutil.Error, KeyError, TypeError, ValueError):
            continue
    path.unlink(missing_ok=True)
    return killed
