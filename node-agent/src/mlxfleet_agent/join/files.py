"""How join writes files: `Writer` writes each one atomically and privately (the agent's one
writer, `host.files.write_atomic`), then sets its owner; a dry run writes nothing and says what
it would write. `remove` deletes a file that may be gone already.
May import: the standard library, host.files, join.account. Called by: join.command.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlxfleet_agent.host import files
from mlxfleet_agent.join import account

Owner = tuple[int, int, int] | None


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
            files.write_atomic(path, data.encode(), mode=mode)
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
