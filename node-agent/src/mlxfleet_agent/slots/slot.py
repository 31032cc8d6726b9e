"""One slot: its desired spec, its active backend, the gate in front of it, its phase and swaps.

A `Slot` owns at most one *active* `Handle` (a ready backend). Requests lease the active handle
while the gate is open and keep that handle until they finish, whatever happens to the slot
meanwhile: that is what makes `switch` atomic and drop-free. Everything the swap protocol
(`swap`) and the convergence loop (`convergence`) do to a slot goes through the public
operations here (prepare, load, switch, take_offline, drain, stop_retired, revert, ...); the
loop itself runs in a task the registry starts (`start(run)`). The slot keeps the desired spec,
the phase, the gate, the swap records and the watch on its backends; the backends themselves
(active, standby, retiring: bringing one up, draining, stopping) are `handles.Handles`, and what
every slot shares is `deps.Deps`.
May import: the standard library, contract, backends (process, readiness), engines.tokencount,
models (progress, source), slots (deps, gate, handle, handles, lease).
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
from typing import Any

from mlxfleet_agent import contract
from mlxfleet_agent.backends import process, readiness
from mlxfleet_agent.engines import tokencount
from mlxfleet_agent.models import progress, source
from mlxfleet_agent.slots import deps as deps_
from mlxfleet_agent.slots import gate, handles, lease
from mlxfleet_agent.slots.handle import Handle, Prepared

log = logging.getLogger(__name__)
SWAP_HISTORY = 50
Phase = contract.SlotPhase


@dataclass(frozen=True, slots=True, eq=False)
class SlotLease:
    """A request's lease on a backend of `slot` (see `slots.lease.Lease`)."""

    slot: Slot
    upstream: Handle
    waited_s: float
    swap: contract.SwapRecord | None

    def release(self, *, ok: bool) -> None:
        self._forget()
        self.slot.finished(self, ok=ok)

    def sent(self) -> None:
        now = time.monotonic()
        self.upstream.sent[id(self)] = now
        self.upstream.waiting[id(self)] = now

    def answered(self) -> None:
        self.upstream.waiting.pop(id(self), None)

    def first_in_line(self) -> bool:
        return next(iter(self.upstream.sent), None) == id(self)

    def stuck(self, reason: str) -> None:
        self._forget()
        self.slot.renew(self.upstream, reason=reason)

    def _forget(self) -> None:
        self.upstream.sent.pop(id(self), None)
        self.upstream.waiting.pop(id(self), None)


class Slot:
    """One named slot (see the module docstring)."""

    def __init__(
        self,
        name: str,
        spec: contract.SlotSpec,
        src: source.Source,
        *,
        deps: deps_.Deps,
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
        self.renewal: tuple[Handle, str] | None = None  # a stuck backend to replace, and why
        self._backends = handles.Handles(deps)
        self._gate = gate.Gate(slot=name, limit=queue_limit)
        self._swap: contract.SwapRecord | None = None
        self._download: progress.Meter | None = None  # the weights being prepared
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Task[None] | None = None  # an abandoned rank being stopped
        self._active_at = time.monotonic()  # the last request's arrival or end, or readiness

    # ---- what it serves -----------------------------------------------------------------------

    @property
    def desired(self) -> contract.SlotSpec:
        return self._desired[0]

    @property
    def desired_source(self) -> source.Source:
        return self._desired[1]

    @property
    def active(self) -> Handle | None:
        return self._backends.active

    @property
    def queued(self) -> int:
        return self._gate.queued

    def serving(self) -> Handle | None:
        """The active backend, not leased (`slots.lease.Route.serving`)."""
        return self._backends.active

    def refusal(self) -> str | None:
        """Why no request is served now (deleted, shutting down, failed without a backend)."""
        if self.deleted or self.closing or (self.failed and self._backends.active is None):
            return self.last_error or "slot is not serving"
        return None

    # ---- leases (the data plane, through slots.lease) -----------------------------------------

    async def lease(self, *, timeout_s: float) -> SlotLease:
        """Lease the active backend: at once while the gate is open and it has a free place,
        else in the bounded FIFO queue (see `gate`)."""
        handle = self._backends.active
        self._active_at = time.monotonic()
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
        self._active_at = time.monotonic()
        self._count_wait(self._gate.dispatch(self._backends.active))
        swap = held.swap or self._swap
        if swap is not None:
            if ok:
                swap.requests_served += 1
            else:
                swap.requests_failed += 1

    # ---- status -------------------------------------------------------------------------------

    def idle_seconds(self) -> float | None:
        """Seconds since a request last arrived at or left the slot, or since its backend became
        ready (0 while requests are in flight or queued; None while no backend serves): the idle
        clock spec.idleTimeout is measured on, on the agent's own monotonic clock."""
        if self._backends.active is None:
            return None
        if self.queued or any(h.in_flight for h in self._backends.all()):
            return 0.0
        return round(max(0.0, time.monotonic() - self._active_at), 3)

    def busy(self) -> str | None:
        """Why the active backend counts as busy: a request has waited longer than the busy
        deadline for its first token (None: it is not)."""
        handle = self._backends.active
        if handle is None:
            return None
        waited = handle.waited_longest(time.monotonic())
        deadline = self.deps.busy_after_s
        if waited <= deadline:
            return None
        return (
            f"a request has waited {waited:.0f}s for its first token (busy deadline "
            f"{deadline:.0f}s); {len(handle.waiting)} waiting, {handle.in_flight} in flight"
        )

    def status(self) -> contract.SlotStatus:
        handle = self._backends.active
        serving = handle.spec if handle is not None else self.desired
        busy = self.busy()
        return contract.SlotStatus(
            name=self.name,
            served_name=self.desired.served_name,
            source=serving.source,
            revision=serving.revision,
            phase=self.phase,
            ready=handle is not None and self._gate.is_open and busy is None,
            busy=busy,
            backend_port=handle.backend.port if handle is not None else None,
            in_flight=sum(h.in_flight for h in self._backends.all()),
            queued=self.queued,
            idle_seconds=self.idle_seconds(),
            restarts=self.restarts,
            last_error=self.last_error,
            estimated_memory_bytes=self.estimate(),
            spec=self.desired,
            active_swap=self._swap.id if self._swap is not None else None,
            serving_group=serving.shard.group
            if handle is not None and serving.shard is not None
            else None,
            download=self._download.snapshot() if self._download is not None else None,
        )

    def estimate(self) -> int:
        """Memory the slot's live backends hold now (active + standby + draining)."""
        return sum(h.estimate for h in self._backends.all())

    def backend_pids(self) -> list[int]:
        return [h.backend.pid for h in self._backends.all() if h.backend.pid is not None]

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

    def renew(self, handle: Handle, *, reason: str) -> None:
        """`handle`'s backend holds work it cannot stop (a request whose client left): replace
        it with a fresh backend of the same spec (the convergence loop runs `swap.renew`)."""
        if handle is not self._backends.active or self.renewal is not None:
            return
        if handle.spec.shard is not None:  # a rank never restarts alone (its group re-forms)
            log.warning("rank holds work it cannot stop", extra={"slot": self.name})
            return
        log.warning("backend to be restarted", extra={"slot": self.name, "reason": reason})
        self.renewal = (handle, reason)
        self._wake.set()

    def delete(self) -> None:
        self.deleted = True
        self._wake.set()
        self._abandon_forming(None)

    def _abandon_forming(self, spec: contract.SlotSpec | None) -> None:
        """Stop a rank still forming its group when that group is no longer wanted (`spec`:
        the new desired spec; None: the slot is deleted). It may wait in the ring's accept for
        a peer that is gone, which would hold this slot's loop until the load timeout."""
        forming = self._backends.standby
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
        self.deps.telemetry.backend_restarted(self.name)

        async def later() -> None:
            await asyncio.sleep(delay)
            self._wake.set()

        asyncio.get_running_loop().create_task(later())

    def fail(self, message: str) -> bool:
        """Converging failed; True when no backend serves (the slot is Failed and retries)."""
        self.last_error = message
        if self._backends.active is not None:
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
        await self._backends.stop_all()

    # ---- primitives of the swap protocol and the convergence loop -----------------------------

    def begin_swap(self, record: contract.SwapRecord) -> None:
        """A swap starts: it is recorded (newest first) and requests count towards it."""
        self.swaps.appendleft(record)
        self._swap = record
        self.phase = Phase.SWAPPING

    def end_swap(self) -> None:
        self._swap = None
        if self._backends.active is not None and self._gate.is_open:
            self.phase = Phase.READY

    async def prepare(self, spec: contract.SlotSpec, src: source.Source) -> Prepared:
        """Weights for `spec` on disk (downloaded if needed) and pinned, and their estimate."""
        if self._backends.active is None:
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
        if self._backends.active is None:
            self.phase = Phase.LOADING
        return Prepared(spec=spec, source=src, model_dir=model_dir, estimate=estimate, label=label)

    def unprepare(self, prepared: Prepared) -> None:
        """Weights prepared but not loaded: unpin them."""
        self._download = None
        self.deps.catalog.release(prepared.label)

    async def load(self, prepared: Prepared) -> Handle:
        """Start and warm a backend on prepared weights (it becomes the standby); on failure the
        backend is stopped, the weights unpinned and BackendFailed raised."""
        if self._backends.active is None:
            self.phase = Phase.LOADING
        handle, probes = self._backends.create(prepared)
        counting = self._load_counter(prepared)
        try:
            await self._backends.start(handle)
            if self._backends.active is None:
                self.phase = Phase.WARMING
            await self._backends.warm(handle, probes)
            if counting is not None:
                handle.counter = await counting
        except BaseException as exc:
            self._download = None
            if counting is not None:
                counting.cancel()
            await self._backends.discard(handle, label=prepared.label)
            if isinstance(exc, readiness.NotReady | OSError):
                raise process.BackendFailed(f"{exc}; log: {handle.backend.log_tail()}") from exc
            raise
        self._download = None  # loaded: the download's figures are history
        handle.watcher = asyncio.get_running_loop().create_task(self._watch(handle))
        return handle

    def _load_counter(
        self, prepared: Prepared
    ) -> asyncio.Future[tokencount.Counter | tokencount.ByteBound] | None:
        """The model's tokenizer, read in a thread while the backend starts (engines that
        generate only: the KV budget is checked for completions)."""
        generating = {contract.Capability.CHAT, contract.Capability.COMPLETIONS}
        if not generating & set(prepared.spec.engine.capabilities):
            return None
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, tokencount.load, prepared.model_dir)

    def switch(self, handle: Handle) -> Handle | None:
        """Atomically make `handle` the active backend and open the gate; return the old one."""
        old = self._backends.promote(handle)
        self.failed = False
        self.phase = Phase.READY
        self._active_at = time.monotonic()  # the idle clock starts when it can serve
        self._count_wait(self._gate.open(handle))
        self.deps.telemetry.observe_slot(
            self.name, model=handle.spec.served_name, source=handle.spec.source
        )
        return old

    def update_in_place(self, spec: contract.SlotSpec) -> None:
        """A new spec the active backend serves as it is (names, policies): adopt it."""
        if self._backends.active is not None:
            self._backends.active.spec = spec

    def close_gate(self) -> None:
        """New requests queue (a cold start or a hold swap is under way)."""
        self._gate.close()

    def open_gate(self) -> None:
        self._count_wait(self._gate.open(self._backends.active))

    def _count_wait(self, waited_s: float) -> None:
        """The gate handed places to requests that waited up to `waited_s`: the running swap
        counts it now, before its record is finished (the requests themselves run later)."""
        if waited_s > 0.0 and self._swap is not None:
            self._swap.max_queue_wait_ms = max(self._swap.max_queue_wait_ms, waited_s * 1000.0)

    def take_offline(self, handle: Handle) -> None:
        """Shut the gate and take `handle` off the route; its requests in flight go on."""
        self._gate.close()
        self._backends.take_off(handle)

    def revert(self, target: contract.SlotSpec, *, to: Handle) -> None:
        """A swap to `target` was rolled back: unless a newer spec arrived meanwhile, the desired
        spec is again the one `to` serves (and is saved)."""
        if self.desired == target:
            self._desired = (to.spec, to.source)
            self.request_id = None
            self.deps.owner.persist()

    async def drain(self, handle: Handle, *, timeout_s: float) -> bool:
        """Wait for a retired handle's in-flight requests; False when the timeout cut it short."""
        return await self._backends.drain(handle, timeout_s=timeout_s)

    async def outlive(self, handle: Handle, *, timeout_s: float) -> bool:
        """A retired follower rank: wait until its process exits on its own (its group's rank 0
        stopped); False when the timeout cut it short (it is stopped next)."""
        return await self._backends.outlive(handle, timeout_s=timeout_s)

    async def stop_retired(self, handle: Handle) -> None:
        await self._backends.stop(handle)

    async def drain_and_stop(self) -> None:
        """The slot is deleted: refuse what queues, drain and stop every backend."""
        backends = self._backends
        every = backends.all()
        backends.active = backends.standby = None
        self._gate.open(None)  # wake waiters: they see `deleted` and give up
        drain_s = float(self.desired.swap.drain_timeout_seconds)
        await asyncio.gather(*(backends.retire_and_stop(h, drain_s=drain_s) for h in every))
        self.deps.telemetry.forget_slot(self.name)

    async def _watch(self, handle: Handle) -> None:
        """Notice a backend that stops serving on its own (its process exits, or its health
        endpoint says no: mlx_lm whose generation thread died, the process alive): stop it and
        fail over to a restart with backoff."""
        if handle.spec.shard is not None:
            await self._watch_rank(handle, handle.spec.shard)
            return
        why = await self.deps.launcher.watch(handle.backend, None)
        if handle.backend.stopping:
            return
        tail = handle.backend.log_tail()
        log.error(
            "backend stopped serving",
            extra={"slot": self.name, "pid": handle.backend.pid, "reason": why},
        )
        self.last_error = f"{why}; log: {tail}"
        handle.backend.stopping = True
        self.deps.owner.backends_changed()
        if handle is not self._backends.active:
            # a standby's warm-up fails on its own; a draining one just ends (an unhealthy
            # process is stopped first, so both see an exited backend)
            await self.deps.launcher.stop(handle.backend)
            return
        self._gate.close()
        self._backends.active = None
        self.phase = Phase.LOADING
        delay = readiness.next_backoff(self.restarts - 1, max_s=self.deps.restart_backoff_max_s)
        self.restarts += 1
        self.deps.telemetry.backend_restarted(self.name)
        await self._backends.stop(handle)
        await asyncio.sleep(delay if self.restarts > 1 else 0.0)
        self._wake.set()

    async def _watch_rank(self, handle: Handle, shard: contract.RankSpec) -> None:
        """A rank whose process exits or, for rank 0, whose group broke (a peer was lost) is
        stopped and the slot fails: no rank keeps running alone, and none restarts alone (the
        operator re-forms the group with a new group id)."""
        backend = handle.backend
        why = await self.deps.launcher.watch(backend, shard)
        if backend.stopping or handle.retired:
            return  # stopped on purpose, or an old rank retired by a swap (the swap stops it)
        log.error("rank stopped", extra={"slot": self.name, "pid": backend.pid, "reason": why})
        self.last_error = f"{why}; log: {backend.log_tail()}"
        backend.stopping = True
        if handle is self._backends.active:
            self._gate.close()
            self._backends.active = None
            self.phase = Phase.FAILED
            self.failed = True
        await self._backends.stop(handle)

    async def restart_rank(self, spec: contract.SlotSpec, src: source.Source) -> None:
        """A group re-forms as a whole: stop this rank's backend, start the new one (no surge)."""
        handle = self._backends.active
        if handle is not None:
            self._gate.close()
            self._backends.active = None
            await self._backends.stop(handle)
        handle = await self.load(await self.prepare(spec, src))
        self.switch(handle)
