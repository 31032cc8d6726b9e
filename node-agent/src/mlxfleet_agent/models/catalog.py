"""The models as the rest of the agent sees them: admission of a source, weights on disk for a
swap (pinned while a backend uses them), memory estimates, and the store routes of the API.

One `Catalog` per agent over its `store.Store`. A source is parsed once (`admit`, at the PUT)
and the parsed `Source` is what every later call takes. Store errors become
`refusals.Rejected` here (the HTTP status chosen by the store's error class), so the control API
maps one kind of refusal.
May import: the standard library, contract, sizing, refusals, models (errors, source, local,
modeldir, store). Called by: slots (registry: admission; slot: ensure/estimate/release),
controlapi (models routes), runtime (builds and closes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from mlxfleet_agent import contract, refusals, sizing
from mlxfleet_agent.models import errors, local, modeldir, source, store

log = logging.getLogger(__name__)


class Catalog:
    """Model sources of the slots, over the model store (see the module docstring)."""

    def __init__(self, store_: store.Store) -> None:
        self.store = store_
        self._prefetches: set[asyncio.Task[Path]] = set()

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

    async def ensure(self, src: source.Source, *, holder: str) -> Path:
        """The weights on disk (fetched if needed), pinned for `holder` until `release`."""
        with _mapped():
            return await self.store.ensure(src, holder=holder)

    def release(self, holder: str) -> None:
        self.store.release(holder)

    def estimate(self, spec: contract.SlotSpec, model_dir: Path) -> int:
        """Bytes `spec` needs once loaded from `model_dir` (UnknownModelSize: refuse it)."""
        size, shape = modeldir.inspect(model_dir)
        return sizing.estimate(
            weights_bytes=size,
            shape=shape,
            context_length=spec.context_length,
            max_concurrency=spec.max_concurrency,
            kv_bits=spec.server.kv_bits,
        ).total_bytes

    # ---- the store routes of the control API ---------------------------------------------

    def cached(self) -> list[contract.CachedModel]:
        return self.store.list()

    async def prefetch(self, body: contract.PrefetchRequest) -> contract.CachedModel:
        """Start fetching into the cache; answer with the cached entry (size 0 while fetching)."""
        with _mapped():
            src = source.of(body)
            task = asyncio.get_running_loop().create_task(self.store.ensure(src))
            self._prefetches.add(task)
            task.add_done_callback(self._prefetch_done)
            done, _ = await asyncio.wait({task}, timeout=2.0)
            if done:
                task.result()
            try:
                return self.store.get(src.id)
            except errors.ModelNotFound:
                return contract.CachedModel(
                    id=src.id, source=body.source, revision=body.revision, size_bytes=0
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
    except errors.StoreError as exc:
        raise refusals.Rejected(
            exc.http_status, exc.message, field=exc.field, allowed=exc.allowed
        ) from exc
