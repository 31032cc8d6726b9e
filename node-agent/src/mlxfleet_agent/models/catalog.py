"""The models as the rest of the agent sees them: admission of a source, weights on disk for a
swap (pinned while a backend uses them), memory estimates (per engine), and the store routes of the
API.

One `Catalog` per agent over its `store.Store`. A source is parsed once (`admit`, at the PUT)
and the parsed `Source` is what every later call takes. Store errors become
`refusals.Rejected` here (the HTTP status chosen by the store's error class), so the control API
maps one kind of refusal. A prefetch still fetching answers with its `download` progress (one
meter per model while any prefetch of it runs).
May import: the standard library, contract, sizing, refusals, engines.registry (memory), models
(errors, source, local, modeldir, progress, store). Called by: slots (registry: admission; slot:
ensure/estimate/release),
controlapi (models routes), runtime (builds and closes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxfleet_agent import contract, refusals, sizing
from mlxfleet_agent.engines import registry
from mlxfleet_agent.models import errors, local, modeldir, progress, source, store

log = logging.getLogger(__name__)


class Catalog:
    """Model sources of the slots, over the model store (see the module docstring)."""

    def __init__(self, store_: store.Store) -> None:
        self.store = store_
        self._prefetches: dict[str, set[asyncio.Task[Path]]] = {}
        self._meters: dict[str, progress.Meter] = {}

    # ---- admission (PUT /v1/slots/{name}) -------------------------------------------------

    def admit(self, spec: contract.SlotSpec) -> source.Source:
        """The parsed source of `spec`, checked without a download (file:// must exist inside
        an allowed root)."""
        with _mapped():
            src = source.of(spec)
            if isinstance(src.location, source.FilePath):
                local.resolve(src.location, self.store.roots)
            return src

    def local_estimate(self, spec: contract.SlotSpec, src: source.Source) -> int | None:
        """The memory estimate when the weights are on disk already, else None."""
        model_dir = self._local_dir(src)
        if model_dir is None:
            return None
        try:
            return self.estimate(spec, model_dir)
        except sizing.UnknownModelSize as exc:
            raise refusals.Rejected(422, str(exc), field="source") from exc

    def _local_dir(self, src: source.Source) -> Path | None:
        with _mapped():
            if isinstance(src.location, source.FilePath):
                return local.resolve(src.location, self.store.roots)
            try:
                path = self.store.path_of(src.id)
            except errors.ModelNotFound:
                return None
            return path if path.is_dir() else None

    # ---- slots ------------------------------------------------------------------------------

    async def ensure(
        self, src: source.Source, *, holder: str, progress: store.ProgressCallback | None = None
    ) -> Path:
        """The weights on disk (fetched if needed), pinned for `holder` until `release`;
        `progress(done, total)` hears how far the download is (from a worker thread)."""
        with _mapped():
            return await self.store.ensure(src, progress, holder=holder)

    def release(self, holder: str) -> None:
        self.store.release(holder)

    def estimate(self, spec: contract.SlotSpec, model_dir: Path) -> int:
        """Bytes `spec` needs once loaded from `model_dir` (UnknownModelSize: refuse it): the
        slot's engine decides, reading the directory only if it needs to."""
        return registry.memory(spec, _ModelDir(model_dir))

    # ---- the store routes of the control API ---------------------------------------------

    def cached(self) -> list[contract.CachedModel]:
        return self.store.list()

    async def prefetch(self, body: contract.PrefetchRequest) -> contract.CachedModel:
        """Start fetching into the cache; answer with the cached entry (size 0 and the download's
        progress while fetching)."""
        with _mapped():
            src = source.of(body)
            mid = src.id
            meter = self._meters.setdefault(mid, progress.Meter())
            task = asyncio.get_running_loop().create_task(
                self.store.ensure(src, meter.update, peers=body.peers)
            )
            self._prefetches.setdefault(mid, set()).add(task)
            task.add_done_callback(lambda t: self._prefetch_done(mid, t))
            done, _ = await asyncio.wait({task}, timeout=2.0)
            if done:
                task.result()
            try:
                return self.store.get(mid)
            except errors.ModelNotFound:
                return contract.CachedModel(
                    id=mid,
                    source=body.source,
                    revision=body.revision,
                    size_bytes=0,
                    download=meter.snapshot(),
                )

    def _prefetch_done(self, mid: str, task: asyncio.Task[Path]) -> None:
        running = self._prefetches.get(mid, set())
        running.discard(task)
        if not running:
            self._prefetches.pop(mid, None)
            self._meters.pop(mid, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("prefetch failed", extra={"error": str(task.exception())})

    async def evict(self, model_id: str) -> None:
        with _mapped():
            await self.store.evict(model_id)

    def close(self) -> None:
        self.store.close()
        for running in self._prefetches.values():
            for task in running:
                task.cancel()


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """Store domain errors -> Rejected (HTTP status chosen by the store's error class)."""
    try:
        yield
    except errors.StoreError as exc:
        raise refusals.Rejected(
            exc.http_status, exc.message, field=exc.field, allowed=exc.allowed
        ) from exc


@dataclass(frozen=True, slots=True)
class _ModelDir:
    """A model directory as `plugin.Weights`: read when an engine's memory asks."""

    path: Path

    def inspect(self) -> tuple[int, contract.ModelShape]:
        return modeldir.inspect(self.path)

    def config(self) -> dict[str, Any]:
        return modeldir.read_config(self.path)
