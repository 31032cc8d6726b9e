"""The agent's one way to write a file: atomically and durably.

`write_atomic` writes a temporary file in the same directory (private, 0600, from its creation),
fsyncs it, gives it its mode, renames it over the target and fsyncs the directory, so a reader or
a crash (even SIGKILL or power loss) only ever sees the old or the new file, whole, never a file
others could read for a moment.
May import: the standard library. Called by: slots.statefile (slots.json), backends.orphans
(backends.json), telemetry.spool (queue and checkpoint), models.index, host.credentials, join
(its files and record, through join.files.Writer and join.command).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace `path` with `data` so that readers and crashes only ever see a whole file, its
    permissions `mode` (owner and group are the writer's; join.account changes them after)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
