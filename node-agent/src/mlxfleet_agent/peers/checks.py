"""What a fetched file must be, as the origin says: its size and a digest a peer cannot forge.

An S3 listing gives each object's size and ETag: a single-part upload's ETag is the MD5 of the
bytes; a multipart upload's is `md5(md5(part 1) + ... + md5(part N))-N`, checked here by hashing
the parts with the usual part sizes (the first candidate whose part count matches N). A file
whose ETag fits neither cannot be checked and is never taken from a peer.
`Expect` is the promise, `Digest` hashes bytes as they arrive (or a resumed `.part` file).
Pure apart from `Digest.feed_file` (reads a local file). hashlib releases the GIL on large
buffers, so several fetch threads hash in parallel.
May import: the standard library. Called by: peers.fetch, the model store, tests.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
PART_SIZES_MIB = (8, 5, 16, 10, 15, 32, 50, 64, 100, 128, 256, 512)
"""Multipart part sizes tried in this order (aws cli / boto3: 8 MiB, rclone: 5, s3cmd: 15)."""
READ_BYTES = 4 * MIB


def _hex(text: str, length: int) -> bool:
    return len(text) == length and all(c in "0123456789abcdef" for c in text)


@dataclass(frozen=True, slots=True)
class Expect:
    """One file of a model: where it goes, its size and the digest the origin gave."""

    rel: str
    size: int
    md5: str | None = None
    multipart_md5: str | None = None
    part_size: int | None = None

    @property
    def checkable(self) -> bool:
        return self.md5 is not None or self.multipart_md5 is not None

    def describe(self) -> str:
        if self.md5 is not None:
            return f"md5 {self.md5}"
        if self.multipart_md5 is not None:
            return f"multipart md5 {self.multipart_md5} ({self.part_size} byte parts)"
        return "no digest"


def part_size_for(size: int, parts: int) -> int | None:
    """The first usual part size that splits `size` bytes into exactly `parts` parts."""
    for mib in PART_SIZES_MIB:
        p = mib * MIB
        if parts >= 1 and -(-size // p) == parts:
            return p
    return None


def from_s3(rel: str, size: int, etag: str) -> Expect:
    """The promise an S3 listing entry makes (size always; a digest when the ETag is one)."""
    tag = etag.strip().strip('"').lower()
    if _hex(tag, 32):
        return Expect(rel, size, md5=tag)
    head, dash, count = tag.partition("-")
    if dash and _hex(head, 32) and count.isascii() and count.isdigit():
        part = part_size_for(size, int(count))
        if part is not None:
            return Expect(rel, size, multipart_md5=head, part_size=part)
    return Expect(rel, size)


class Digest:
    """Running digest of a file against its `Expect` (feed bytes in order)."""

    def __init__(self, expect: Expect) -> None:
        self.expect = expect
        self.count = 0
        self._whole: Any = hashlib.md5(usedforsecurity=False)
        self._part: Any = hashlib.md5(usedforsecurity=False)
        self._part_fill = 0
        self._parts: list[bytes] = []

    def update(self, data: bytes | memoryview) -> None:
        self.count += len(data)
        if self.expect.part_size is None:
            self._whole.update(data)
            return
        view = memoryview(data)
        while view:
            room = self.expect.part_size - self._part_fill
            piece = view[:room]
            self._part.update(piece)
            self._part_fill += len(piece)
            view = view[len(piece) :]
            if self._part_fill == self.expect.part_size:
                self._parts.append(self._part.digest())
                self._part = hashlib.md5(usedforsecurity=False)
                self._part_fill = 0

    def feed_file(self, path: Path) -> None:
        """Hash what a previous try left in `path` (a resumed `.part`)."""
        with path.open("rb") as f:
            while chunk := f.read(READ_BYTES):
                self.update(chunk)

    def result(self) -> str:
        """The digest in the form the origin gave it."""
        if self.expect.part_size is None:
            return str(self._whole.hexdigest())
        parts = list(self._parts)
        if self._part_fill:
            parts.append(self._part.digest())
        return hashlib.md5(b"".join(parts), usedforsecurity=False).hexdigest()

    def problem(self) -> str | None:
        """None when the bytes are the promised ones, else what differs."""
        e = self.expect
        if self.count != e.size:
            return f"{e.rel}: got {self.count} bytes, the origin says {e.size}"
        want = e.md5 if e.md5 is not None else e.multipart_md5
        if want is None:
            return f"{e.rel}: the origin gives no digest to check it against"
        got = self.result()
        if got != want:
            return f"{e.rel}: digest {got} does not match the origin's {e.describe()}"
        return None
