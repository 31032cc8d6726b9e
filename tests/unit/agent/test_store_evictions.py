"""LRU eviction decisions (pure): least recently used owned copies first, never pinned ones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mlxfleet_agent import contract
from mlxfleet_agent.models import errors, evictions, index

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _entry(mid: str, *, size: int, age_h: int | None, owned: bool = True) -> index.IndexEntry:
    model = contract.CachedModel(
        id=mid,
        source=f"s3://bucket/{mid}",
        size_bytes=size,
        total_bytes=size,
        last_used=None if age_h is None else T0 - timedelta(hours=age_h),
    )
    return index.IndexEntry(model=model, kind="s3" if owned else "file", path="/x", owned=owned)


ENTRIES = [
    _entry("old", size=100, age_h=10),
    _entry("mid", size=100, age_h=5),
    _entry("new", size=100, age_h=1),
    _entry("never", size=50, age_h=None),
    _entry("user-file", size=1000, age_h=100, owned=False),
]


def _room(
    free: int, need: int, min_free: int = 0, cache: int = 350, cap: int | None = None
) -> evictions.Room:
    return evictions.Room(
        free_bytes=free,
        need_bytes=need,
        min_free_bytes=min_free,
        cache_bytes=cache,
        max_cache_bytes=cap,
    )


@pytest.mark.parametrize(
    ("room", "pinned", "expected"),
    [
        pytest.param(_room(1000, 100), set(), [], id="fits-no-eviction"),
        pytest.param(_room(100, 160, min_free=20), set(), ["never", "old"], id="disk-lru-order"),
        pytest.param(_room(100, 160, min_free=20), {"old"}, ["never", "mid"], id="pinned-skipped"),
        pytest.param(_room(10**9, 100, cap=400), set(), ["never"], id="cache-cap"),
        pytest.param(_room(10**9, 300, cap=400), set(), ["never", "old", "mid"], id="cap-several"),
    ],
)
def test_plan_evictions(room: evictions.Room, pinned: set[str], expected: list[str]) -> None:
    assert evictions.plan(ENTRIES, pinned=pinned, room=room) == expected


@pytest.mark.parametrize(
    ("room", "pinned"),
    [
        pytest.param(_room(0, 500), set(), id="more-than-all-unused"),
        pytest.param(_room(0, 100), {"old", "mid", "new", "never"}, id="all-pinned"),
        pytest.param(_room(10**9, 500, cap=400), set(), id="bigger-than-cap"),
    ],
)
def test_plan_evictions_insufficient(room: evictions.Room, pinned: set[str]) -> None:
    with pytest.raises(errors.InsufficientDisk, match="need") as info:
        evictions.plan(ENTRIES, pinned=pinned, room=room)
    assert info.value.http_status == 507
