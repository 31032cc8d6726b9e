"""Backend logs kept bounded: each `<state-dir>/logs/*.log` over `max_bytes` is rotated by size,
keeping `keep` older files (`x.log.1` the newest of them ... `x.log.<keep>`), as logrotate's
`copytruncate` does.

A backend writes its log through a descriptor it inherited (opened for appending: `process`), so
the file cannot be renamed under it: its content is copied to `.1` (older ones shifted, the
oldest dropped) and the file truncated; the backend's next write lands at the new end. What it
writes between the copy and the truncation (a few lines at most) is lost, logrotate's own
caveat. Without this the logs grew without bound (issue 28 item 3).
May import: the standard library. Called by: runtime.compose (`watch`, one task for every
backend), tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from pathlib import Path

log = logging.getLogger(__name__)


def rotate(path: Path, *, max_bytes: int, keep: int) -> bool:
    """Rotate `path` when it holds more than `max_bytes`; True when it did."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
    except FileNotFoundError:
        return False
    for n in range(keep, 1, -1):
        older = path.with_name(f"{path.name}.{n - 1}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{n}"))
    if keep > 0:
        shutil.copyfile(path, path.with_name(f"{path.name}.1"))
    with path.open("r+b") as out:
        out.truncate(0)
    return True


def rotate_all(log_dir: Path, *, max_bytes: int, keep: int) -> list[str]:
    """Rotate every `*.log` of `log_dir` over the limit; the names rotated."""
    done = []
    for path in sorted(log_dir.glob("*.log")):
        with contextlib.suppress(OSError):
            if rotate(path, max_bytes=max_bytes, keep=keep):
                done.append(path.name)
    return done


async def watch(log_dir: Path, *, max_bytes: int, keep: int, interval_s: float) -> None:
    """Rotate `log_dir`'s logs every `interval_s` until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        rotated = await asyncio.to_thread(rotate_all, log_dir, max_bytes=max_bytes, keep=keep)
        if rotated:
            log.info("backend logs rotated", extra={"logs": rotated, "keep": keep})
