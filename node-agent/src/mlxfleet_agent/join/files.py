"""Private files written atomically: a temporary file (0600 from its creation) in the same
directory, fsynced, then renamed over the target; a crash leaves the old file or the new one.
`Writer` is how join writes (owner and mode after the rename; a dry run writes nothing).
May import: the standard library, join.account. Called by: join.command.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlxfleet_agent.join import account

Owner = tuple[int, int, int] | None


def write_private(path: Path, data: str | bytes, *, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # 0600 from the start
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


@dataclass
class Writer:
    """join's one way to write: the file (atomically, then its owner and mode), or in a dry run
    only what it would write. Says each path whose content changes."""

    dry_run: bool
    say: Callable[[str], None]

    def write(self, path: Path, data: str, *, mode: int = 0o600, owner: Owner = None) -> bool:
        """True when the content changes."""
        try:
            changed = path.read_text() != data
        except OSError:
            changed = True
        if self.dry_run:
            if changed:
                self.say(f"would write {path}")
            return changed
        if changed:
            write_private(path, data, mode=mode)
        else:
            os.chmod(path, mode)
        account.apply(path, owner)
        return changed

    def folder(self, path: Path, owner: Owner) -> None:
        if self.dry_run:
            if not path.is_dir():
                self.say(f"would create {path}/")
            return
        path.mkdir(parents=True, exist_ok=True)
        account.apply(path, owner)
