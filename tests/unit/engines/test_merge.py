"""The engine's cross-request batcher: merged runs, answers back to their requests, failures to
every waiting request, a bound on waiting requests (a plain function stands in for the model)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest

from mlxfleet_agent.engines import merge

T = TypeVar("T")


class Model:
    """Answers each sequence with its sum; blocks the first call until released."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls: list[int] = []
        self.release = threading.Event()
        self.fail = fail

    def __call__(self, seqs: Sequence[Sequence[int]]) -> list[int]:
        if not self.calls:
            self.release.wait(timeout=10)
        self.calls.append(len(seqs))
        if self.fail:
            raise RuntimeError("out of memory")
        return [sum(s) for s in seqs]


async def _with_batcher(
    model: Model, max_pending: int, body: Callable[[merge.Batcher], Awaitable[T]]
) -> T:
    with ThreadPoolExecutor(max_workers=1) as pool:
        batcher = merge.Batcher(model, executor=pool, max_tokens=1000, max_pending=max_pending)
        batcher.start()
        try:
            return await body(batcher)
        finally:
            model.release.set()
            await batcher.stop()


def test_requests_that_wait_together_share_one_run() -> None:
    model = Model()

    async def body(batcher: merge.Batcher) -> list[list[int]]:
        first = asyncio.ensure_future(batcher.submit([[1]]))
        await asyncio.sleep(0.05)  # the first run is blocked in the model
        rest = [asyncio.ensure_future(batcher.submit([[i, i], [10 * i]])) for i in range(2, 6)]
        await asyncio.sleep(0.05)
        model.release.set()
        return [await first, *[await r for r in rest]]

    answers = asyncio.run(_with_batcher(model, 16, body))
    assert answers == [[1], [4, 20], [6, 30], [8, 40], [10, 50]]
    assert model.calls == [1, 8]  # the four waiting requests ran as one batch of 8 sequences


def test_a_failed_run_fails_every_request_in_it() -> None:
    model = Model(fail=True)

    async def body(batcher: merge.Batcher) -> list[object]:
        model.release.set()
        tasks = [batcher.submit([[1]]), batcher.submit([[2]])]
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    results = asyncio.run(_with_batcher(model, 16, body))
    assert all(isinstance(r, RuntimeError) for r in results)


def test_too_many_waiting_requests_are_refused() -> None:
    model = Model()

    async def body(batcher: merge.Batcher) -> None:
        first = asyncio.ensure_future(batcher.submit([[1]]))
        await asyncio.sleep(0.05)
        waiting = [asyncio.ensure_future(batcher.submit([[2]])) for _ in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(merge.Busy):
            await batcher.submit([[3]])
        model.release.set()
        await asyncio.gather(first, *waiting)

    asyncio.run(_with_batcher(model, 2, body))
