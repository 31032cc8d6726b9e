"""The gate in front of a slot's active backend, and the bounded FIFO queue behind it.

While the gate is open a request gets the active backend at once if it runs fewer than
`maxConcurrency` requests and nobody queues before it; otherwise it waits in the queue (at most
`limit` requests), where free places are handed over oldest first (`dispatch`). With the gate
shut (loading, a hold swap, a restart) every request queues. A request handed a place holds one
`in_flight` of that backend. `dispatch` and `open` return the longest wait among the requests
they handed places to: a hold swap counts it when its switch opens the gate, before the woken
requests run (they run after the swap has finished and its record has gone to telemetry).
May import: the standard library, slots.handle, slots.lease. Called by: slots.slot.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from mlxfleet_agent.slots import handle as handle_
from mlxfleet_agent.slots import lease


class Serving(Protocol):
    """What the queue asks of its slot while a request waits."""

    @property
    def active(self) -> handle_.Handle | None: ...

    def refusal(self) -> str | None:
        """Why the slot serves no request now (deleted, shutting down, failed), or None."""
        ...


class Gate:
    """Gate + bounded FIFO queue of one slot (see the module docstring)."""

    def __init__(self, *, slot: str, limit: int) -> None:
        self.slot = slot
        self.limit = limit
        self.queued = 0
        self._open = asyncio.Event()
        # queued requests, oldest first, with the time each joined the queue
        self._waiters: dict[asyncio.Future[handle_.Handle], float] = {}

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def open(self, active: handle_.Handle | None) -> float:
        """Let requests through to `active` (queued ones first); the longest wait handed a place
        (seconds, 0.0 if none)."""
        self._open.set()
        return self.dispatch(active)

    def close(self) -> None:
        """New requests queue from now on (requests in flight go on)."""
        self._open.clear()

    def admit_now(self, active: handle_.Handle | None) -> bool:
        """Take a place of `active` at once, if the gate is open, it has one and nobody waits."""
        if (
            active is not None
            and self._open.is_set()
            and not self._waiters
            and active.in_flight < active.spec.max_concurrency
        ):
            active.in_flight += 1
            return True
        return False

    async def wait(self, serving: Serving, *, timeout_s: float) -> handle_.Handle:
        """Queue until `dispatch` hands this request a place; QueueFull when the queue is at its
        bound, QueueTimeout after `timeout_s`, SlotUnavailable when the slot stops serving."""
        if self.queued >= self.limit:
            raise lease.QueueFull(
                f"slot {self.slot} is at its limit: {self.queued} requests queued behind "
                f"its maxConcurrency; retry shortly"
            )
        waiter: asyncio.Future[handle_.Handle] = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = time.monotonic()
        self.queued += 1
        deadline = time.monotonic() + timeout_s
        try:
            return await self._wait_turn(waiter, serving, deadline=deadline, timeout_s=timeout_s)
        finally:
            self.queued -= 1

    async def _wait_turn(
        self,
        waiter: asyncio.Future[handle_.Handle],
        serving: Serving,
        *,
        deadline: float,
        timeout_s: float,
    ) -> handle_.Handle:
        try:
            while True:
                self.dispatch(serving.active)  # the gate may have opened without a release
                if waiter.done():
                    return waiter.result()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise lease.QueueTimeout(f"waited {timeout_s:.0f}s for slot {self.slot}")
                await asyncio.wait({waiter}, timeout=min(remaining, 0.5))
                if waiter.done():
                    return waiter.result()
                if (reason := serving.refusal()) is not None:
                    raise lease.SlotUnavailable(reason)
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                waiter.result().release()  # handed a place just as it gave up: pass it on
                self.dispatch(serving.active)
            waiter.cancel()
            self._waiters.pop(waiter, None)
            raise

    def dispatch(self, active: handle_.Handle | None) -> float:
        """Hand free places of the active backend to queued requests, oldest first; the longest
        wait among them (seconds, 0.0 if none was handed a place)."""
        longest = 0.0
        if active is None or not self._open.is_set():
            return longest
        now = time.monotonic()
        while self._waiters and active.in_flight < active.spec.max_concurrency:
            waiter = next(iter(self._waiters))
            queued_at = self._waiters.pop(waiter)
            if not waiter.done():
                active.in_flight += 1
                waiter.set_result(active)
                longest = max(longest, now - queued_at)
        return longest
