"""Slots: each one converges a desired SlotSpec to a warm backend, and leases it to requests.

A `Slot` owns at most one *active* `Handle` (a ready backend). Requests lease the active handle
while the slot's gate is open and keep that handle until they finish, whatever happens to the
slot meanwhile; that is what makes the switch in `swap` atomic and drop-free. With the gate shut
(loading, hold swap, restart) requests wait in a bounded queue. One task per slot applies desired
specs one at a time: cold start, swap (see `swap`), restart after a crash, drain and stop on delete.
May import: contract, ranks, supervisor, readiness, swap (at run time), telemetry, httpx, stdlib.
Called by: manager (slot registry), router (leases), swap (switch primitives).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from mlxfleet_agent import contract, ranks, readiness, supervisor, telemetry

log = logging.getLogger(__name__)
SWAP_HISTORY = 50


class QueueFull(RuntimeError):
    """The slot's wait queue is at its bound."""


class QueueTimeout(RuntimeError):
    """A queued request waited longer than the queue timeout."""


class SlotUnavailable(RuntimeError):
    """The slot failed (no backend, retrying) or was deleted while the request waited."""


class Models(Protocol):
    """Where a slot's weights come from and how much memory they need (store + memory seam)."""

    async def ensure(self, spec: contract.SlotSpec, *, holder: str | None = None) -> Path: ...

    def release(self, holder: str) -> None: ...

    def estimate(self, spec: contract.SlotSpec, model_dir: Path) -> int: ...


@dataclass(frozen=True, slots=True)
class Deps:
    """What slots need from the agent: shared by every slot of one agent."""

    models: Models
    client: httpx.AsyncClient
    telemetry: telemetry.Telemetry
    log_dir: Path
    python: str
    load_timeout_s: float
    stop_grace_s: float
    restart_backoff_max_s: float
    budget: Callable[[], int]
    others_estimate: Callable[[str], int]
    on_backends_changed: Callable[[], None]
    persist: Callable[[], None]


@dataclass(eq=False)
class Handle:
    """A ready backend and the requests that hold it. Retired handles drain, then stop."""

    backend: supervisor.Backend
    spec: contract.SlotSpec
    model_dir: Path
    estimate: int
    in_flight: int = 0
    retired: bool = False
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    watcher: asyncio.Task[None] | None = None
    fingerprint: str | None = None  # the backend's system_fingerprint (from its warm-up)

    @property
    def pinned(self) -> str:
        """The `model` value sent to the backend: its own --model path (never loads another)."""
        return str(self.model_dir)

    def release(self) -> None:
        self.in_flight -= 1
        if self.retired and self.in_flight <= 0:
            self.drained.set()

    def retire(self) -> None:
        self.retired = True
        if self.in_flight <= 0:
            self.drained.set()


@dataclass(frozen=True, slots=True)
class Lease:
    """What a request holds from admission to its last byte."""

    handle: Handle
    waited_s: float
    swap: contract.SwapRecord | None


def same_runtime(a: contract.SlotSpec, b: contract.SlotSpec) -> bool:
    """True when two specs need the same backend process (only names/policies differ)."""
    exclude: dict[str, Any] = {
        "served_name": True,
        "swap": True,
        "memory_bytes": True,
        "server": {"allowed_image_urls": True},  # data-plane policy only
    }
    return a.model_dump(exclude=exclude) == b.model_dump(exclude=exclude)


class Slot:
    """One named slot: desired spec, active handle, gate + queue, phase, swap history."""

    def __init__(self, name: str, spec: contract.SlotSpec, *, deps: Deps, queue_limit: int) -> None:
        self.name = name
        self.desired = spec
        self.deps = deps
        self.queue_limit = queue_limit
        self.active: Handle | None = None
        self.standby: Handle | None = None  # B during a surge swap, before the switch
        self.retiring: list[Handle] = []
        self.gate = asyncio.Event()
        self.phase = contract.SlotPhase.PENDING
        self.last_error: str | None = None
        self.restarts = 0
        self.queued = 0
        self.failed = False
        self.deleted = False
        self.closing = False  # agent shutdown: queued requests give up, in-flight ones finish
        self.swaps: deque[contract.SwapRecord] = deque(maxlen=SWAP_HISTORY)
        self.current_swap: contract.SwapRecord | None = None
        self._waiters: deque[asyncio.Future[Handle]] = deque()  # queued requests, oldest first
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ---- leases (router) ----------------------------------------------------------------------

    async def acquire(self, *, timeout_s: float) -> Lease:
        """Lease the active backend: at once while the gate is open and the backend has fewer
        than `maxConcurrency` requests (and nobody queues before this one); else wait in the
        bounded FIFO queue, where free places are handed over oldest first (`_dispatch`)."""
        handle = self.active
        if (
            handle is not None
            and self.gate.is_set()
            and not self._waiters
            and handle.in_flight < handle.spec.max_concurrency
        ):
            handle.in_flight += 1
            return Lease(handle, 0.0, self.current_swap)
        if self.deleted or self.closing or (self.failed and handle is None):
            raise SlotUnavailable(self.last_error or "slot is not serving")
        if self.queued >= self.queue_limit:
            raise QueueFull(
                f"slot {self.name} is at its limit: {self.queued} requests queued behind "
                f"its maxConcurrency; retry shortly"
            )
        swap = self.current_swap  # a request queued by a swap counts towards it
        waiter: asyncio.Future[Handle] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.queued += 1
        start = time.monotonic()
        deadline = start + timeout_s
        try:
            handle = await self._wait_turn(waiter, deadline=deadline, timeout_s=timeout_s)
        finally:
            self.queued -= 1
        waited = time.monotonic() - start
        swap = swap or self.current_swap
        if swap is not None:
            swap.max_queue_wait_ms = max(swap.max_queue_wait_ms, waited * 1000.0)
        return Lease(handle, waited, swap)

    async def _wait_turn(
        self, waiter: asyncio.Future[Handle], *, deadline: float, timeout_s: float
    ) -> Handle:
        """Wait until `_dispatch` hands this waiter a place (it then holds one in_flight)."""
        try:
            while True:
                self._dispatch()  # the gate may have opened without a release (swap, restart)
                if waiter.done():
                    return waiter.result()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise QueueTimeout(f"waited {timeout_s:.0f}s for slot {self.name}")
                await asyncio.wait({waiter}, timeout=min(remaining, 0.5))
                if waiter.done():
                    return waiter.result()
                if self.deleted or self.closing or (self.failed and self.active is None):
                    raise SlotUnavailable(self.last_error or "slot is not serving")
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                waiter.result().release()  # handed a place just as it gave up: pass it on
                self._dispatch()
            waiter.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            raise

    def _dispatch(self) -> None:
        """Hand free places of the active backend to queued requests, oldest first."""
        handle = self.active
        if handle is None or not self.gate.is_set():
            return
        while self._waiters and handle.in_flight < handle.spec.max_concurrency:
            waiter = self._waiters.popleft()
            if not waiter.done():
                handle.in_flight += 1
                waiter.set_result(handle)

    def finished(self, lease: Lease, *, ok: bool) -> None:
        """A leased request ended (ok=False: it failed): its place goes to the queue.

        It counts towards the swap that was running when it was admitted or queued, or else
        the one running now (requests in flight on A while a swap drains it).
        """
        lease.handle.release()
        self._dispatch()
        swap = lease.swap or self.current_swap
        if swap is not None:
            if ok:
                swap.requests_served += 1
            else:
                swap.requests_failed += 1

    # ---- status ----------------------------------------------------------------------------

    def status(self) -> contract.SlotStatus:
        handle = self.active
        serving = handle.spec if handle is not None else self.desired
        in_flight = sum(h.in_flight for h in self._handles())
        return contract.SlotStatus(
            name=self.name,
            served_name=self.desired.served_name,
            source=serving.source,
            revision=serving.revision,
            phase=self.phase,
            ready=handle is not None and self.gate.is_set(),
            backend_port=handle.backend.port if handle is not None else None,
            in_flight=in_flight,
            queued=self.queued,
            restarts=self.restarts,
            last_error=self.last_error,
            estimated_memory_bytes=self.estimate(),
            spec=self.desired,
            active_swap=self.current_swap.id if self.current_swap is not None else None,
        )

    def estimate(self) -> int:
        """Memory the slot's live backends hold now (active + standby + draining)."""
        return sum(h.estimate for h in self._handles())

    def backend_pids(self) -> list[int]:
        return [h.backend.pid for h in self._handles() if h.backend.pid is not None]

    def _handles(self) -> list[Handle]:
        out = [h for h in (self.active, self.standby) if h is not None]
        return out + [h for h in self.retiring if h not in out]

    # ---- convergence loop -------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"slot-{self.name}")
        self._wake.set()

    def want(self, spec: contract.SlotSpec) -> None:
        self.desired = spec
        self._wake.set()

    def delete(self) -> None:
        self.deleted = True
        self._wake.set()

    async def wait_stopped(self) -> None:
        if self._task is not None:
            await self._task

    async def close(self) -> None:
        """Agent shutdown: stop the loop, stop every backend (the data plane already drained)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.gather(*(self._stop_handle(h) for h in self._handles()))
        self.active = self.standby = None
        self.retiring.clear()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.deleted:
                await self._drain_and_stop()
                return
            try:
                await self._converge()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("slot convergence failed", extra={"slot": self.name})
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self.active is None:
                    self.phase = contract.SlotPhase.FAILED
                    self.failed = True
                    if self.desired.shard is None:  # a rank waits for the operator to re-form
                        self._schedule_retry()

    async def _converge(self) -> None:
        from mlxfleet_agent import swap  # swap imports slots; resolve the cycle at run time

        target = self.desired
        handle = self.active
        if handle is None:
            await self.cold_start(target)
        elif same_runtime(handle.spec, target):
            handle.spec = target
        elif handle.spec.shard is not None or target.shard is not None:
            # a group re-forms as a whole: stop this rank, start the new one (no surge)
            self.gate.clear()
            self.active = None
            await self._stop_handle(handle)
            await self.cold_start(target)
        else:
            await swap.run(self, target)

    def _schedule_retry(self) -> None:
        delay = readiness.next_backoff(self.restarts, max_s=self.deps.restart_backoff_max_s)
        self.restarts += 1

        async def later() -> None:
            await asyncio.sleep(delay)
            self._wake.set()

        asyncio.get_running_loop().create_task(later())

    # ---- primitives used by swap ---------------------------------------------------------------

    async def load(self, spec: contract.SlotSpec) -> Handle:
        """Download (if needed), check the fit, start and warm a backend for `spec`."""
        self.phase = contract.SlotPhase.DOWNLOADING if self.active is None else self.phase
        label = f"{self.name}-{int(time.time() * 1000) % 10**9}"
        model_dir = await self.deps.models.ensure(spec, holder=label)
        try:
            estimate = spec.memory_bytes or self.deps.models.estimate(spec, model_dir)
        except BaseException:
            self.deps.models.release(label)
            raise
        if self.active is None:
            self.phase = contract.SlotPhase.LOADING
        launch = supervisor.LaunchSpec(
            model_dir=model_dir,
            options=spec.server,
            max_concurrency=spec.max_concurrency,
            python=self.deps.python,
            shard=spec.shard,
        )
        if spec.shard is not None:
            why = ranks.check_model(spec.shard, ranks.read_config(model_dir))
            if why is not None:
                self.deps.models.release(label)
                raise supervisor.BackendFailed(why)
        backend = supervisor.Backend(launch, label=label, log_dir=self.deps.log_dir)
        handle = Handle(backend=backend, spec=spec, model_dir=model_dir, estimate=estimate)
        self.standby = handle
        try:
            await backend.start()
            self.deps.on_backends_changed()
            if self.active is None:
                self.phase = contract.SlotPhase.WARMING
            if spec.shard is not None and not spec.shard.leader:
                # a follower has no HTTP server: it is up while it runs; rank 0's warm-up
                # proves the whole group (it cannot answer without every rank)
                await ranks.follower_started(alive=backend.alive)
            else:
                warm = await readiness.warm_up(
                    self.deps.client,
                    backend.base_url,
                    alive=backend.alive,
                    timeout_s=self.deps.load_timeout_s,
                )
                handle.fingerprint = warm.fingerprint
        except BaseException as exc:
            self.standby = None
            await backend.stop(grace_s=2.0)
            self.deps.models.release(label)
            self.deps.on_backends_changed()
            if isinstance(exc, readiness.NotReady | OSError):
                raise supervisor.BackendFailed(f"{exc}; log: {backend.log_tail()}") from exc
            raise
        handle.watcher = asyncio.get_running_loop().create_task(self._watch(handle))
        return handle

    def switch(self, handle: Handle) -> Handle | None:
        """Atomically make `handle` the active backend and open the gate; return the old one."""
        old = self.active
        self.active = handle
        if self.standby is handle:
            self.standby = None
        if old is not None:
            old.retire()
            self.retiring.append(old)
        self.failed = False
        self.phase = contract.SlotPhase.READY
        self.gate.set()
        self._dispatch()
        self.deps.telemetry.observe_slot(
            self.name, model=handle.spec.served_name, source=handle.spec.source
        )
        return old

    async def cold_start(self, spec: contract.SlotSpec) -> None:
        """No backend serves: queue requests, load `spec`, open the gate."""
        self.gate.clear()
        handle = await self.load(spec)
        self.switch(handle)

    async def drain(self, handle: Handle, *, timeout_s: float) -> bool:
        """Wait for a retired handle's in-flight requests; False when the timeout cut it short."""
        handle.retire()
        try:
            await asyncio.wait_for(handle.drained.wait(), timeout=timeout_s)
            return True
        except TimeoutError:
            return False

    async def _retire_and_stop(self, handle: Handle, *, drain_s: float) -> None:
        if handle not in self.retiring:
            self.retiring.append(handle)
        if drain_s > 0:
            await self.drain(handle, timeout_s=drain_s)
        await self._stop_handle(handle)

    async def stop_retired(self, handle: Handle) -> None:
        await self._stop_handle(handle)

    async def _stop_handle(self, handle: Handle) -> None:
        handle.retire()
        await handle.backend.stop(grace_s=self.deps.stop_grace_s)
        self.deps.models.release(handle.backend.label)
        if handle in self.retiring:
            self.retiring.remove(handle)
        if handle.watcher is not None and handle.watcher is not asyncio.current_task():
            handle.watcher.cancel()
        self.deps.on_backends_changed()

    async def _drain_and_stop(self) -> None:
        handles = self._handles()
        self.active = self.standby = None
        self.gate.set()  # wake waiters: they see `deleted` and give up
        drain_s = float(self.desired.swap.drain_timeout_seconds)
        await asyncio.gather(*(self._retire_and_stop(h, drain_s=drain_s) for h in handles))
        self.deps.telemetry.forget_slot(self.name)

    async def _watch(self, handle: Handle) -> None:
        """Notice a backend that exits on its own: fail over to a restart with backoff."""
        if handle.spec.shard is not None:
            await self._watch_rank(handle)
            return
        code = await handle.backend.wait_exit()
        if handle.backend.stopping:
            return
        tail = handle.backend.log_tail()
        log.error(
            "backend exited",
            extra={"slot": self.name, "pid": handle.backend.pid, "returncode": code},
        )
        self.last_error = f"backend exited with code {code}; log: {tail}"
        handle.backend.stopping = True
        self.deps.on_backends_changed()
        if handle is not self.active:
            return  # a standby's warm-up fails on its own; a draining one just ends
        self.gate.clear()
        self.active = None
        self.phase = contract.SlotPhase.LOADING
        delay = readiness.next_backoff(self.restarts - 1, max_s=self.deps.restart_backoff_max_s)
        self.restarts += 1
        await self._stop_handle(handle)
        await asyncio.sleep(delay if self.restarts > 1 else 0.0)
        self._wake.set()

    async def _watch_rank(self, handle: Handle) -> None:
        """A rank whose process exits or, for rank 0, whose group broke (a peer was lost) is
        stopped and the slot fails: no rank keeps running alone, and none restarts alone (the
        operator re-forms the group with a new group id)."""
        shard = handle.spec.shard
        assert shard is not None
        backend = handle.backend
        if shard.leader:
            why = await ranks.watch_leader(self.deps.client, backend.base_url, alive=backend.alive)
        else:
            code = await backend.wait_exit()
            why = f"rank {shard.rank} exited with code {code}: a peer rank was lost"
        if backend.stopping:
            return
        log.error("rank stopped", extra={"slot": self.name, "pid": backend.pid, "reason": why})
        self.last_error = f"{why}; log: {backend.log_tail()}"
        backend.stopping = True
        if handle is self.active:
            self.gate.clear()
            self.active = None
            self.phase = contract.SlotPhase.FAILED
            self.failed = True
        await self._stop_handle(handle)
