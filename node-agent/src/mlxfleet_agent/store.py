"""The agent's model store: resolve a source to a loadable local directory, and keep an index.

Layout under `--models-dir`: `.mlxfleet-store/index.json` (the index), `.mlxfleet-store/s3/<id>/`
(complete downloads), `.mlxfleet-store/partial/<id>/` (downloads in progress; renamed into s3/
atomically once every file verified). `file://` models are used in place and `hf://` models live
in the Hugging Face cache; both are indexed too. A model id is a hash of source and revision.

Concurrency: one download per model id; concurrent `ensure` calls share it (and its progress).
A holder (a slot name) that `ensure`s a model pins it until `release`; pinned models are in use and
are never evicted. LRU eviction (least recently used first, owned copies only) runs before each
download and on `gc()`: when free disk would fall below `min_free_bytes`, or the cache would exceed
`max_cache_bytes`. One agent process per models dir (no cross-process locking).

May import: sources, memory, contract, peers (checks, fetch, transfers), the standard library
(boto3 only via sources).
Called by: the agent (slots: ensure/release; control API: list, prefetch, evict; state: list).
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from mlxfleet_agent import contract, memory, sizing, sources
from mlxfleet_agent.peers import checks, fetch, transfers

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# the domain errors, for callers that import only this module
StoreError = sources.StoreError
InvalidSource = sources.InvalidSource
SourceNotAllowed = sources.SourceNotAllowed
ModelNotFound = sources.ModelNotFound
ModelInUse = sources.ModelInUse
InsufficientDisk = sources.InsufficientDisk
DownloadFailed = sources.DownloadFailed
DownloadCancelled = sources.DownloadCancelled
ProgressCallback = sources.ProgressCallback

STORE_DIR = ".mlxfleet-store"
log = logging.getLogger(__name__)
DEFAULT_MIN_FREE_BYTES = 2 * 1024**3
Kind = Literal["file", "s3", "hf"]


class IndexEntry(contract.Wire):
    """One indexed model: what the API shows plus where it lives and whether we may delete it."""

    model: contract.CachedModel
    kind: Kind
    path: str
    owned: bool = False


def utcnow() -> datetime:
    return datetime.now(UTC)


def default_s3_client(endpoint_url: str | None = None, region: str | None = None) -> S3Client:
    """boto3 S3 client; endpoint and credentials from arguments or the standard AWS_* env vars."""
    import boto3
    from botocore.config import Config

    client: S3Client = boto3.client(
        "s3",
        endpoint_url=endpoint_url or None,
        region_name=region or None,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 5, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
        ),
    )
    return client


@dataclass(frozen=True)
class Room:
    """Inputs of an eviction decision (bytes)."""

    free_bytes: int
    need_bytes: int
    min_free_bytes: int
    cache_bytes: int
    max_cache_bytes: int | None


def plan_evictions(entries: Sequence[IndexEntry], *, pinned: set[str], room: Room) -> list[str]:
    """Ids to evict, least recently used first, so `need_bytes` fits; InsufficientDisk if not."""

    def fits(freed: int) -> bool:
        disk_ok = room.free_bytes + freed - room.need_bytes >= room.min_free_bytes
        cap = room.max_cache_bytes
        return disk_ok and (cap is None or room.cache_bytes - freed + room.need_bytes <= cap)

    never = datetime.min.replace(tzinfo=UTC)
    candidates = sorted(
        (e for e in entries if e.owned and e.model.id not in pinned),
        key=lambda e: (e.model.last_used or never, e.model.id),
    )
    chosen: list[str] = []
    freed = 0
    for entry in candidates:
        if fits(freed):
            break
        chosen.append(entry.model.id)
        freed += entry.model.total_bytes
    if not fits(freed):
        raise InsufficientDisk(
            f"need {room.need_bytes} bytes: {room.free_bytes} free on disk "
            f"(keeping {room.min_free_bytes} free), cache {room.cache_bytes} of "
            f"{room.max_cache_bytes if room.max_cache_bytes is not None else 'unlimited'} bytes, "
            f"and only {freed} bytes of unused models to evict",
            field=None,
        )
    return chosen


def dir_bytes(path: Path) -> int:
    """Bytes of every regular file under path (symlinks followed once, as the HF cache uses)."""
    total = 0
    for p in path.rglob("*"):
        if p.is_file():
            total += p.stat().st_size
    return total


class Store:
    """Model cache of one agent (see the module docstring)."""

    def __init__(
        self,
        models_dir: Path,
        *,
        allowed_roots: Sequence[Path] = (),
        s3_client: Callable[[], S3Client] | None = None,
        min_free_bytes: int = DEFAULT_MIN_FREE_BYTES,
        max_cache_bytes: int | None = None,
        hf_cache_dir: Path | None = None,
        now: Callable[[], datetime] = utcnow,
        peer_token: str | None = None,
    ) -> None:
        self.models_dir = Path(models_dir).resolve()
        self.peer_token = peer_token
        self.transfers = transfers.Transfers()
        self.counters = {
            "peer_bytes_received": 0.0,
            "peer_bytes_sent": 0.0,
            "peer_files_rejected": 0.0,
        }
        self.roots = [self.models_dir] + [
            Path(r).resolve() for r in allowed_roots if Path(r).resolve() != self.models_dir
        ]
        self._s3_client = s3_client or default_s3_client
        self.min_free_bytes = min_free_bytes
        self.max_cache_bytes = max_cache_bytes
        self._hf_cache_dir = hf_cache_dir
        self._now = now
        self._root = self.models_dir / STORE_DIR
        self._index_path = self._root / "index.json"
        self._pins: dict[str, set[str]] = {}
        self._inflight: dict[str, asyncio.Task[Path]] = {}
        self._progress: dict[str, builtins.list[ProgressCallback]] = {}
        self._abort = threading.Event()
        for sub in ("s3", "partial"):
            (self._root / sub).mkdir(parents=True, exist_ok=True)
        self._index = self._load()

    # ---- index ---------------------------------------------------------------------------

    def _load(self) -> dict[str, IndexEntry]:
        try:
            raw = json.loads(self._index_path.read_text(encoding="utf-8"))
            entries = [IndexEntry.model_validate(e) for e in raw.get("models", [])]
        except FileNotFoundError:
            entries = []
        except ValueError:  # a corrupt index: start empty, downloads are re-verified
            entries = []
        index = {e.model.id: e for e in entries if Path(e.path).is_dir()}
        for orphan in (self._root / "s3").iterdir():  # ours but not indexed: half-renamed junk
            if orphan.name not in index:
                shutil.rmtree(orphan, ignore_errors=True)
        return index

    def _save(self) -> None:
        data = {"version": 1, "models": [e.model_dump(mode="json") for e in self._index.values()]}
        tmp = self._index_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, self._index_path)

    def _record(
        self, mid: str, *, source: str, revision: str | None, kind: Kind, path: Path, owned: bool
    ) -> IndexEntry:
        try:
            size, shape = memory.inspect_model_dir(path)
        except sizing.UnknownModelSize:
            size, shape = memory.weights_bytes(path) if path.is_dir() else 0, None
        model = contract.CachedModel(
            id=mid,
            source=source,
            revision=revision,
            size_bytes=size,
            total_bytes=dir_bytes(path),
            shape=shape,
            last_used=self._now(),
        )
        entry = IndexEntry(model=model, kind=kind, path=str(path), owned=owned)
        self._index[mid] = entry
        self._save()
        return entry

    def _touch(self, mid: str) -> None:
        if (entry := self._index.get(mid)) is not None:
            entry.model.last_used = self._now()
            self._save()

    def _public(self, entry: IndexEntry) -> contract.CachedModel:
        return entry.model.model_copy(update={"in_use": bool(self._pins.get(entry.model.id))})

    def get(self, model_id: str) -> contract.CachedModel:
        entry = self._index.get(model_id)
        if entry is None:
            raise ModelNotFound(f"no cached model with id {model_id!r}", field="id")
        return self._public(entry)

    def path_of(self, model_id: str) -> Path:
        entry = self._index.get(model_id)
        if entry is None:
            raise ModelNotFound(f"no cached model with id {model_id!r}", field="id")
        return Path(entry.path)

    # ---- pins ----------------------------------------------------------------------------

    def pin(self, model_id: str, holder: str) -> None:
        self._pins.setdefault(model_id, set()).add(holder)

    def release(self, holder: str, model_id: str | None = None) -> None:
        """The holder no longer wants model_id (or any model, when None); it becomes evictable."""
        for mid in [model_id] if model_id is not None else builtins.list(self._pins):
            holders = self._pins.get(mid)
            if holders and holder in holders:
                holders.discard(holder)
                self._touch(mid)
                if not holders:
                    del self._pins[mid]

    def holders(self, model_id: str) -> set[str]:
        return set(self._pins.get(model_id, ()))

    # ---- ensure --------------------------------------------------------------------------

    async def ensure(
        self,
        source: str,
        revision: str | None = None,
        progress_cb: ProgressCallback | None = None,
        *,
        holder: str | None = None,
        peers: Sequence[str] = (),
    ) -> Path:
        """Local directory of a loadable copy of (source, revision), fetching it if needed.

        `holder` (a slot name) pins the model from now until `release(holder, id)`; on failure the
        pin is dropped again. `progress_cb(done, total)` is called from a worker thread.
        """
        src = sources.parse(source, revision)
        mid = sources.model_id(source, revision)
        if holder is not None:
            self.pin(mid, holder)
        try:
            return await self._ensure(mid, src, source, revision, progress_cb, peers)
        except BaseException:
            if holder is not None:
                holders = self._pins.get(mid)
                if holders is not None:
                    holders.discard(holder)
                    if not holders:
                        del self._pins[mid]
            raise

    async def _ensure(
        self,
        mid: str,
        src: sources.Source,
        source: str,
        revision: str | None,
        progress_cb: ProgressCallback | None,
        peers: Sequence[str] = (),
    ) -> Path:
        if isinstance(src, sources.FileSource):
            path = await asyncio.to_thread(sources.resolve_file, src, self.roots)
            entry = self._index.get(mid)
            if entry is None or Path(entry.path) != path:
                self._record(
                    mid, source=source, revision=revision, kind="file", path=path, owned=False
                )
            else:
                self._touch(mid)
            return path
        entry = self._index.get(mid)
        if entry is not None and await asyncio.to_thread(Path(entry.path).is_dir):
            self._touch(mid)
            if progress_cb is not None:
                progress_cb(entry.model.total_bytes, entry.model.total_bytes)
            return Path(entry.path)
        callbacks = self._progress.setdefault(mid, [])
        if progress_cb is not None:
            callbacks.append(progress_cb)
        task = self._inflight.get(mid)
        if task is None:
            task = asyncio.create_task(self._fetch(mid, src, source, revision, peers))
            self._inflight[mid] = task
            task.add_done_callback(lambda _t: self._fetch_done(mid))
        try:
            return await asyncio.shield(task)
        finally:
            if progress_cb is not None and progress_cb in callbacks:
                callbacks.remove(progress_cb)

    def _fetch_done(self, mid: str) -> None:
        self._inflight.pop(mid, None)
        self._progress.pop(mid, None)
        self.transfers.finish(mid)

    def _report(self, mid: str) -> ProgressCallback:
        def report(done: int, total: int) -> None:
            self.transfers.update(mid, done, now=time.monotonic())
            for cb in tuple(self._progress.get(mid, ())):
                cb(done, total)

        return report

    async def _fetch(
        self,
        mid: str,
        src: sources.Source,
        source: str,
        revision: str | None,
        peers: Sequence[str] = (),
    ) -> Path:
        report = self._report(mid)
        if isinstance(src, sources.HfSource):
            report(0, 0)
            path = await asyncio.to_thread(sources.download_hf, src, cache_dir=self._hf_cache_dir)
            entry = self._record(
                mid, source=source, revision=revision, kind="hf", path=path, owned=True
            )
            report(entry.model.total_bytes, entry.model.total_bytes)
            return path
        assert isinstance(src, sources.S3Source)
        client = await asyncio.to_thread(self._s3_client)
        try:
            objects = await asyncio.to_thread(sources.list_s3, client, src)
            total = sum(o.size for o in objects)
            await self._make_room(total)
            partial = self._root / "partial" / mid
            if peers and self.peer_token:
                await self._from_peers(mid, source, src, objects, partial, peers, report)
            self.transfers.start(
                mid, source=source, total=total, phase="origin", now=time.monotonic()
            )
            await asyncio.to_thread(
                sources.download_s3,
                client,
                src,
                objects,
                partial,
                progress=report,
                abort=self._abort,
            )
        finally:
            client.close()
        final = self._root / "s3" / mid
        if final.exists():
            await asyncio.to_thread(shutil.rmtree, final)
        partial.rename(final)
        self._record(mid, source=source, revision=revision, kind="s3", path=final, owned=True)
        return final

    async def _from_peers(
        self,
        mid: str,
        source: str,
        src: sources.S3Source,
        objects: Sequence[sources.RemoteObject],
        partial: Path,
        peers: Sequence[str],
        report: ProgressCallback,
    ) -> None:
        """Fill `partial` with what the peers can deliver, verified against the origin's
        listing (`objects`); the origin download that follows fetches the rest."""
        assert self.peer_token is not None
        total = sum(o.size for o in objects)
        self.transfers.start(mid, source=source, total=total, phase="peers", now=time.monotonic())
        expects = [checks.from_s3(o.rel, o.size, o.etag) for o in objects]

        def progress(done: int) -> None:
            report(done, total)

        await asyncio.to_thread(sources.prepare_partial, src, objects, partial)
        outcome = await asyncio.to_thread(
            fetch.fetch,
            expects,
            model_id=mid,
            peers=peers,
            token=self.peer_token,
            partial=partial,
            progress=progress,
            abort=self._abort,
        )
        self.counters["peer_bytes_received"] += outcome.peer_bytes
        self.counters["peer_files_rejected"] += len(outcome.lying)
        self.transfers.update(mid, None, now=time.monotonic(), peer_bytes=outcome.peer_bytes)
        log.info(
            "fetched from peers",
            extra={
                "model": mid,
                "files": len(outcome.done),
                "of": len(expects),
                "peer_bytes": outcome.peer_bytes,
                "lying": outcome.lying,
                "dropped": outcome.dropped,
            },
        )

    def served_dir(self, model_id: str) -> Path | None:
        """The directory of a complete copy of `model_id` (peer server), else None."""
        entry = self._index.get(model_id)
        if entry is None or model_id in self._inflight:
            return None
        return Path(entry.path)

    # ---- eviction ------------------------------------------------------------------------

    def _room(self, need_bytes: int) -> Room:
        cache = sum(e.model.total_bytes for e in self._index.values() if e.owned)
        return Room(
            free_bytes=shutil.disk_usage(self.models_dir).free,
            need_bytes=need_bytes,
            min_free_bytes=self.min_free_bytes,
            cache_bytes=cache,
            max_cache_bytes=self.max_cache_bytes,
        )

    async def _make_room(self, need_bytes: int) -> builtins.list[str]:
        pinned = {mid for mid, holders in self._pins.items() if holders}
        victims = plan_evictions(
            builtins.list(self._index.values()), pinned=pinned, room=self._room(need_bytes)
        )
        for mid in victims:
            await self.evict(mid)
        return victims

    async def gc(self) -> builtins.list[str]:
        """Evict least recently used unpinned models while free disk is below the threshold."""
        try:
            return await self._make_room(0)
        except InsufficientDisk:
            pinned = {mid for mid, holders in self._pins.items() if holders}
            victims = [
                e.model.id for e in self._index.values() if e.owned and e.model.id not in pinned
            ]
            for mid in victims:
                await self.evict(mid)
            return victims

    async def evict(self, model_id: str) -> None:
        """Forget a model and delete its files when the store owns them; ModelInUse if pinned."""
        entry = self._index.get(model_id)
        if entry is None:
            raise ModelNotFound(f"no cached model with id {model_id!r}", field="id")
        if holders := self._pins.get(model_id):
            raise ModelInUse(
                f"model {model_id} is in use by {', '.join(sorted(holders))}",
                field="id",
                allowed="a model no slot wants (delete or change those slots first)",
            )
        if model_id in self._inflight:
            raise ModelInUse(f"model {model_id} is being downloaded", field="id")
        del self._index[model_id]
        self._save()
        path = Path(entry.path)
        if entry.owned and entry.kind == "s3":
            await asyncio.to_thread(shutil.rmtree, path, True)
        elif entry.owned and entry.kind == "hf":
            await asyncio.to_thread(sources.delete_hf_snapshot, path)

    def close(self) -> None:
        """Make running downloads stop at their next chunk (DownloadCancelled)."""
        self._abort.set()

    # ---- listing (last: the name shadows the builtin inside the class body) ----------------

    def list(self) -> builtins.list[contract.CachedModel]:
        """Every indexed model, most recently used first."""
        never = datetime.min.replace(tzinfo=UTC)
        entries = sorted(
            self._index.values(), key=lambda e: e.model.last_used or never, reverse=True
        )
        return [self._public(e) for e in entries]
