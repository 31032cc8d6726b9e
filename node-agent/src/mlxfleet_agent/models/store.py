"""The agent's model store: a parsed `Source` in, a loadable local directory out.

`file://` models are used in place (under the allowed roots), `hf://` models live in the Hugging
Face cache, `s3://` models are downloaded under `--models-dir` (see `index` for the layout and
`s3` for the verification); all are indexed. `s3://` downloads may be paced
(`max_download_bytes_per_s`, the agent's `--download-max-bytes-per-s`).

Concurrency: one download per model id; concurrent `ensure` calls share it (and its progress).
A holder (a slot's backend label) that `ensure`s a model pins it until `release`; pinned models
are in use and are never evicted. LRU eviction (`evictions`) runs before each download and on
`gc()`. One agent process per models dir (no cross-process locking).

Peers: given peer agents (each with the fetch token it accepts from this node for this model, or
a bare URL asked with the legacy shared `peer_token`), an `s3://` model's files come from them
first (`peers.fetch`, each file checked against the origin's listing), the rest from the origin;
`transfers` tracks bytes done/total and rate, `served_dir` tells the peer server what it may
serve (complete copies only).

May import: the standard library, contract, mlxfleet_common.s3client, models (errors, source, index,
evictions, local, s3, hf), peers (checks, fetch, transfers). Called by: models.catalog
(slots: ensure/release; control API: list, prefetch, evict), tests.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mlxfleet_agent import contract
from mlxfleet_agent.models import errors, evictions, hf, index, local, s3, source
from mlxfleet_agent.peers import checks, fetch, transfers
from mlxfleet_common import s3client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

DEFAULT_MIN_FREE_BYTES = 2 * 1024**3
log = logging.getLogger(__name__)
ProgressCallback = s3.ProgressCallback


def utcnow() -> datetime:
    return datetime.now(UTC)


def default_s3_client() -> S3Client:
    """boto3 S3 client for model sources: endpoint and credentials from the AWS_* variables."""
    return s3client.client(profile=s3client.MODELS)


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
        max_download_bytes_per_s: int | None = None,
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
        self._client: S3Client | None = None
        self._client_lock = threading.Lock()
        self.min_free_bytes = min_free_bytes
        self.max_cache_bytes = max_cache_bytes
        self._hf_cache_dir = hf_cache_dir
        self._max_rate = max_download_bytes_per_s
        self._root = self.models_dir / index.STORE_DIR
        self._pins: dict[str, set[str]] = {}
        self._inflight: dict[str, asyncio.Task[Path]] = {}
        self._progress: dict[str, builtins.list[ProgressCallback]] = {}
        self._abort = threading.Event()
        for sub in ("s3", "partial"):
            (self._root / sub).mkdir(parents=True, exist_ok=True)
        self._index = index.Index(self._root, now=now)

    # ---- lookups -------------------------------------------------------------------------

    def _public(self, entry: index.IndexEntry) -> contract.CachedModel:
        return entry.model.model_copy(update={"in_use": bool(self._pins.get(entry.model.id))})

    def _entry(self, model_id: str) -> index.IndexEntry:
        entry = self._index.get(model_id)
        if entry is None:
            raise errors.ModelNotFound(f"no cached model with id {model_id!r}", field="id")
        return entry

    def get(self, model_id: str) -> contract.CachedModel:
        return self._public(self._entry(model_id))

    def path_of(self, model_id: str) -> Path:
        return Path(self._entry(model_id).path)

    # ---- pins ----------------------------------------------------------------------------

    def pin(self, model_id: str, holder: str) -> None:
        self._pins.setdefault(model_id, set()).add(holder)

    def release(self, holder: str, model_id: str | None = None) -> None:
        """The holder no longer wants model_id (or any model, when None); it becomes evictable."""
        for mid in [model_id] if model_id is not None else builtins.list(self._pins):
            holders = self._pins.get(mid)
            if holders and holder in holders:
                holders.discard(holder)
                self._index.touch(mid)
                if not holders:
                    del self._pins[mid]

    def holders(self, model_id: str) -> set[str]:
        return set(self._pins.get(model_id, ()))

    def _unpin(self, model_id: str, holder: str) -> None:
        holders = self._pins.get(model_id)
        if holders is not None:
            holders.discard(holder)
            if not holders:
                del self._pins[model_id]

    # ---- ensure --------------------------------------------------------------------------

    async def ensure(
        self,
        src: source.Source,
        progress_cb: ProgressCallback | None = None,
        *,
        holder: str | None = None,
        peers: Sequence[contract.Peer | str] = (),
    ) -> Path:
        """Local directory of a loadable copy of `src`, fetching it if needed.

        `holder` pins the model from now until `release(holder, id)`; on failure the pin is
        dropped again. `progress_cb(done, total)` is called from a worker thread. `peers`:
        agents that hold the model (tried first for `s3://` models), each with its fetch token
        (a bare control URL: with the legacy `peer_token`, left out without one).
        """
        if holder is not None:
            self.pin(src.id, holder)
        try:
            return await self._ensure(src, progress_cb, self._with_tokens(peers))
        except BaseException:
            if holder is not None:
                self._unpin(src.id, holder)
            raise

    def _with_tokens(self, peers: Sequence[contract.Peer | str]) -> list[tuple[str, str]]:
        """Each peer's URL with the token to show it."""
        out = []
        for peer in peers:
            if isinstance(peer, contract.Peer):
                out.append((peer.url, peer.token))
            elif self.peer_token:
                out.append((peer, self.peer_token))
        return out

    async def _ensure(
        self,
        src: source.Source,
        progress_cb: ProgressCallback | None,
        peers: Sequence[tuple[str, str]],
    ) -> Path:
        mid = src.id
        if isinstance(src.location, source.FilePath):
            path = await asyncio.to_thread(local.resolve, src.location, self.roots)
            entry = self._index.get(mid)
            if entry is None or Path(entry.path) != path:
                self._index.record(src, kind="file", path=path, owned=False)
            else:
                self._index.touch(mid)
            return path
        entry = self._index.get(mid)
        if entry is not None and await asyncio.to_thread(Path(entry.path).is_dir):
            self._index.touch(mid)
            if progress_cb is not None:
                progress_cb(entry.model.total_bytes, entry.model.total_bytes)
            return Path(entry.path)
        callbacks = self._progress.setdefault(mid, [])
        if progress_cb is not None:
            callbacks.append(progress_cb)
        task = self._inflight.get(mid)
        if task is None:
            task = asyncio.create_task(self._fetch(src, peers))
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

    async def _fetch(self, src: source.Source, peers: Sequence[tuple[str, str]]) -> Path:
        report = self._report(src.id)
        where = src.location
        if isinstance(where, source.HfRepo):
            report(0, 0)
            path = await asyncio.to_thread(
                hf.download, where, src.revision, cache_dir=self._hf_cache_dir, progress=report
            )
            entry = self._index.record(src, kind="hf", path=path, owned=True)
            report(entry.model.total_bytes, entry.model.total_bytes)
            return path
        assert isinstance(where, source.S3Prefix)
        client = await asyncio.to_thread(self.s3_client)
        objects = await asyncio.to_thread(s3.list_objects, client, where)
        total = sum(o.size for o in objects)
        await self._make_room(total)
        partial = self._root / "partial" / src.id
        if peers:
            await self._from_peers(src, where, objects, partial, peers, report)
        self.transfers.start(
            src.id, source=src.text, total=total, phase="origin", now=time.monotonic()
        )
        await asyncio.to_thread(
            s3.download,
            client,
            where,
            objects,
            partial,
            progress=report,
            abort=self._abort,
            max_bytes_per_s=self._max_rate,
        )
        final = self._root / "s3" / src.id
        if final.exists():
            await asyncio.to_thread(shutil.rmtree, final)
        partial.rename(final)
        self._index.record(src, kind="s3", path=final, owned=True)
        return final

    async def _from_peers(
        self,
        src: source.Source,
        where: source.S3Prefix,
        objects: Sequence[s3.RemoteObject],
        partial: Path,
        peers: Sequence[tuple[str, str]],
        report: ProgressCallback,
    ) -> None:
        """Fill `partial` with what the peers can deliver, verified against the origin's
        listing (`objects`); the origin download that follows fetches the rest."""
        mid = src.id
        total = sum(o.size for o in objects)
        self.transfers.start(mid, source=src.text, total=total, phase="peers", now=time.monotonic())
        expects = [checks.from_s3(o.rel, o.size, o.etag) for o in objects]

        def progress(done: int) -> None:
            report(done, total)

        await asyncio.to_thread(s3.prepare_partial, where, objects, partial)
        outcome = await asyncio.to_thread(
            fetch.fetch,
            expects,
            model_id=mid,
            peers=peers,
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

    def s3_client(self) -> S3Client:
        """The store's S3 client, made once (boto3's set-up costs about a second; clients are
        thread-safe) and kept until `close`. Blocking: call it in a worker thread."""
        with self._client_lock:
            if self._client is None:
                self._client = self._s3_client()
            return self._client

    # ---- eviction ------------------------------------------------------------------------

    def _room(self, need_bytes: int) -> evictions.Room:
        cache = sum(e.model.total_bytes for e in self._index if e.owned)
        return evictions.Room(
            free_bytes=shutil.disk_usage(self.models_dir).free,
            need_bytes=need_bytes,
            min_free_bytes=self.min_free_bytes,
            cache_bytes=cache,
            max_cache_bytes=self.max_cache_bytes,
        )

    def _pinned(self) -> set[str]:
        return {mid for mid, holders in self._pins.items() if holders}

    async def _make_room(self, need_bytes: int) -> builtins.list[str]:
        victims = evictions.plan(
            builtins.list(self._index), pinned=self._pinned(), room=self._room(need_bytes)
        )
        for mid in victims:
            await self.evict(mid)
        return victims

    async def gc(self) -> builtins.list[str]:
        """Evict least recently used unpinned models while free disk is below the threshold."""
        try:
            return await self._make_room(0)
        except errors.InsufficientDisk:
            pinned = self._pinned()
            victims = [e.model.id for e in self._index if e.owned and e.model.id not in pinned]
            for mid in victims:
                await self.evict(mid)
            return victims

    async def evict(self, model_id: str) -> None:
        """Forget a model and delete its files when the store owns them; ModelInUse if pinned."""
        entry = self._entry(model_id)
        if holders := self._pins.get(model_id):
            raise errors.ModelInUse(
                f"model {model_id} is in use by {', '.join(sorted(holders))}",
                field="id",
                allowed="a model no slot wants (delete or change those slots first)",
            )
        if model_id in self._inflight:
            raise errors.ModelInUse(f"model {model_id} is being downloaded", field="id")
        self._index.remove(model_id)
        path = Path(entry.path)
        if entry.owned and entry.kind == "s3":
            await asyncio.to_thread(shutil.rmtree, path, True)
        elif entry.owned and entry.kind == "hf":
            await asyncio.to_thread(hf.delete_snapshot, path)

    def close(self) -> None:
        """Make running downloads stop at their next chunk (DownloadCancelled)."""
        self._abort.set()
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # ---- listing (last: the name shadows the builtin inside the class body) ----------------

    def list(self) -> builtins.list[contract.CachedModel]:
        """Every indexed model, most recently used first."""
        never = datetime.min.replace(tzinfo=UTC)
        entries = sorted(self._index, key=lambda e: e.model.last_used or never, reverse=True)
        return [self._public(e) for e in entries]
