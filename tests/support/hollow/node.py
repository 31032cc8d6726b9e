"""One hollow Mac: its slots, model cache, memory budget and faults, behind the control API.

Admission is the real agent's (`control.Manager.apply`): a slot being deleted is 503 (retry: it
goes once its backends stopped), a served name another slot has is 409, an identical spec is a
no-op, a `file://` source must be a model directory under an allowed root (403 outside, 404
missing), and when the estimate is known (the
spec's memoryBytes, or the model is on disk / in the cache) it must fit the budget minus the
other slots (507 with the InsufficientMemory body). Estimates of file models come from their
config.json and safetensors (the shared `mlxfleet_agent.memory`), of other sources from the
fleet's model table.
May import: the standard library, `mlxfleet_agent` (contract, memory, models, slots, __version__),
hollow.*. The slots are the agent's own (`slots.slot.Slot`, over hollow.slots' backends).
Called by: hollow.api, hollow.server.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from mlxfleet_agent import __version__, contract, sizing
from mlxfleet_agent.models import modeldir, source
from mlxfleet_agent.refusals import NoFit, Rejected  # the real agent's refusals, same messages
from mlxfleet_agent.slots import deps
from mlxfleet_agent.slots.slot import Slot
from mlxfleet_agent.telemetry import hoststats
from tests.support.hollow import config, slots

DOCTOR_DISK_MIN_FREE = 20 * 2**30  # the agent's default doctorDiskMinFreeBytes


def model_id(source: str, revision: str | None) -> str:
    """The agent's stable id of a cached model (hash of source and revision)."""
    return hashlib.sha256(f"{source}\n{revision or ''}".encode()).hexdigest()[:16]


class HollowNode:
    def __init__(self, cfg: config.NodeConfig, fleet: config.FleetConfig) -> None:
        self.cfg = cfg
        self.fleet = fleet
        self.faults = cfg.faults.model_copy(deep=True)
        self.awake = asyncio.Event()
        self.awake.set()
        self.slots: dict[str, Slot] = {}
        self.cache: dict[str, contract.CachedModel] = {}
        self.pins: dict[str, set[str]] = {}
        self.downloads: dict[str, asyncio.Task[contract.CachedModel]] = {}
        self.started_at = datetime.now(UTC)
        self.port = cfg.port
        self.requests = 0
        self.answers: Counter[str] = Counter()  # "<method> <route> <status>" (hollow.server)
        self._random = random.Random(f"{fleet.seed}-{cfg.name}")
        self.deps = deps.Deps(  # the real slots' seam, over simulated backends
            catalog=slots.Catalog(self),
            launcher=slots.Launcher(self),
            telemetry=slots.Telemetry(),
            owner=self,
            restart_backoff_max_s=slots.BACKOFF_MAX_S,
        )

    # ---- the Owner protocol of the real slots (slots.deps.Owner) ---------------------------

    def backends_changed(self) -> None:
        """No backend processes to record (the real agent writes their pids to its state dir)."""

    def persist(self) -> None:
        """A hollow node keeps its desired state in memory only."""

    # ---- what the simulated backends ask (hollow.slots.Host) ------------------------------

    async def step(self, seconds: float) -> None:
        jitter = self.fleet.timing.jitter
        await asyncio.sleep(max(0.0, seconds * (1 + self._random.uniform(-jitter, jitter))))

    @property
    def timing_load_s(self) -> float:
        return self.fleet.timing.load_s

    @property
    def timing_warm_s(self) -> float:
        return self.fleet.timing.warm_s

    @property
    def timing_stop_s(self) -> float:
        return self.fleet.timing.stop_s

    def budget(self) -> int:
        if self.cfg.memory_budget_bytes is not None:
            return self.cfg.memory_budget_bytes
        return sizing.budget_bytes(self.cfg.memory_bytes)

    def others_estimate(self, name: str) -> int:
        return sum(s.estimate() for n, s in self.slots.items() if n != name)

    def load_fault(self, spec: contract.SlotSpec) -> str | None:
        if self.faults.fail_loads:
            return "backend exited with code 1 (injected fault: every load fails)"
        if any(p in spec.source for p in self.faults.fail_sources):
            return f"backend exited with code 1 (injected fault: loads of {spec.source} fail)"
        return None

    async def ensure(self, spec: contract.SlotSpec, *, holder: str) -> contract.CachedModel:
        """The model in the cache (downloaded once, shared by concurrent callers), pinned."""
        mid = model_id(spec.source, spec.revision)
        self.pins.setdefault(mid, set()).add(holder)
        cached = self.cache.get(mid)
        if cached is None:
            task = self.downloads.get(mid)
            if task is None:
                task = asyncio.get_running_loop().create_task(self._download(spec, mid))
                self.downloads[mid] = task
            cached = await asyncio.shield(task)
        cached.last_used = datetime.now(UTC)
        return cached

    async def _download(self, spec: contract.SlotSpec, mid: str) -> contract.CachedModel:
        try:
            if spec.source.startswith("file://"):
                size, shape = modeldir.inspect(self.file_dir(spec.source))
            else:
                await self.step(self.fleet.timing.download_s)
                info = self.fleet.model(spec.source)
                size, shape = info.size_bytes, info.shape
            self.cache[mid] = contract.CachedModel(
                id=mid,
                source=spec.source,
                revision=spec.revision,
                size_bytes=size,
                total_bytes=size,
                shape=shape,
                last_used=datetime.now(UTC),
            )
            return self.cache[mid]
        finally:
            self.downloads.pop(mid, None)

    def release(self, holder: str) -> None:
        for holders in self.pins.values():
            holders.discard(holder)

    def estimate(self, spec: contract.SlotSpec, cached: contract.CachedModel) -> int:
        if spec.memory_bytes:
            return spec.memory_bytes
        return sizing.estimate(
            weights_bytes=cached.size_bytes,
            shape=cached.shape,
            context_length=spec.context_length,
            max_concurrency=spec.max_concurrency,
            kv_bits=spec.server.kv_bits,
        ).total_bytes

    # ---- admission ----------------------------------------------------------------------------

    def file_dir(self, source: str) -> Path:
        path = Path(source.removeprefix("file://"))
        real = path.resolve(strict=False)
        roots = [Path(r).resolve(strict=False) for r in self.fleet.allowed_roots]
        if not any(real == r or real.is_relative_to(r) for r in roots):
            raise Rejected(
                403,
                f"file source {path} resolves to {real}, outside the allowed roots",
                field="source",
                allowed=", ".join(str(r) for r in roots),
            )
        if not real.is_dir():
            raise Rejected(404, f"file source {path}: no such directory", field="source")
        if not (real / "config.json").is_file():
            raise Rejected(
                404, f"file source {path} is not a model directory (no config.json)", field="source"
            )
        return real

    def _known_estimate(self, spec: contract.SlotSpec) -> int | None:
        if spec.memory_bytes:
            return spec.memory_bytes
        cached = self.cache.get(model_id(spec.source, spec.revision))
        if cached is None and spec.source.startswith("file://"):
            size, shape = modeldir.inspect(self.file_dir(spec.source))
            cached = contract.CachedModel(id="", source=spec.source, size_bytes=size, shape=shape)
        if cached is None:
            return None  # checked again after the download (as the real agent does)
        return self.estimate(spec, cached)

    def apply(
        self, name: str, spec: contract.SlotSpec, *, request_id: str | None = None
    ) -> contract.SlotStatus:
        existing = self.slots.get(name)
        if existing is not None and existing.deleted:
            raise Rejected(
                503, f"slot {name} is being deleted; retry when it is gone", field="name"
            )
        for other in self.slots.values():
            if (
                other.name != name
                and not other.deleted
                and other.desired.served_name == (spec.served_name)
            ):
                raise Rejected(
                    409,
                    f"servedName {spec.served_name!r} is already served by slot {other.name}",
                    field="servedName",
                )
        if existing is not None and existing.desired == spec:
            if request_id is not None:
                existing.request_id = request_id
            return existing.status()
        if spec.source.startswith("file://"):
            self.file_dir(spec.source)
        try:
            estimate = self._known_estimate(spec)
        except sizing.UnknownModelSize as exc:
            raise Rejected(422, str(exc), field="source") from exc
        if estimate is not None:
            free = max(0, self.budget() - self.others_estimate(name))
            if estimate > free:
                raise NoFit(estimate=estimate, budget=self.budget(), free=free)
        if existing is None:
            slot = slots.new_slot(name, spec, shared=self.deps)
            self.slots[name] = slot
            return slot.status()
        existing.want(spec, source.of(spec), request_id=request_id)
        return existing.status()

    def delete(self, name: str) -> contract.SlotStatus | None:
        slot = self.slots.get(name)
        if slot is None:
            return None
        if not slot.deleted:
            slot.delete()
            asyncio.get_running_loop().create_task(self._forget(slot))
        return slot.status()

    async def _forget(self, slot: Slot) -> None:
        await slot.wait_stopped()
        if self.slots.get(slot.name) is slot:
            del self.slots[slot.name]

    # ---- models -------------------------------------------------------------------------------

    def cached(self) -> list[contract.CachedModel]:
        never = datetime.min.replace(tzinfo=UTC)
        found = sorted(self.cache.values(), key=lambda m: m.last_used or never, reverse=True)
        return [m.model_copy(update={"in_use": bool(self.pins.get(m.id))}) for m in found]

    async def prefetch(self, body: contract.PrefetchRequest) -> contract.CachedModel:
        spec = contract.SlotSpec(source=body.source, revision=body.revision, served_name="x")
        if spec.source.startswith("file://"):
            self.file_dir(spec.source)
        task = asyncio.get_running_loop().create_task(self.ensure(spec, holder="prefetch"))
        task.add_done_callback(lambda _: self.release("prefetch"))
        await asyncio.wait({task}, timeout=2.0)
        mid = model_id(body.source, body.revision)
        if mid in self.cache:
            return self.cache[mid].model_copy(update={"in_use": bool(self.pins.get(mid))})
        return contract.CachedModel(
            id=mid, source=body.source, revision=body.revision, size_bytes=0
        )

    def evict(self, mid: str) -> None:
        if mid not in self.cache:
            raise Rejected(404, f"no cached model with id {mid!r}", field="id")
        if holders := self.pins.get(mid):
            raise Rejected(
                409,
                f"model {mid} is in use by {', '.join(sorted(holders))}",
                field="id",
                allowed="a model no slot wants (delete or change those slots first)",
            )
        if mid in self.downloads:
            raise Rejected(409, f"model {mid} is being downloaded", field="id")
        del self.cache[mid]

    # ---- GET /v1/state -------------------------------------------------------------------------

    def state(self) -> contract.AgentState:
        total = self.cfg.memory_bytes
        used = sum(s.estimate() for s in self.slots.values())
        available = max(0, total - used - sizing.DEFAULT_RESERVED_BYTES)
        pressure = hoststats.pressure(total=total, available=available)  # the agent's own rule
        return contract.AgentState(
            agent_version=__version__,
            os="hollow (simulated macOS)",
            chip="Apple M-series (hollow)",
            memory=contract.MemoryInfo(
                total_bytes=total,
                available_bytes=available,
                budget_bytes=self.budget(),
                slots_estimated_bytes=used,
                pressure=pressure.level,
                pressure_reason=pressure.why,
            ),
            disk=contract.DiskInfo(
                free_bytes=self.cfg.disk_bytes - sum(m.total_bytes for m in self.cache.values()),
                total_bytes=self.cfg.disk_bytes,
            ),
            data_port=self.port,
            started_at=self.started_at,
            slots=[self.slots[n].status() for n in sorted(self.slots)],
            cached_models=self.cached(),
            counters={"hollow_requests": float(self.requests)},
            # a host with no heat source, whose doctor finds nothing that applies (as the real
            # agent on Linux answers): the operator's disk check only
            thermal=contract.ThermalInfo(),
            doctor=contract.DoctorReport(
                checked_at=self.started_at, disk_min_free_bytes=DOCTOR_DISK_MIN_FREE
            ),
            now=datetime.now(UTC),  # the real agent's clock, for the operator's offset
            fabric_address="127.0.0.1",  # as a real agent on loopback
            engines=[  # a simulated Mac runs mlx-lm only
                contract.EngineInfo(
                    name=contract.EngineName.MLX_LM, available=True, reason="hollow (simulated)"
                )
            ],
        )

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.slots.values()))
