"""The control side of the agent, minus HTTP: the slot registry, admission and GET /v1/state.

`Manager.apply` validates a desired slot (served name unique, file source under an allowed root,
memory fit: 507), persists it atomically and only then hands it to the slot's convergence loop:
a spec that fails any check, or a state file that cannot be written, changes nothing (never a
half-applied slot); identical specs are no-ops (declarative, idempotent). Domain errors
(`Rejected`, `NoFit`) are mapped to HTTP once, in app.
May import: contract, memory, platform, slots, sources, state, store, hoststats, stdlib.
Called by: app (control routes), router (lookup by served name).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from mlxfleet_agent import (
    __version__,
    contract,
    hoststats,
    memory,
    platform,
    sizing,
    slots,
    sources,
    state,
    store,
)

log = logging.getLogger(__name__)


class Rejected(Exception):
    """A request the agent refuses; `status` is the HTTP code, `field` names the culprit."""

    def __init__(
        self, status: int, message: str, *, field: str | None = None, allowed: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.allowed = allowed


class NoFit(Exception):
    """The model does not fit the memory budget (507)."""

    def __init__(self, *, estimate: int, budget: int, free: int) -> None:
        super().__init__(
            f"model needs an estimated {estimate} bytes but only {free} of the {budget} byte "
            "budget are free"
        )
        self.estimate = estimate
        self.budget = budget
        self.free = free


class ModelsFacade:
    """Model sources of the slots, over the model store; store errors become `Rejected`."""

    def __init__(self, store_: store.Store) -> None:
        self.store = store_
        self._prefetches: set[asyncio.Task[Path]] = set()

    def check(self, spec: contract.SlotSpec) -> None:
        """Synchronous admission of a source (cheap: no download; file:// must exist in a root)."""
        with _mapped():
            src = sources.parse(spec.source, spec.revision)
            if isinstance(src, sources.FileSource):
                sources.resolve_file(src, self.store.roots)

    def _local_dir(self, spec: contract.SlotSpec) -> Path | None:
        with _mapped():
            src = sources.parse(spec.source, spec.revision)
            if isinstance(src, sources.FileSource):
                return sources.resolve_file(src, self.store.roots)
            try:
                path = self.store.path_of(sources.model_id(spec.source, spec.revision))
            except store.ModelNotFound:
                return None
            return path if path.is_dir() else None

    def local_estimate(self, spec: contract.SlotSpec) -> int | None:
        """The memory estimate when the weights are on disk already, else None."""
        model_dir = self._local_dir(spec)
        if model_dir is None:
            return None
        try:
            return self.estimate(spec, model_dir)
        except sizing.UnknownModelSize as exc:
            raise Rejected(422, str(exc), field="source") from exc

    async def ensure(self, spec: contract.SlotSpec, *, holder: str | None = None) -> Path:
        with _mapped():
            return await self.store.ensure(spec.source, spec.revision, holder=holder)

    def release(self, holder: str) -> None:
        self.store.release(holder)

    def estimate(self, spec: contract.SlotSpec, model_dir: Path) -> int:
        size, shape = memory.inspect_model_dir(model_dir)
        return sizing.estimate(
            weights_bytes=size,
            shape=shape,
            context_length=spec.context_length,
            max_concurrency=spec.max_concurrency,
            kv_bits=spec.server.kv_bits,
        ).total_bytes

    def cached(self) -> list[contract.CachedModel]:
        return self.store.list()

    async def prefetch(self, body: contract.PrefetchRequest) -> contract.CachedModel:
        """Start fetching into the cache; answer with the cached entry (size 0 while fetching)."""
        with _mapped():
            sources.parse(body.source, body.revision)
            task = asyncio.get_running_loop().create_task(
                self.store.ensure(body.source, body.revision)
            )
            self._prefetches.add(task)
            task.add_done_callback(self._prefetch_done)
            done, _ = await asyncio.wait({task}, timeout=2.0)
            if done:
                task.result()
            mid = sources.model_id(body.source, body.revision)
            try:
                return self.store.get(mid)
            except store.ModelNotFound:
                return contract.CachedModel(
                    id=mid, source=body.source, revision=body.revision, size_bytes=0
                )

    def _prefetch_done(self, task: asyncio.Task[Path]) -> None:
        self._prefetches.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("prefetch failed", extra={"error": str(task.exception())})

    async def evict(self, model_id: str) -> None:
        with _mapped():
            await self.store.evict(model_id)

    def close(self) -> None:
        self.store.close()
        for task in self._prefetches:
            task.cancel()


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """Store domain errors -> Rejected (HTTP status chosen by the store's error class)."""
    try:
        yield
    except store.StoreError as exc:
        raise Rejected(exc.http_status, exc.message, field=exc.field, allowed=exc.allowed) from exc


class Manager:
    """All slots of this agent, their persistence and their admission."""

    def __init__(
        self,
        *,
        state_dir: Path,
        models_dir: Path,
        models: ModelsFacade,
        deps: slots.Deps,
        queue_limit: int,
        memory_budget: int | None,
    ) -> None:
        self.state_dir = state_dir
        self.models_dir = models_dir
        self.models = models
        self.deps = deps
        self.queue_limit = queue_limit
        self.memory_budget = memory_budget
        self.slots: dict[str, slots.Slot] = {}
        self.started_at = datetime.now(UTC)
        self.data_port = 0

    # ---- lifecycle ----------------------------------------------------------------------------

    def restore(self) -> list[str]:
        """Bring back the persisted slots (after a crash or reboot); returns their names."""
        for name, spec in state.load_slots(self.state_dir).items():
            self._create(name, spec)
        return sorted(self.slots)

    def begin_shutdown(self) -> None:
        """Queued requests are answered 503 now; in-flight ones go on (the data plane drains)."""
        for slot in self.slots.values():
            slot.closing = True

    async def close(self) -> None:
        self.models.close()
        await asyncio.gather(*(s.close() for s in self.slots.values()))
        self.record_backends()

    # ---- routing ------------------------------------------------------------------------------

    def route(self, served_name: str) -> slots.Slot | None:
        for slot in self.slots.values():
            follower = slot.desired.shard is not None and not slot.desired.shard.leader
            if slot.desired.served_name == served_name and not slot.deleted and not follower:
                return slot
        return None

    def served_names(self) -> list[str]:
        return [s.desired.served_name for s in self.slots.values() if not s.deleted]

    # ---- desired state ------------------------------------------------------------------------

    def apply(self, name: str, spec: contract.SlotSpec) -> tuple[contract.SlotStatus, bool]:
        """Set the desired spec of slot `name`; returns (status, changed)."""
        existing = self.slots.get(name)
        if existing is not None and existing.deleted:
            raise Rejected(
                409, f"slot {name} is being deleted; retry when it is gone", field="name"
            )
        for other in self.slots.values():
            if (
                other.name != name
                and not other.deleted
                and other.desired.served_name == spec.served_name
            ):
                raise Rejected(
                    409,
                    f"servedName {spec.served_name!r} is already served by slot {other.name}",
                    field="servedName",
                )
        if existing is not None and existing.desired == spec:
            return existing.status(), False
        self.models.check(spec)
        self._check_fit(name, spec)
        self._save({**self._desired(), name: spec})  # first: if it fails, nothing changed
        if existing is None:
            slot = self._create(name, spec)
        else:
            existing.want(spec)
            slot = existing
        return slot.status(), True

    def delete(self, name: str) -> contract.SlotStatus | None:
        slot = self.slots.get(name)
        if slot is None:
            return None
        if not slot.deleted:
            self._save({n: s for n, s in self._desired().items() if n != name})
            slot.delete()
            asyncio.get_running_loop().create_task(self._forget(slot))
        return slot.status()

    async def _forget(self, slot: slots.Slot) -> None:
        await slot.wait_stopped()
        if self.slots.get(slot.name) is slot:
            del self.slots[slot.name]
        self.record_backends()

    def _create(self, name: str, spec: contract.SlotSpec) -> slots.Slot:
        slot = slots.Slot(name, spec, deps=self.deps, queue_limit=self.queue_limit)
        self.slots[name] = slot
        slot.start()
        return slot

    def _desired(self) -> dict[str, contract.SlotSpec]:
        return {n: s.desired for n, s in self.slots.items() if not s.deleted}

    def persist(self) -> None:
        state.save_slots(self.state_dir, self._desired())

    def _save(self, specs: dict[str, contract.SlotSpec]) -> None:
        """Write the desired state it is about to adopt; 503 (and no change) if it cannot."""
        try:
            state.save_slots(self.state_dir, specs)
        except (OSError, ValueError) as exc:
            raise Rejected(
                503, f"cannot save the desired state in {self.state_dir}: {exc}; nothing changed"
            ) from exc

    def record_backends(self) -> None:
        pids = [pid for s in self.slots.values() for pid in s.backend_pids()]
        state.record_backends(self.state_dir, pids)

    # ---- memory -----------------------------------------------------------------------------

    def budget(self) -> int:
        if self.memory_budget is not None:
            return self.memory_budget
        return sizing.budget_bytes(platform.memory().total_bytes)

    def others_estimate(self, name: str) -> int:
        return sum(s.estimate() for n, s in self.slots.items() if n != name)

    def _check_fit(self, name: str, spec: contract.SlotSpec) -> None:
        estimate = spec.memory_bytes or self.models.local_estimate(spec)
        if estimate is None:
            return  # not on disk yet: checked again after the download
        budget = self.budget()
        free = max(0, budget - self.others_estimate(name))
        if estimate > free:
            raise NoFit(estimate=estimate, budget=budget, free=free)

    # ---- state ------------------------------------------------------------------------------

    def agent_state(self) -> contract.AgentState:
        mem = platform.memory()
        free, total = platform.disk(self.models_dir)
        statuses = [s.status() for s in sorted(self.slots.values(), key=lambda s: s.name)]
        return contract.AgentState(
            agent_version=__version__,
            os=platform.os_name(),
            mlx_version=platform.version_of("mlx"),
            mlx_lm_version=platform.version_of("mlx-lm"),
            chip=_CHIP,
            memory=contract.MemoryInfo(
                total_bytes=mem.total_bytes,
                available_bytes=mem.available_bytes,
                budget_bytes=self.budget(),
                slots_estimated_bytes=sum(s.estimate() for s in self.slots.values()),
                pressure=hoststats.pressure_level(
                    total=mem.total_bytes, available=mem.available_bytes
                ),
            ),
            disk=contract.DiskInfo(free_bytes=free, total_bytes=total),
            data_port=self.data_port,
            started_at=self.started_at,
            slots=statuses,
            cached_models=self.models.cached(),
            counters=self.deps.telemetry.counters(),
        )


_CHIP = platform.chip()
