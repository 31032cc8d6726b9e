"""Merge the sequences of concurrent requests into shared model runs on one worker thread.

A request `submit`s its token sequences and awaits their results; a loop takes every request
waiting (up to `max_tokens` tokens at once), runs them as one call on the model's executor
thread, and hands each request its own slice of the answers. A failed run fails every request
in it; more than `max_pending` waiting requests are refused (`Busy`), and a request whose
client went away is skipped.
May import: the standard library. Called by: embed_server, tests.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger("mlxfleet.engine")


class Busy(Exception):
    """Too many requests are waiting for the model."""


class Batcher:
    """Merges the sequences of concurrent requests into shared `run` calls on one thread."""

    def __init__(
        self,
        run: Callable[[Sequence[Sequence[int]]], list[Any]],
        *,
        executor: ThreadPoolExecutor,
        max_tokens: int,
        max_pending: int,
    ) -> None:
        self._run = run
        self._executor = executor
        self._max_tokens = max_tokens  # tokens merged into one worker call
        self._max_pending = max_pending
        self._queue: list[tuple[list[list[int]], asyncio.Future[list[Any]]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def submit(self, seqs: list[list[int]]) -> list[Any]:
        if len(self._queue) >= self._max_pending:
            raise Busy
        fut: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._queue.append((seqs, fut))
        self._wake.set()
        return await fut

    def _take(self) -> list[tuple[list[list[int]], asyncio.Future[list[Any]]]]:
        taken: list[tuple[list[list[int]], asyncio.Future[list[Any]]]] = []
        tokens = 0
        while self._queue:
            seqs, fut = self._queue[0]
            size = sum(len(s) for s in seqs)
            if taken and tokens + size > self._max_tokens:
                break
            self._queue.pop(0)
            if not fut.done():  # a client that went away is skipped
                taken.append((seqs, fut))
                tokens += size
        return taken

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while taken := self._take():
                flat = [s for seqs, _ in taken for s in seqs]
                try:
                    results = await loop.run_in_executor(self._executor, self._run, flat)
                except Exception as exc:  # the model failed: every waiting request learns it
                    log.exception("engine forward failed")
                    for _, fut in taken:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                start = 0
                for seqs, fut in taken:
                    if not fut.done():
                        fut.set_result(results[start : start + len(seqs)])
                    start += len(seqs)
