"""HTTP Range headers (RFC 9110 section 14) for the peer file server: one range per request.

`parse(header, size)` gives the byte span to send, or raises `RangeError` with the status to
answer: 416 (a well-formed range that does not overlap the file) or 400 (a malformed header,
several ranges, an over-long header). Pure: no I/O.
May import: the standard library. Called by: peers.server, tests.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEADER = 200


class RangeError(Exception):
    """A Range header the server refuses; `status` is 400 or 416."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes [start, end] inclusive of a file of `size` bytes."""

    start: int
    end: int
    size: int

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    def content_range(self) -> str:
        return f"bytes {self.start}-{self.end}/{self.size}"


def _int(text: str) -> int:
    # ASCII digits only: str.isdigit() accepts "²" or "٣", which int() then refuses or reads
    if not (0 < len(text) <= 19 and text.isascii() and text.isdigit()):
        raise RangeError(400, f"Range: {text!r} is not a non-negative decimal byte position")
    return int(text)


def parse(header: str, size: int) -> Span:
    """The span a `Range: bytes=a-b` / `bytes=a-` / `bytes=-n` header asks for in `size` bytes."""
    allowed = "bytes=<first>-<last>, bytes=<first>- or bytes=-<suffix length> (one range)"
    if len(header) > MAX_HEADER:
        raise RangeError(400, f"Range header longer than {MAX_HEADER} characters")
    unit, eq, spec = header.strip().partition("=")
    if not eq or unit.strip().lower() != "bytes":
        raise RangeError(400, f"Range {header!r}: only byte ranges are served ({allowed})")
    if "," in spec:
        raise RangeError(400, f"Range {header!r}: one range per request ({allowed})")
    first, dash, last = spec.strip().partition("-")
    if not dash:
        raise RangeError(400, f"Range {header!r}: expected {allowed}")
    if first == "":
        suffix = _int(last)
        if suffix == 0 or size == 0:
            raise RangeError(416, f"Range {header!r}: empty suffix of a {size}-byte file")
        return Span(max(0, size - suffix), size - 1, size)
    start = _int(first)
    end = _int(last) if last != "" else None
    if end is not None and end < start:
        raise RangeError(400, f"Range {header!r}: last byte before first byte")
    if start >= size:
        raise RangeError(416, f"Range {header!r}: starts at or past the end ({size} bytes)")
    end = size - 1 if end is None else end
    return Span(start, min(end, size - 1), size)
