"""The backends of one slot (`Handles`): the active one, the standby, the retiring ones.

At most one *active* handle serves requests; a *standby* is B while it starts and warms (before
the switch); *retiring* handles drain their in-flight requests and are then stopped. This module
brings a backend up on prepared weights (`create`, `start`, `warm`, or `discard` on failure),
moves handles between those places (`promote`, `take_off`) and drains and stops them, unpinning
their weights and telling the owner. It knows nothing of the gate, the phase or swaps: the slot
(`slot.Slot`) decides when, and keeps its own state.
May import: the standard library, contract, backends (process, ranks), engines (plugin,
mlxlm), slots (deps, handle). Called by: slots.slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from mlxfleet_agent.backends import process, ranks
from mlxfleet_agent.engines import mlxlm, plugin
from mlxfleet_agent.slots import deps as deps_
from mlxfleet_agent.slots.handle import Handle, Prepared


class Handles:
    """The backends of one slot (see the module docstring)."""

    def __init__(self, deps: deps_.Deps) -> None:
        self.deps = deps
        self.active: Handle | None = None
        self.standby: Handle | None = None  # B while it loads, before the switch
        self.retiring: list[Handle] = []
        self._guards: set[asyncio.Future[None]] = set()  # ranks' accept guards (ranks.py)

    def all(self) -> list[Handle]:
        """Every live handle: active, standby, then the retiring ones."""
        out = [h for h in (self.active, self.standby) if h is not None]
        return out + [h for h in self.retiring if h not in out]

    # ---- bringing one up ----------------------------------------------------------------------

    def create(self, prepared: Prepared) -> tuple[Handle, Sequence[plugin.Probe]]:
        """A backend for prepared weights (not started yet), now the standby, and its readiness
        probes. A rank whose model cannot be split as asked raises BackendFailed (unpinned)."""
        spec = prepared.spec
        config = ranks.read_config(prepared.model_dir)
        if spec.shard is not None:
            why = self.deps.launcher.rank_refused(spec.shard) or ranks.check_model(
                spec.shard, config
            )
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
            vocab_size=mlxlm.vocab_size(config),
        )
        self.standby = handle
        return handle, probes

    async def start(self, handle: Handle) -> None:
        await handle.backend.start()
        self.deps.owner.backends_changed()
        if handle.spec.shard is not None:  # mlx's ring accepts without a timeout: bound it
            task = asyncio.ensure_future(
                self.deps.launcher.guard_accept(handle.backend, handle.spec.shard)
            )
            self._guards.add(task)
            task.add_done_callback(self._guards.discard)

    async def warm(self, handle: Handle, probes: Sequence[plugin.Probe]) -> None:
        """Wait until the started backend is ready (NotReady, or OSError, when it is not)."""
        shard = handle.spec.shard
        if shard is not None and not shard.leader:
            # a follower has no HTTP server: it is up while it runs; rank 0's warm-up
            # proves the whole group (it cannot answer without every rank)
            await ranks.follower_started(alive=handle.backend.alive)
        else:
            warm = await self.deps.launcher.warm_up(handle.backend, probes)
            handle.fingerprint = warm.fingerprint

    async def discard(self, handle: Handle, *, label: str) -> None:
        """A standby that did not come up: stop it and unpin its weights (`label`)."""
        self.standby = None
        await self.deps.launcher.stop(handle.backend, grace_s=2.0)
        self.deps.catalog.release(label)
        self.deps.owner.backends_changed()

    # ---- moving handles between places --------------------------------------------------------

    def promote(self, handle: Handle) -> Handle | None:
        """Make `handle` the active one; the old active one (returned) retires."""
        old = self.active
        self.active = handle
        if self.standby is handle:
            self.standby = None
        if old is not None:
            old.retire()
            self.retiring.append(old)
        return old

    def take_off(self, handle: Handle) -> None:
        """`handle` no longer serves new requests (it retires once asked to drain)."""
        if self.active is handle:
            self.active = None
            self.retiring.append(handle)

    # ---- draining and stopping ----------------------------------------------------------------

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

    async def stop(self, handle: Handle) -> None:
        """Stop the backend, unpin its weights, forget it (and cancel its watcher)."""
        handle.retire()
        await self.deps.launcher.stop(handle.backend)
        self.deps.catalog.release(handle.backend.label)
        if handle in self.retiring:
            self.retiring.remove(handle)
        if handle.watcher is not None and handle.watcher is not asyncio.current_task():
            handle.watcher.cancel()
        self.deps.owner.backends_changed()

    async def retire_and_stop(self, handle: Handle, *, drain_s: float) -> None:
        if handle not in self.retiring:
            self.retiring.append(handle)
        if drain_s > 0:
            await self.drain(handle, timeout_s=drain_s)
        await self.stop(handle)

    async def stop_all(self) -> None:
        """Agent shutdown: stop every backend at once (the data plane already drained)."""
        await asyncio.gather(*(self.stop(h) for h in self.all()))
        self.active = self.standby = None
        self.retiring.clear()
