"""The one telemetry shipper of the agent and the gateway: closed items (intervals) wait in a
bounded queue and are uploaded oldest first, each to its own idempotent key, so a retry
overwrites and never double counts. Upload stops at the first failure and resumes on the next
flush; the queue keeps at most `max_buffered` items once the store has taken what it could (the
oldest are dropped and counted).

What differs between the programs is given, never copied here:
- the items and their format: a `Codec` (one JSON document per item, a file name that sorts
  oldest first) and a `key` function (the object key: `contract.telemetry_key` in both programs);
  the object body is the document and a newline (one NDJSON line);
- the queue: `DiskQueue` (the agent: one file per item, written by the caller's atomic writer,
  and a checkpoint of the open interval, so a crash or restart loses and repeats nothing) or
  `MemoryQueue` (the gateway: a deque, appending is O(1) and does no I/O);
- where items come from and when: the program closes its intervals, calls `enqueue` and `trim`,
  and drives `flush` (blocking: the agent's thread) or `flush_async` (the gateway's event loop:
  each PUT in a worker thread, the queue touched only on the loop): two drivers of one flush's
  steps (`Shipper._uploads`), which alone decide the order, what a failure stops and the counts;
- the metrics: `count(result, n)` for `uploaded`, `upload_failed` and `dropped`.
May import: the standard library (the store is `mlxfleet_common.s3client.Bucket`, given).
Called by: the agent's telemetry.shipper and telemetry.spool, the gateway's shipper.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")
UPLOADED_KEPT = 1_000  # `Shipper.uploaded` remembers this many keys (diagnostics, bounded)


class Store(Protocol):
    """Where items go (`s3client.Bucket`): an idempotent PUT."""

    def put(self, key: str, body: bytes) -> None: ...


class Codec(Protocol[T]):
    """How one item is written and read back (bytes of one JSON document) and named on disk."""

    def dump(self, item: T) -> bytes: ...

    def load(self, data: bytes) -> T:
        """The item back; ValueError when `data` is not one."""
        ...

    def name(self, item: T) -> str:
        """Its file name in a `DiskQueue`: names sort oldest first; two items, two names."""
        ...


class Queue(Protocol[T]):
    """The items waiting for the store, oldest first."""

    holding: str  # how the warning says where they wait ("buffering on disk", ...)

    def push(self, item: T) -> None: ...

    def items(self) -> Iterator[tuple[T, Callable[[], None]]]:
        """(item, remove it) oldest first; a generator the shipper leaves at its first failure."""
        ...

    def trim(self, limit: int) -> int:
        """Drop the oldest beyond `limit`; return how many were dropped."""
        ...

    def __len__(self) -> int: ...


class MemoryQueue(Generic[T]):
    """Items in a deque: `push` is O(1) and does no I/O; lost with the process."""

    holding = "holding intervals in memory"

    def __init__(self) -> None:
        self._items: collections.deque[T] = collections.deque()

    def push(self, item: T) -> None:
        self._items.append(item)

    def items(self) -> Iterator[tuple[T, Callable[[], None]]]:
        while self._items:
            head = self._items[0]
            yield head, functools.partial(self._remove, head)
            if self._items and self._items[0] is head:
                return  # not removed: the caller stopped

    def _remove(self, item: T) -> None:
        # trimmed while it was being uploaded: nothing left to remove, never the next one
        if self._items and self._items[0] is item:
            self._items.popleft()

    def trim(self, limit: int) -> int:
        dropped = 0
        while len(self._items) > limit:
            self._items.popleft()
            dropped += 1
        return dropped

    def __len__(self) -> int:
        return len(self._items)


class DiskQueue(Generic[T]):
    """Items as files in `<root>/queue/` (one each, `codec.name`) and the checkpoint of the open
    item in `<root>/open-interval.json`, every file written by `write` (atomic and durable: the
    caller's). Folders are created on the first write, never just by looking."""

    holding = "buffering on disk"

    def __init__(
        self,
        root: Path,
        codec: Codec[T],
        write: Callable[[Path, bytes], None],
        *,
        log: logging.Logger | None = None,
    ) -> None:
        self.root = root
        self.queue_dir = root / "queue"
        self.checkpoint_path = root / "open-interval.json"
        self.codec = codec
        self._write = write
        self._log = log or logging.getLogger(__name__)

    def push(self, item: T) -> None:
        self._write(self.queue_dir / self.codec.name(item), self.codec.dump(item))

    def contains(self, item: T) -> bool:
        return (self.queue_dir / self.codec.name(item)).exists()

    def pending(self) -> list[Path]:
        return sorted(self.queue_dir.glob("*.json"))

    def items(self) -> Iterator[tuple[T, Callable[[], None]]]:
        for path in self.pending():
            try:
                item = self.codec.load(path.read_bytes())
            except (OSError, ValueError):
                self._log.error("dropping unreadable queued interval %s", path.name)
                path.unlink(missing_ok=True)
                continue
            yield item, functools.partial(path.unlink, missing_ok=True)

    def trim(self, limit: int) -> int:
        queued = self.pending()
        excess = queued[: max(0, len(queued) - limit)]
        for path in excess:
            path.unlink(missing_ok=True)
        return len(excess)

    def __len__(self) -> int:
        return len(self.pending())

    def save_checkpoint(self, item: T) -> None:
        self._write(self.checkpoint_path, self.codec.dump(item))

    def load_checkpoint(self) -> T | None:
        try:
            return self.codec.load(self.checkpoint_path.read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:
            self._log.warning("discarding unreadable telemetry checkpoint %s", self.checkpoint_path)
            return None

    def clear_checkpoint(self) -> None:
        self.checkpoint_path.unlink(missing_ok=True)


class Shipper(Generic[T]):
    """A queue, a store and the upload order. No thread or task of its own: the program drives
    `flush` / `flush_async`. Without a store nothing is queued (`enqueue` drops, `flush` is 0)."""

    def __init__(
        self,
        queue: Queue[T],
        store: Store | None,
        *,
        codec: Codec[T],
        key: Callable[[T], str],
        max_buffered: int,
        count: Callable[[str, int], None],
        log: logging.Logger,
    ) -> None:
        self.queue = queue
        self.store = store
        self._codec = codec
        self._key = key
        self.max_buffered = max_buffered
        self._count = count
        self._log = log
        self._failing = False
        self.uploaded: collections.deque[str] = collections.deque(maxlen=UPLOADED_KEPT)

    @property
    def shipping(self) -> bool:
        """A store is configured: items are queued and uploaded."""
        return self.store is not None

    def enqueue(self, item: T) -> None:
        """Queue a closed item (nothing without a store). The bound is `trim`'s."""
        if self.store is not None:
            self.queue.push(item)

    def trim(self) -> int:
        """Drop the oldest beyond `max_buffered`, count them; return how many."""
        dropped = self.queue.trim(self.max_buffered)
        if dropped:
            self._log.warning("telemetry buffer full: dropped %d oldest intervals", dropped)
            self._count("dropped", dropped)
        return dropped

    def flush(self) -> int:
        """Upload queued items oldest first, blocking; stop at the first failure. Returns
        uploads."""
        steps = self._uploads()
        error: Exception | None = None
        try:
            while True:
                error = _attempt(steps.send(error))
        except StopIteration as end:
            return int(end.value)

    async def flush_async(self) -> int:
        """`flush` for an event loop: each PUT in a worker thread, the queue only on the loop."""
        steps = self._uploads()
        error: Exception | None = None
        try:
            while True:
                error = await asyncio.to_thread(_attempt, steps.send(error))
        except StopIteration as end:
            return int(end.value)

    def _uploads(self) -> Generator[Callable[[], None], Exception | None, int]:
        """One flush as steps, for both drivers: yields each PUT to do (oldest first) and is sent
        back how it went (None: stored; the error: stop there, the item stays queued). Returns
        uploads. The queue and the counts are touched here only, never where a PUT runs."""
        store = self.store
        if store is None:
            return 0
        done = 0
        for item, remove in self.queue.items():
            key = self._key(item)
            error = yield functools.partial(store.put, key, self._codec.dump(item) + b"\n")
            if error is not None:  # any transport or S3 error: keep it queued, retry later
                self._failed(error)
                return done
            remove()
            self._uploaded(key)
            done += 1
        self._reachable()
        return done

    def _failed(self, exc: Exception) -> None:
        self._count("upload_failed", 1)
        if not self._failing:
            self._log.warning("telemetry store unreachable, %s: %s", self.queue.holding, exc)
        self._failing = True

    def _uploaded(self, key: str) -> None:
        self.uploaded.append(key)
        self._count("uploaded", 1)
        self._log.info("shipped %s", key)

    def _reachable(self) -> None:
        if self._failing:
            self._log.warning("telemetry store reachable again")
        self._failing = False


def _attempt(put: Callable[[], None]) -> Exception | None:
    """Do one PUT; its error, or None once it is stored."""
    try:
        put()
    except Exception as exc:  # any transport or S3 error: the steps decide what follows
        return exc
    return None
