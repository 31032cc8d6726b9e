"""A second `join` keeps what the admin changed in agent.yaml, and says what it changed itself.

Three-way, per top-level key, like a package manager's conffile handling: `base` is what the
previous join wrote (recorded in join.json), `current` what the file holds now, `desired` what
this join would write. A key the admin changed, added or removed since (current differs from
base) stays as the admin left it; every other key takes join's value. The result lists each
change with its reason, for join to print (and `--dry-run` to show without writing).
Pure (unit-tested). May import: the standard library. Called by: join.command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_ABSENT = object()


@dataclass(frozen=True)
class Change:
    key: str
    action: str  # "set", "added", "removed", "kept"
    before: Any
    after: Any

    def describe(self) -> str:
        if self.action == "kept":
            wanted = "left out" if self.after is _ABSENT else _show(self.after)
            had = "removed" if self.before is _ABSENT else _show(self.before)
            return f"kept your {self.key}: {had} (join would set {wanted})"
        if self.action == "added":
            return f"added {self.key}: {_show(self.after)}"
        if self.action == "removed":
            return f"removed {self.key} (was {_show(self.before)})"
        return f"changed {self.key}: {_show(self.before)} -> {_show(self.after)}"


def _show(value: Any) -> str:
    return json.dumps(value, default=str)


@dataclass(frozen=True)
class Merge:
    result: dict[str, Any]
    changes: list[Change]

    @property
    def writes(self) -> bool:
        """Whether the file changes (a kept edit alone rewrites nothing)."""
        return any(c.action != "kept" for c in self.changes)


def merge(
    *,
    desired: Mapping[str, Any],
    current: Mapping[str, Any] | None,
    base: Mapping[str, Any] | None,
) -> Merge:
    """`current` None: no file yet (join writes `desired`); `base` None: no record of what join
    wrote before, so every key the file has is the admin's."""
    if current is None:
        return Merge(dict(desired), [Change(k, "added", _ABSENT, v) for k, v in desired.items()])
    base = base or {}
    result: dict[str, Any] = {}
    changes: list[Change] = []
    for key in [*current, *(k for k in desired if k not in current)]:
        have = current.get(key, _ABSENT)
        want = desired.get(key, _ABSENT)
        was = base.get(key, _ABSENT)
        admins = have != was  # the admin changed, added (or kept from before any record) it
        if admins or have == want:
            if have is not _ABSENT:
                result[key] = have
            if admins and have != want and (want is not _ABSENT or was is not _ABSENT):
                changes.append(Change(key, "kept", have, want))  # join has an opinion on it
            continue
        if want is _ABSENT:
            changes.append(Change(key, "removed", have, want))
            continue
        result[key] = want
        changes.append(Change(key, "added" if have is _ABSENT else "set", have, want))
    return Merge(result, changes)
