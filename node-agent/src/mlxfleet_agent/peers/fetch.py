"""Fetch a model's files from peer agents, several at once, each file verified.

`fetch(expects, peers=[(url, token), ...], ...)` fills a partial folder (the store's, laid out as
the origin download lays it out) with the files the origin listed: worker threads (one per peer,
and at least `STREAMS` in all, so one peer still sends two files at once and two MD5s run on two
cores), each on its own connection, take the next file (largest first) from a shared queue and
stream it into `<file>.part`, resuming a `.part` left by an earlier try with `Range:
bytes=<offset>-`; the digest runs while bytes arrive (in a hashing thread beside the receiving one:
hashlib drops the GIL, so receiving, writing and hashing overlap) and a file is renamed into place
only when its size and digest match the origin's (`checks.Expect`), after its fsync (in a finishing
thread, so the next file streams meanwhile; `fetch` returns once every verified file is synced and
in place). A peer that sends bytes that do not verify, more bytes than promised or a range it was
not asked for is *lying*: it gets nothing more to do and its `.part` is deleted; a peer without the
model (404) or refusing its token (401/403) is dropped quietly; a connection error keeps the
`.part` for the next peer (or the origin) to resume. What no peer delivered is left for the origin:
the caller downloads the rest from there.
Blocking (http.client): run it in a worker thread.
May import: the standard library, peers.checks. Called by: the model store, benchmarks, tests.
"""

from __future__ import annotations

import http.client
import logging
import os
import queue
import ssl
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

from mlxfleet_agent.peers import checks

log = logging.getLogger(__name__)

PART_SUFFIX = ".part"
BUFFER = 1024 * 1024
"""Bytes per read (8 MiB reads were not faster on the 2-core test machine)."""
BUFFERS = 4
"""Buffers in flight between the receiving and the hashing thread of one stream."""
WRITE_BYTES = 64 * 1024
"""Bytes per write(2): in a profile of one 0.5 GiB copy, 1 MiB writes into the page cache took
3.4 s and 64 KiB writes of the same bytes 0.3 s on the test machine."""
MAX_ERRORS = 2
"""Connection errors after which a peer is dropped for the rest of this fetch."""
STREAMS = 2
"""Streams (worker threads, each with its own connection and hashing thread) at least, spread
over the peers: MD5 is sequential within a file, so a single stream is bound to one core's MD5
rate; with one peer, two streams fetch two files at once (figures: docs/benchmarks.md)."""


class Cancelled(Exception):
    """The abort event was set while fetching."""


@dataclass
class Outcome:
    """What a fetch achieved: files in place, bytes from peers, peers skipped and why."""

    done: set[str] = field(default_factory=set)
    peer_bytes: int = 0
    lying: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    per_peer: dict[str, int] = field(default_factory=dict)


class _Lying(Exception):
    pass


class _Drop(Exception):
    pass


class _Retry(Exception):
    pass


def _connection(url: str, timeout: float) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    if parts.scheme == "https":
        return http.client.HTTPSConnection(
            parts.hostname or "",
            parts.port or 443,
            timeout=timeout,
            context=ssl.create_default_context(),
        )
    return http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout)


def peer_base(url: str) -> str:
    """`http(s)://host:port` of a peer URL; ValueError for anything else."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"peer {url!r}: expected http(s)://host:port")
    return f"{parts.scheme}://{parts.netloc}"


class _Run:
    """State shared by the worker threads of one fetch."""

    def __init__(
        self,
        expects: Sequence[checks.Expect],
        *,
        model_id: str,
        tokens: dict[str, str],
        partial: Path,
        progress: Callable[[int], None] | None,
        abort: threading.Event,
        timeout: float,
    ) -> None:
        self.model_id, self.tokens, self.partial = model_id, tokens, partial
        self.progress_cb, self.abort, self.timeout = progress, abort, timeout
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.inflight: set[str] = set()
        self.queue = sorted(expects, key=lambda e: -e.size)
        self.tried: dict[str, set[str]] = {e.rel: set() for e in expects}
        self.outcome = Outcome()
        self.done_bytes = 0
        self.finisher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="peer-fsync")
        self.finishing: list[Future[None]] = []
        self.errors: dict[str, int] = {}

    def add(self, n: int, peer: str | None = None) -> None:
        if self.abort.is_set():
            raise Cancelled("fetch cancelled")
        with self.lock:
            self.done_bytes += n
            if peer is not None:
                self.outcome.peer_bytes += n
                self.outcome.per_peer[peer] = self.outcome.per_peer.get(peer, 0) + n
            done = self.done_bytes
        if self.progress_cb is not None:
            self.progress_cb(done)

    def take(self, peer: str) -> checks.Expect | None:
        """The next file this peer has not tried; waits while a file it has not tried is in
        another worker's hands (it may come back); None when nothing is left for it."""
        with self.changed:
            while True:
                if peer in self.outcome.lying or peer in self.outcome.dropped:
                    return None
                for i, e in enumerate(self.queue):
                    if peer not in self.tried[e.rel]:
                        self.tried[e.rel].add(peer)
                        self.inflight.add(e.rel)
                        return self.queue.pop(i)
                if not any(peer not in self.tried[rel] for rel in self.inflight):
                    return None
                self.changed.wait(0.5)

    def settle(self, expect: checks.Expect, *, again: bool) -> None:
        """The worker is done with `expect`: back in the queue when `again`."""
        with self.changed:
            self.inflight.discard(expect.rel)
            if again:
                self.queue.append(expect)
            self.changed.notify_all()

    def worker(self, peer: str) -> None:
        """Fetch files from `peer` until none is left for it (several workers may share a peer:
        they take different files, and its lies and connection errors count for all of them)."""
        conn: http.client.HTTPConnection | None = None
        try:
            while (expect := self.take(peer)) is not None:
                if conn is None:
                    conn = _connection(peer, self.timeout)
                try:
                    self._one(conn, peer, expect)
                    self.settle(expect, again=False)
                except _Lying as exc:
                    log.warning("peer sent bad data", extra={"peer": peer, "error": str(exc)})
                    with self.lock:
                        self.outcome.lying[peer] = str(exc)
                    self.settle(expect, again=True)
                except _Drop as exc:
                    with self.lock:
                        self.outcome.dropped[peer] = str(exc)
                    self.settle(expect, again=True)
                except (OSError, http.client.HTTPException, _Retry) as exc:
                    conn.close()
                    conn = None
                    with self.lock:
                        self.errors[peer] = self.errors.get(peer, 0) + 1
                        if self.errors[peer] >= MAX_ERRORS:
                            self.outcome.dropped[peer] = f"connection errors: {exc}"
                        else:
                            self.tried[expect.rel].discard(peer)  # may retry the same peer
                    self.settle(expect, again=True)
                except BaseException:
                    self.settle(expect, again=True)
                    raise
        finally:
            if conn is not None:
                conn.close()

    def _one(self, conn: http.client.HTTPConnection, peer: str, e: checks.Expect) -> None:
        dest = self.partial.joinpath(*e.rel.split("/"))
        part = dest.with_name(dest.name + PART_SUFFIX)
        dest.parent.mkdir(parents=True, exist_ok=True)
        digest = checks.Digest(e)
        offset = 0
        if part.is_file():
            offset = part.stat().st_size
            if offset > e.size:
                part.unlink()
                offset = 0
            else:
                digest.feed_file(part)
        self.add(offset)
        counted = [offset]
        try:
            if offset < e.size:
                self._stream(conn, peer, e, part, digest, offset, counted)
            if (problem := digest.problem()) is not None:
                part.unlink(missing_ok=True)
                raise _Lying(f"{peer}: {problem}")
        except BaseException:
            self.add(-counted[0])  # it will be counted again by whoever retries it
            raise
        self.finishing.append(self.finisher.submit(self._finish, e.rel, part, dest))

    def _finish(self, rel: str, part: Path, dest: Path) -> None:
        """fsync a verified `.part`, then rename it into place (a crash never leaves an
        unsynced file under its final name, which would count as verified)."""
        fd = os.open(part, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        part.rename(dest)
        with self.lock:
            self.outcome.done.add(rel)

    def _stream(
        self,
        conn: http.client.HTTPConnection,
        peer: str,
        e: checks.Expect,
        part: Path,
        digest: checks.Digest,
        offset: int,
        counted: list[int],
    ) -> None:
        url = f"/peer/v1/models/{self.model_id}/files/{quote(e.rel)}"
        headers = {"Authorization": f"Bearer {self.tokens[peer]}"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        conn.request("GET", url, headers=headers)
        resp = conn.getresponse()
        if resp.status in (401, 403, 404):
            resp.read()
            raise _Drop(f"{peer}: HTTP {resp.status} for {e.rel}")
        if resp.status not in (200, 206) or (offset and resp.status != 206):
            resp.read()
            raise _Retry(f"{peer}: HTTP {resp.status} for {e.rel}")
        if resp.status == 206:
            expected = f"bytes {offset}-{e.size - 1}/{e.size}"
            if resp.getheader("content-range", "") != expected:
                resp.close()
                raise _Lying(
                    f"{peer}: sent range {resp.getheader('content-range')!r}, "
                    f"asked for {expected!r}"
                )
        want = e.size - offset
        got = 0
        hasher = _Hasher(digest)
        try:
            with part.open("ab") as f:
                while got < want:
                    buf = hasher.buffer()
                    n = resp.readinto(memoryview(buf)[: min(BUFFER, want - got)])
                    if not n:
                        hasher.give_back(buf)
                        break
                    view = memoryview(buf)
                    for at in range(0, n, WRITE_BYTES):
                        f.write(view[at : min(n, at + WRITE_BYTES)])
                    hasher.feed(buf, n)
                    got += n
                    counted[0] += n
                    self.add(n, peer)
        finally:
            hasher.close()
        if got < want:
            raise _Retry(f"{peer}: {e.rel} ended after {offset + got} of {e.size} bytes")
        if resp.read(1):
            resp.close()
            part.unlink(missing_ok=True)
            raise _Lying(f"{peer}: sent more than the {e.size} bytes of {e.rel}")


class _Hasher:
    """Feeds a `checks.Digest` from its own thread, in order; the receiving thread takes an
    empty buffer (`buffer`), fills it, hands it over (`feed`) and it comes back once hashed."""

    def __init__(self, digest: checks.Digest) -> None:
        self.digest = digest
        self._free: queue.Queue[bytearray] = queue.Queue()
        for _ in range(BUFFERS):
            self._free.put(bytearray(BUFFER))
        self._todo: queue.Queue[tuple[bytearray, int] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="peer-hash", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._todo.get()) is not None:
            buf, n = item
            self.digest.update(memoryview(buf)[:n])
            self._free.put(buf)

    def buffer(self) -> bytearray:
        return self._free.get()

    def give_back(self, buf: bytearray) -> None:
        self._free.put(buf)

    def feed(self, buf: bytearray, n: int) -> None:
        self._todo.put((buf, n))

    def close(self) -> None:
        """Wait until every fed buffer is hashed."""
        self._todo.put(None)
        self._thread.join()


def fetch(
    expects: Sequence[checks.Expect],
    *,
    model_id: str,
    peers: Sequence[tuple[str, str]],
    partial: Path,
    progress: Callable[[int], None] | None = None,
    abort: threading.Event | None = None,
    timeout: float = 30.0,
) -> Outcome:
    """Fetch what the peers can deliver of `expects` into `partial` (see the module docstring).

    `peers`: each peer's control URL with the token it accepts from this node for this model.
    Files already in place (renamed after verification) count as done; files without a
    digest are never taken from a peer. `progress(done_bytes)` is called from worker threads.
    Raises `Cancelled` when `abort` is set."""
    tokens: dict[str, str] = {}
    for url, token in peers:
        tokens.setdefault(peer_base(url), token)
    run = _Run(
        [],
        model_id=model_id,
        tokens=tokens,
        partial=partial,
        progress=progress,
        abort=abort or threading.Event(),
        timeout=timeout,
    )
    wanted: list[checks.Expect] = []
    for e in expects:
        dest = partial.joinpath(*e.rel.split("/"))
        if dest.is_file() and dest.stat().st_size == e.size:
            run.outcome.done.add(e.rel)
            run.add(e.size)
        elif e.checkable:
            wanted.append(e)
    run.queue = sorted(wanted, key=lambda e: -e.size)
    run.tried = {e.rel: set() for e in wanted}
    bases = list(tokens)
    if not wanted or not bases:
        run.finisher.shutdown()
        return run.outcome
    errors: list[BaseException] = []

    def guarded(peer: str) -> None:
        try:
            run.worker(peer)
        except BaseException as exc:  # Cancelled, disk errors: re-raised in the caller
            errors.append(exc)

    workers = [bases[i % len(bases)] for i in range(max(STREAMS, len(bases)))]
    threads = [threading.Thread(target=guarded, args=(p,), daemon=True) for p in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.finisher.shutdown(wait=True)
    for done in run.finishing:
        if (exc := done.exception()) is not None:
            errors.append(exc)
    if errors:
        raise errors[0]
    return run.outcome
