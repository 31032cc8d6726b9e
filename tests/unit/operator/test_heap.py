"""adapters.heap: freed heap goes back to the system (this machine's real glibc, no mocks)."""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

import pytest

from mlxfleet_operator.adapters import heap

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or heap._glibc() is None, reason="glibc only"
)


def _rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def test_trim_gives_back_what_python_freed_but_malloc_kept() -> None:
    """The operator's shape after convergence: many medium objects (glibc's, not pymalloc's:
    over 512 bytes) freed, a tenth kept between them, so the heap cannot shrink from its top."""
    rng = random.Random(7)
    kept: list[bytes] = []
    freed: list[bytes] = []
    for i in range(60_000):
        (kept if i % 10 == 0 else freed).append(bytes(rng.randint(1_000, 3_000)))
    freed.clear()
    before = _rss_mb()
    assert heap.trim() is True
    after = _rss_mb()
    assert before - after > 40, (before, after)  # about 110 MB were freed
    assert len(kept) == 6_000  # what is still used stays


def test_arena_limit_is_taken() -> None:
    assert heap.limit_arenas() is True


def test_keep_trimmed_trims_until_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    real = heap.trim

    def counted() -> bool:
        calls.append(real())
        return calls[-1]

    monkeypatch.setattr(heap, "trim", counted)

    async def run() -> None:
        task = asyncio.create_task(heap.keep_trimmed(every=0.01))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(calls) >= 3
        await asyncio.sleep(0.1)  # a trim already running in its thread still finishes
        settled = len(calls)
        await asyncio.sleep(0.1)
        assert len(calls) == settled  # none started after cancel

    asyncio.run(run())
