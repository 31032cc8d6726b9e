"""The agent's one way to write a file: atomically and durably.

`write_atomic` writes a temporary file in the same directory, fsyncs it, renames it over the
target and fsyncs the directory, so a reader or a crash (even SIGKILL or power loss) only ever
sees the old or the new file, whole.
May import: the standard library. Called by: slots.persist (slots.json), backends.orphans
(backends.json), telemetry.spool (queue and checkpoint), models.store (the index).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
