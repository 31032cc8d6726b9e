"""One hollow slot: the real agent's slot state machine with simulated backends.

Cold start: Pending -> Downloading (a model not in the node's cache) -> Loading -> Warming ->
Ready. A new model swaps: `auto` is surge when the other slots + old + new fit the budget, else
hold; surge loads B beside A, switches, then drains and stops A; hold stops A first. A model that
does not fit even alone, or whose load fails (an injected fault), rolls back: A keeps serving
(surge) or is loaded again (hold), the desired spec reverts and the SwapRecord says RolledBack.
A failing cold start is Failed and retried with backoff (1, 2, 4 .. 30 s). Other spec changes
(served name, swap policy, memory override) apply in place. Delete drains, stops, then the slot
is gone. Memory held = active + standby + draining backends, as the real agent counts it. No
request ever reaches a hollow slot: its idle clock (`idleSeconds`) runs from its readiness.
May import: the standard library, `mlxfleet_agent.contract`. Called by: hollow.node.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from mlxfleet_agent import contract

SWAP_HISTORY = 50
BACKOFF_MAX_S = 30.0
Strategy = contract.SwapStrategy
Phase = contract.SlotPhase
_ports = itertools.count(41000)


class LoadFailed(RuntimeError):
    """A simulated backend that did not become ready (an injected fault)."""


class DoesNotFit(RuntimeError):
    """The new model does not fit the memory budget even on its own."""


class Host(Protocol):
    """What a slot needs from its node."""

    async def step(self, seconds: float) -> None: ...

    async def ensure(self, spec: contract.SlotSpec, *, holder: str) -> contract.CachedModel: ...

    def release(self, holder: str) -> None: ...

    def estimate(self, spec: contract.SlotSpec, cached: contract.CachedModel) -> int: ...

    def budget(self) -> int: ...

    def others_estimate(self, name: str) -> int: ...

    def load_fault(self, spec: contract.SlotSpec) -> str | None: ...

    @property
    def timing_load_s(self) -> float: ...

    @property
    def timing_warm_s(self) -> float: ...

    @property
    def timing_stop_s(self) -> float: ...


@dataclass(eq=False)
class Backend:
    spec: contract.SlotSpec
    estimate: int
    holder: str
    port: int


def same_runtime(a: contract.SlotSpec, b: contract.SlotSpec) -> bool:
    """Specs that need the same backend (only names and policies differ): no swap."""
    exclude = {"served_name", "swap", "memory_bytes"}
    return a.model_dump(exclude=exclude) == b.model_dump(exclude=exclude)


def _now() -> datetime:
    return datetime.now(UTC)


class HollowSlot:
    def __init__(self, name: str, spec: contract.SlotSpec, *, host: Host) -> None:
        self.name = name
        self.desired = spec
        self.host = host
        self.active: Backend | None = None
        self.standby: Backend | None = None
        self.retiring: list[Backend] = []
        self.open = False  # the gate: requests would be served
        self.phase = Phase.PENDING
        self.last_error: str | None = None
        self.restarts = 0
        self.failed = False
        self.deleted = False
        self.swaps: deque[contract.SwapRecord] = deque(maxlen=SWAP_HISTORY)
        self.current: contract.SwapRecord | None = None
        self.request_id: str | None = None  # the caller's id for a swap to the desired spec
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._labels = itertools.count(1)
        self.ready_at = time.monotonic()

    # ---- what the API shows -------------------------------------------------------------------

    def status(self) -> contract.SlotStatus:
        serving = self.active.spec if self.active is not None else self.desired
        return contract.SlotStatus(
            name=self.name,
            served_name=self.desired.served_name,
            source=serving.source,
            revision=serving.revision,
            phase=self.phase,
            ready=self.active is not None and self.open,
            backend_port=self.active.port if self.active is not None else None,
            idle_seconds=(
                round(time.monotonic() - self.ready_at, 3) if self.active is not None else None
            ),
            restarts=self.restarts,
            last_error=self.last_error,
            estimated_memory_bytes=self.estimate(),
            spec=self.desired,
            active_swap=self.current.id if self.current is not None else None,
            serving_group=(
                self.active.spec.shard.group
                if self.active is not None and self.active.spec.shard is not None
                else None
            ),
        )

    def estimate(self) -> int:
        held = [b for b in (self.active, self.standby) if b is not None]
        held += [b for b in self.retiring if b not in held]
        return sum(b.estimate for b in held)

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"slot-{self.name}")
        self._wake.set()

    def want(self, spec: contract.SlotSpec, *, request_id: str | None = None) -> None:
        self.desired = spec
        self.request_id = request_id
        self._wake.set()

    def delete(self) -> None:
        self.deleted = True
        self._wake.set()

    async def wait_stopped(self) -> None:
        if self._task is not None:
            await self._task

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.deleted:
                await self._stop_all()
                return
            try:
                await self._converge()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self.active is None:
                    self.phase = Phase.FAILED
                    self.failed = True
                    self._retry_later()

    async def _converge(self) -> None:
        target = self.desired
        if self.active is None:
            self.open = False
            self.switch(await self.load(target))
        elif same_runtime(self.active.spec, target):
            self.active.spec = target
        else:
            await self._swap(target)

    def _retry_later(self) -> None:
        delay = min(BACKOFF_MAX_S, 2.0 ** max(0, self.restarts))
        self.restarts += 1

        async def later() -> None:
            await asyncio.sleep(delay)
            self._wake.set()

        asyncio.get_running_loop().create_task(later())

    # ---- primitives ---------------------------------------------------------------------------

    async def load(self, spec: contract.SlotSpec) -> Backend:
        cold = self.active is None
        if cold:
            self.phase = Phase.DOWNLOADING
        holder = f"{self.name}-{next(self._labels)}"
        cached = await self.host.ensure(spec, holder=holder)
        backend = Backend(spec, self.host.estimate(spec, cached), holder, next(_ports))
        self.standby = backend
        try:
            if cold:
                self.phase = Phase.LOADING
            await self.host.step(self.host.timing_load_s)
            if cold:
                self.phase = Phase.WARMING
            await self.host.step(self.host.timing_warm_s)
            fault = self.host.load_fault(spec)
            if fault is not None:
                raise LoadFailed(fault)
        except BaseException:
            self.standby = None
            self.host.release(holder)
            raise
        return backend

    def switch(self, backend: Backend) -> Backend | None:
        old, self.active = self.active, backend
        if self.standby is backend:
            self.standby = None
        if old is not None:
            self.retiring.append(old)
        self.failed = False
        self.phase = Phase.READY
        self.open = True
        self.ready_at = time.monotonic()  # the idle clock starts (no request ever comes)
        return old

    async def _stop(self, backend: Backend) -> None:
        await self.host.step(self.host.timing_stop_s)
        self.host.release(backend.holder)
        if backend in self.retiring:
            self.retiring.remove(backend)

    async def _stop_all(self) -> None:
        held = [b for b in (self.active, self.standby) if b is not None]
        held += [b for b in self.retiring if b not in held]
        self.active = self.standby = None
        self.open = False
        self.retiring = held
        await asyncio.gather(*(self._stop(b) for b in held))

    # ---- swaps --------------------------------------------------------------------------------

    async def _swap(self, target: contract.SlotSpec) -> None:
        old = self.active
        assert old is not None
        record = contract.SwapRecord(
            id=uuid.uuid4().hex[:12],
            slot=self.name,
            requested_strategy=target.swap.strategy,
            strategy=target.swap.strategy,
            from_source=old.spec.source,
            from_revision=old.spec.revision,
            to_source=target.source,
            to_revision=target.revision,
            started_at=_now(),
            request_id=self.request_id,
        )
        self.request_id = None
        self.swaps.appendleft(record)
        self.current = record
        self.phase = Phase.SWAPPING
        try:
            cached = await self.host.ensure(target, holder=f"{self.name}-swap")
            self.host.release(f"{self.name}-swap")
            new_est = self.host.estimate(target, cached)
            others, budget = self.host.others_estimate(self.name), self.host.budget()
            if others + new_est > budget:
                raise DoesNotFit(
                    f"estimate {new_est} bytes + other slots {others} exceed the budget {budget}"
                )
            if target.swap.strategy is Strategy.AUTO:
                fits = others + old.estimate + new_est <= budget
                record.strategy = Strategy.SURGE if fits else Strategy.HOLD
            if record.strategy is Strategy.SURGE:
                await self._surge(old, target, record)
            else:
                await self._hold(old, target, record)
            record.outcome = contract.SwapOutcome.COMPLETED
            self.last_error = None
        except Exception as exc:
            await self._roll_back(old, target, record, reason=f"{type(exc).__name__}: {exc}")
        finally:
            record.finished_at = _now()
            self.current = None
            if self.active is not None and self.open:
                self.phase = Phase.READY

    async def _surge(
        self, old: Backend, target: contract.SlotSpec, record: contract.SwapRecord
    ) -> None:
        new = await self.load(target)
        record.new_ready_at = _now()
        self.switch(new)
        self.phase = Phase.SWAPPING
        record.switched_at = record.old_drained_at = _now()  # no traffic: drained at once
        await self._stop(old)
        record.old_stopped_at = _now()

    async def _hold(
        self, old: Backend, target: contract.SlotSpec, record: contract.SwapRecord
    ) -> None:
        self.open = False
        self.active = None
        self.retiring.append(old)
        record.old_drained_at = _now()
        await self._stop(old)
        record.old_stopped_at = _now()
        new = await self.load(target)
        record.new_ready_at = _now()
        self.switch(new)
        self.phase = Phase.SWAPPING
        record.switched_at = _now()

    async def _roll_back(
        self,
        old: Backend,
        target: contract.SlotSpec,
        record: contract.SwapRecord,
        *,
        reason: str,
    ) -> None:
        record.reason = reason
        self.last_error = f"swap to {record.to_source} rolled back: {reason}"
        if self.desired == target:  # a newer PUT during the swap wins; it runs next
            self.desired = old.spec
        if self.active is not None:  # surge: A (or the new B, if it came up) still serves
            record.outcome = contract.SwapOutcome.ROLLED_BACK
            self.open = True
            return
        try:  # hold: A was stopped; bring it back
            self.switch(await self.load(old.spec))
        except Exception as exc:
            record.outcome = contract.SwapOutcome.FAILED
            record.reason = f"{reason}; restoring the previous model failed too: {exc}"
            self.last_error = record.reason
            raise
        record.outcome = contract.SwapOutcome.ROLLED_BACK
