"""Which cached models to evict so a download fits (pure: inputs in, model ids out).

Least recently used first, owned copies only (never `file://` models, never a pinned model):
enough to keep `min_free_bytes` free on disk and the cache within `max_cache_bytes`; else
`InsufficientDisk` says how much is missing.
May import: the standard library, models.errors, models.index. Called by: models.store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from mlxfleet_agent.models import errors, index


@dataclass(frozen=True)
class Room:
    """Inputs of an eviction decision (bytes)."""

    free_bytes: int
    need_bytes: int
    min_free_bytes: int
    cache_bytes: int
    max_cache_bytes: int | None


def plan(entries: Sequence[index.IndexEntry], *, pinned: set[str], room: Room) -> list[str]:
    """Ids to evict, least recently used first, so `need_bytes` fits; InsufficientDisk if not."""

    def fits(freed: int) -> bool:
        disk_ok = room.free_bytes + freed - room.need_bytes >= room.min_free_bytes
        cap = room.max_cache_bytes
        return disk_ok and (cap is None or room.cache_bytes - freed + room.need_bytes <= cap)

    never = datetime.min.replace(tzinfo=UTC)
    candidates = sorted(
        (e for e in entries if e.owned and e.model.id not in pinned),
        key=lambda e: (e.model.last_used or never, e.model.id),
    )
    chosen: list[str] = []
    freed = 0
    for entry in candidates:
        if fits(freed):
            break
        chosen.append(entry.model.id)
        freed += entry.model.total_bytes
    if not fits(freed):
        raise errors.InsufficientDisk(
            f"need {room.need_bytes} bytes: {room.free_bytes} free on disk "
            f"(keeping {room.min_free_bytes} free), cache {room.cache_bytes} of "
            f"{room.max_cache_bytes if room.max_cache_bytes is not None else 'unlimited'} bytes, "
            f"and only {freed} bytes of unused models to evict",
            field=None,
        )
    return chosen
