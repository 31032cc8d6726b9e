"""One slot: its desired spec, its active backend, the gate in front of it, its phase and swaps.

A `Slot` owns at most one *active* `Handle` (a ready backend). Requests lease the active handle
while the gate is open and keep that handle until they finish, whatever happens to the slot
meanwhile: that is what makes `switch` atomic and drop-free. Everything the swap protocol
(`swap`) and the convergence loop (`convergence`) do to a slot goes through the public
operations here (prepare, load, switch, take_offline, drain, stop_retired, revert, ...); the
loop itself runs in a task the registry starts (`start(run)`).
May import: the standard library, contract, backends (launcher, process, ranks, readiness),
models (catalog, progress, source), telemetry.recorder, slots (gate, handle, lease).
Called by: slots (registry, swap, convergence); the data plane through `slots.lease` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from mlxfleet_agent import contract
from mlxfleet_agent.backends import launcher, process, ranks, readiness
from mlxfleet_agent.models import catalog, progress, source
from mlxfleet_agent.slots import gate, lease
from mlxfleet_agent.slots.handle import Handle, Prepared
from mlxfleet_agent.telemetry import recorder

log = logging.getLogger(__name__)
SWAP_HISTORY = 50
Phase = contract.SlotPhase


class Owner(Protocol):
    """What a slot asks of the registry that owns it (the registry implements this)."""

    def budget(self) -> int:
        """Bytes all slots together may use."""
        ...

    def others_estimate(self, name: str) -> int:
        """Bytes the other slots' backends hold now."""
        ...

    def backends_changed(self) -> None:
        """A backend process started or stopped (the registry records the live ones)."""
        ...

    def persist(self) -> None:
        """A slot's desired spec changed on its own (rollback): save the desired state."""
        ...


@dataclass(frozen=True, slots=True)
class Deps:
    """What every slot of one agent shares; built once by the registry."""

    catalog: catalog.Catalog
    launcher: launcher.Launcher
    telemetry: recorder.Telemetry
    owner: Owner
    restart_backoff_max_s: float


@dataclass(frozen=True, slots=True)
class SlotLease:
    """A request's lease on a backend of `slot` (see `slots.lease.Lease`)."""

    slot: Slot
    upstream: Handle
    waited_s: float
    swap: contract.SwapRecord | None

    def release(self, *, ok: bool) -> None:
        self.slot.finished(self, ok=ok)


class Slot:
    """One named slot (see the module docstring)."""

    def __init__(
        self,
        name: str,
        spec: contract.SlotSpec,
        src: source.Source,
        *,
        deps: Deps,
        queue_limit: int,
    ) -> None:
        self.name = name
        self.deps = deps
        self.last_error: str | None = None
        self.restarts = 0
        self.failed = False
        self.deleted = False
        self.closing = False  # agent shutdown: queued requests give up, in-flight ones finish
        self.phase = Phase.PENDING
        self.swaps: deque[contract.SwapRecord] = deque(maxlen=SWAP_HISTORY)
        self._desired = (spec, src)
        self.request_id: str | None = None  # the caller's id for a swap to the desired spec
        self._active: Handle | None = None
        self._standby: Handle | None = None  # B while it loads, before the switch
        self._retiring: list[Handle] = []
        self._gate = gate.Gate(slot=name, limit=queue_limit)
        self._swap: contract.SwapRecord | None = None
        self._download: progress.Meter | None = None  # the weights being prepared
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Task[None] | None = None  # an abandoned rank being stopped

    # ---- what it serves -----------------------------------------------------------------------

    @property
    def desired(self) -> contract.SlotSpec:
        return self._desired[0]

    @property
    def desired_source(self) -> source.Source:
        return self._desired[1]

    @property
    def active(self) -> Handle | None:
        return self._active

    @property
    def queued(self) -> int:
        return self._gate.queued

    def refusal(self) -> str | None:
        """Why no request is served now (deleted, shutting down, failed without a backend)."""
        if self.deleted or self.closing or (self.failed and self._active is None):
            return self.last_error or "slot is not serving"
        return None

    # ---- leases (the data plane, through slots.lease) -----------------------------------------

    async def lease(self, *, timeout_s: float) -> SlotLease:
        """Lease the active backend: at once while the gate is open and it has a free place,
        else in the bounded FIFO queue (see `gate`)."""
        handle = self._active
        if self._gate.admit_now(handle):
            assert handle is not None
            return SlotLease(self, handle, 0.0, self._swap)
        if (reason := self.refusal()) is not None:
            raise lease.SlotUnavailable(reason)
        swap = self._swap  # a request queued by a swap counts towards it
        start = time.monotonic()
        handle = await self._gate.wait(self, timeout_s=timeout_s)
        waited = time.monotonic() - start
        swap = swap or self._swap
        if swap is not None:
            swap.max_queue_wait_ms = max(swap.max_queue_wait_ms, waited * 1000.0)
        return SlotLease(self, handle, waited, swap)

    def finished(self, held: SlotLease, *, ok: bool) -> None:
        """A leased request ended (ok=False: it failed): its place goes to the queue.

        It counts towards the swap that was running when it was admitted or queued, or else
        the one running now (requests in flight on A while a swap drains it).
        """
        held.upstream.release()
        self._gate.dispatch(self._active)
        swap = held.swap or self._swap
        if swap is not None:
            if ok:
                swap.requests_served += 1
            else:
                swap.requests_failed += 1

    # ---- status -------------------------------------------------------------------------------

    def status(self) -> contract.SlotStatus:
        handle = self._active
        serving = handle.spec if handle is not None else self.desired
        return contract.SlotStatus(
            name=self.name,
            served_name=self.desired.served_name,
            source=serving.source,
            revision=serving.revision,
            phase=self.phase,
            ready=handle is not None and self._gate.is_open,
            backend_port=handle.backend.port if handle is not None else None,
            in_flight=sum(h.in_flight for h in self._handles()),
            queued=self.queued,
            restarts=self.restarts,
            last_error=self.last_error,
            estimated_memory_bytes=self.estimate(),
            spec=self.desired,
            active_swap=self._swap.id if self._swap is not None else None,
            download=self._download.snapshot() if self._download is not None else None,
        )

    def estimate(self) -> int:
        """Memory the slot's live backends hold now (active + standby + draining)."""
        return sum(h.estimate for h in self._handles())

    def backend_pids(self) -> list[int]:
        return [h.backend.pid for h in self._handles() if h.backend.pid is not None]

    def _handles(self) -> list[Handle]:
        out = [h for h in (self._active, self._standby) if h is not None]
        return out + [h for h in self._retiring if h not in out]

    # ---- the convergence loop's task and its wake-ups -----------------------------------------

    def start(self, run: Callable[[Slot], Coroutine[Any, Any, None]]) -> None:
        """Run the convergence loop `run(self)` in a task of its own."""
        self._task = asyncio.get_running_loop().create_task(run(self), name=f"slot-{self.name}")
        self._wake.set()

    def want(
        self, spec: contract.SlotSpec, src: source.Source, *, request_id: str | None = None
    ) -> None:
        """A new desired spec (admitted by the registry): converge to it; a swap to it carries
        `request_id` in its record. A rank still forming a group the operator gave up on (its id
        changed) is stopped at once: it may wait in the ring's accept for a peer that is gone, and
        the loop must get to the new group."""
        self._desired = (spec, src)
        self.request_id = request_id
        self._wake.set()
        self._abandon_forming(spec)

    def delete(self) -> None:
        self.deleted = True
        self._wake.set()
        self._abandon_forming(None)

    def _abandon_forming(self, spec: contract.SlotSpec | None) -> None:
        """Stop a rank still forming its group when that group is no longer wanted (`spec`:
        the new desired spec; None: the slot is deleted). It may wait in the ring's accept for
        a peer that is gone, which would hold this slot's loop until the load timeout."""
        forming = self._standby
        if forming is None or forming.spec.shard is None or forming.spec == spec:
            return
        log.info("rank of an abandoned group stopped", extra={"slot": self.name})
        stop = self.deps.launcher.stop(forming.backend, grace_s=2.0)
        self._stopping = asyncio.get_running_loop().create_task(stop)

    def begin_shutdown(self) -> None:
        """Queued requests are refused from now on; requests in flight go on."""
        self.closing = True

    async def next_wake(self) -> None:
        """Wait until there is something to converge (a new spec, a retry, a deletion)."""
        await self._wake.wait()
        self._wake.clear()

    def retry_later(self) -> None:
        """Converge again after the restart backoff (1, 2, 4 ... s)."""
        delay = readiness.next_backoff(self.restarts, max_s=self.deps.restart_backoff_max_s)
        self.restarts += 1

        async def later() -> None:
            await asyncio.sleep(delay)
            self._wake.set()

        asyncio.get_running_loop().create_task(later())

    def fail(self, message: str) -> bool:
        """Converging failed; True when no backend serves (the slot is Failed and retries)."""
        self.last_error = message
        if self._active is not None:
            return False
        self.phase = Phase.FAILED
        self.failed = True
        return True

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
        self._active = self._standby = None
        self._retiring.clear()

    # ---- primitives of the swap protocol and the convergence loop -----------------------------

    def begin_swap(self, record: contract.SwapRecord) -> None:
        """A swap starts: it is recorded (newest first) and requests count towards it."""
        self.swaps.appendleft(record)
        self._swap = record
        self.phase = Phase.SWAPPING

    def end_swap(self) -> None:
        self._swap = None
        if self._active is not None and self._gate.is_open:
            self.phase = Phase.READY

    async def prepare(self, spec: contract.SlotSpec, src: source.Source) -> Prepared:
        """Weights for `spec` on disk (downloaded if needed) and pinned, and their estimate."""
        if self._active is None:
            self.phase = Phase.DOWNLOADING
        label = f"{self.name}-{int(time.time() * 1000) % 10**9}"
        meter = self._download = progress.Meter()
        try:
            model_dir = await self.deps.catalog.ensure(src, holder=label, progress=meter.update)
        except BaseException:
            self._download = None
            raise
        try:
            estimate = spec.memory_bytes or self.deps.catalog.estimate(spec, model_dir)
        except BaseException:
            self._download = None
            self.deps.catalog.release(label)
            raise
        if self._active is None:
            self.phase = Phase.LOADING
        return Prepared(spec=spec, source=src, model_dir=model_dir, estimate=estimate, label=label)

    def unprepare(self, prepared: Prepared) -> None:
        """Weights prepared but not loaded: unpin them."""
        self._download = None
        self.deps.catalog.release(prepared.label)

    async def load(self, prepared: Prepared) -> Handle:
        """Start and warm a backend on prepared weights (it becomes the standby); on failure the
        backend is stopped, the weights unpinned and BackendFailed raised."""
        if self._active is None:
            self.phase = Phase.LOADING
        spec = prepared.spec
        if spec.shard is not None:
            why = ranks.check_model(spec.shard, ranks.read_config(prepared.model_dir))
            if why is not None:
                self.deps.catalog.release(prepared.label)
                raise process.BackendFailed(why)
        backend, probes = self.deps.launcher.backend(
            model_dir=prepared.model_dir, spec=spec, label=prepared.label
        )
        handle = Handle(
            backend=backend,
            spec=spec,
            source=prepared.source,
            model_dir=prepared.model_dir,
            estimate=prepared.estimate,
        )
        self._standby = handle
        try:
            await backend.start()
            self.deps.owner.backends_changed()
            if self._active is None:
                self.phase = Phase.WARMING
            if spec.shard is not None and not spec.shard.leader:
                # a follower has no HTTP server: it is up while it runs; rank 0's warm-up
                # proves the whole group (it cannot answer without every rank)
                await ranks.follower_started(alive=backend.alive)
            else:
                warm = await self.deps.launcher.warm_up(backend, probes)
                handle.fingerprint = warm.fingerprint
        except BaseException as exc:
            self._standby = None
            self._download = None
            await self.deps.launcher.stop(backend, grace_s=2.0)
            self.deps.catalog.release(prepared.label)
            self.deps.owner.backends_changed()
            if isinstance(exc, readiness.NotReady | OSError):
                raise process.BackendFailed(f"{exc}; log: {backend.log_tail()}") from exc
            raise
        self._download = None  # loaded: the download's figures are history
        handle.watcher = asyncio.get_running_loop().create_task(self._watch(handle))
        return handle

    def switch(self, handle: Handle) -> Handle | None:
        """Atomically make `handle` the active backend and open the gate; return the old one."""
        old = self._active
        self._active = handle
        if self._standby is handle:
            self._standby = None
        if old is not None:
            old.retire()
            self._retiring.append(old)
        self.failed = False
        self.phase = Phase.READY
        self._gate.open(handle)
        self.deps.telemetry.observe_slot(
            self.name, model=handle.spec.served_name, source=handle.spec.source
        )
        return old

    def update_in_place(self, spec: contract.SlotSpec) -> None:
        """A new spec the active backend serves as it is (names, policies): adopt it."""
        if self._active is not None:
            self._active.spec = spec

    def close_gate(self) -> None:
        """New requests queue (a cold start or a hold swap is under way)."""
        self._gate.close()

    def open_gate(self) -> None:
        self._gate.open(self._active)

    def take_offline(self, handle: Handle) -> None:
        """Shut the gate and take `handle` off the route; its requests in flight go on."""
        self._gate.close()
        if self._active is handle:
            self._active = None
            self._retiring.append(handle)

    def revert(self, target: contract.SlotSpec, *, to: Handle) -> None:
        """A swap to `target` was rolled back: unless a newer spec arrived meanwhile, the desired
        spec is again the one `to` serves (and is saved)."""
        if self.desired == target:
            self._desired = (to.spec, to.source)
            self.request_id = None
            self.deps.owner.persist()

    async def drain(self, handle: Handle, *, timeout_s: float) -> bool:
        """Wait for a retired handle's in-flight requests; False when the timeout cut it short."""
        handle.retire()
        try:
            await asyncio.wait_for(handle.drained.wait(), timeout=timeout_s)
            return True
        except TimeoutError:
            return False

    async def outlive(self, handle: Handle, *, timeout_s: float) -> bool:
        """A retired follower rank: wait until its process exits on its own (its group's rank 0
        stopped); False when the timeout cut it short (it is stopped next)."""
        handle.retire()
        try:
            await asyncio.wait_for(handle.backend.wait_exit(), timeout=timeout_s)
            return True
        except TimeoutError:
            return False

    async def stop_retired(self, handle: Handle) -> None:
        await self._stop_handle(handle)

    async def drain_and_stop(self) -> None:
        """The slot is deleted: refuse what queues, drain and stop every backend."""
        handles = self._handles()
        self._active = self._standby = None
        self._gate.open(None)  # wake waiters: they see `deleted` and give up
        drain_s = float(self.desired.swap.drain_timeout_seconds)
        await asyncio.gather(*(self._retire_and_stop(h, drain_s=drain_s) for h in handles))
        self.deps.telemetry.forget_slot(self.name)

    async def _retire_and_stop(self, handle: Handle, *, drain_s: float) -> None:
        if handle not in self._retiring:
            self._retiring.append(handle)
        if drain_s > 0:
            await self.drain(handle, timeout_s=drain_s)
        await self._stop_handle(handle)

    async def _stop_handle(self, handle: Handle) -> None:
        handle.retire()
        await self.deps.launcher.stop(handle.backend)
        self.deps.catalog.release(handle.backend.label)
        if handle in self._retiring:
            self._retiring.remove(handle)
        if handle.watcher is not None and handle.watcher is not asyncio.current_task():
            handle.watcher.cancel()
        self.deps.owner.backends_changed()

    async def _watch(self, handle: Handle) -> None:
        """Notice a backend that exits on its own: fail over to a restart with backoff."""
        if handle.spec.shard is not None:
            await self._watch_rank(handle, handle.spec.shard)
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
        self.deps.owner.backends_changed()
        if handle is not self._active:
            return  # a standby's warm-up fails on its own; a draining one just ends
        self._gate.close()
        self._active = None
        self.phase = Phase.LOADING
        delay = readiness.next_backoff(self.restarts - 1, max_s=self.deps.restart_backoff_max_s)
        self.restarts += 1
        await self._stop_handle(handle)
        await asyncio.sleep(delay if self.restarts > 1 else 0.0)
        self._wake.set()

    async def _watch_rank(self, handle: Handle, shard: contract.RankSpec) -> None:
        """A rank whose process exits or, for rank 0, whose group broke (a peer was lost) is
        stopped and the slot fails: no rank keeps running alone, and none restarts alone (the
        operator re-forms the group with a new group id)."""
        backend = handle.backend
        why = await self.deps.launcher.watch_rank(backend, shard)
        if backend.stopping or handle.retired:
            return  # stopped on purpose, or an old rank retired by a swap (the swap stops it)
        log.error("rank stopped", extra={"slot": self.name, "pid": backend.pid, "reason": why})
        self.last_error = f"{why}; log: {backend.log_tail()}"
        backend.stopping = True
        if handle is self._active:
            self._gate.close()
            self._active = None
            self.phase = Phase.FAILED
            self.failed = True
        await self._stop_handle(handle)

    async def restart_rank(self, spec: contract.SlotSpec, src: source.Source) -> None:
        """A group re-forms as a whole: stop this rank's backend, start the new one (no surge)."""
        handle = self._active
        if handle is not None:
            self._gate.close()
            self._active = None
            await self._stop_handle(handle)
        handle = await self.load(await self.prepare(spec, src))
        self.switch(handle)
