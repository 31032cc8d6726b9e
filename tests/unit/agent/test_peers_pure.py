"""Pure parts of peer transfers: Range parsing, digests against S3 ETags (single and
multipart), safe relative paths, transfer progress and rate."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlxfleet_agent.peers import checks, ranges, server, transfers


@pytest.mark.parametrize(
    ("header", "size", "span"),
    [
        pytest.param("bytes=0-99", 1000, (0, 99), id="closed"),
        pytest.param("bytes=900-", 1000, (900, 999), id="open"),
        pytest.param("bytes=-100", 1000, (900, 999), id="suffix"),
        pytest.param("bytes=-5000", 1000, (0, 999), id="suffix-longer-than-file"),
        pytest.param("bytes=10-5000", 1000, (10, 999), id="end-clamped"),
        pytest.param("BYTES = 1-1", 1000, (1, 1), id="case-and-spaces"),
    ],
)
def test_range_parses(header: str, size: int, span: tuple[int, int]) -> None:
    got = ranges.parse(header, size)
    assert (got.start, got.end, got.size) == (*span, size)
    assert got.content_range() == f"bytes {span[0]}-{span[1]}/{size}"


@pytest.mark.parametrize(
    ("header", "status"),
    [
        pytest.param("bytes=1000-", 416, id="past-end"),
        pytest.param("bytes=-0", 416, id="empty-suffix"),
        pytest.param("items=0-1", 400, id="unit"),
        pytest.param("bytes=0-1,5-6", 400, id="multi"),
        pytest.param("bytes=5-1", 400, id="reversed"),
        pytest.param("bytes=a-b", 400, id="letters"),
        pytest.param("bytes=+1-2", 400, id="sign"),
        pytest.param("bytes=", 400, id="empty"),
        pytest.param("bytes=1", 400, id="no-dash"),
        pytest.param("bytes=" + "9" * 300, 400, id="too-long"),
        pytest.param("bytes=99999999999999999999999-", 400, id="huge-number"),
        # str.isdigit() says yes to these, int() then fails (a 500) or reads them as numbers
        pytest.param("bytes=\u00b2-", 400, id="superscript-two"),
        pytest.param("bytes=0-\u00b9", 400, id="superscript-one-last"),
        pytest.param("bytes=-\u00b3", 400, id="superscript-suffix"),
        pytest.param("bytes=\u0663-", 400, id="arabic-indic-three"),
        pytest.param("bytes=\uff11-\uff12", 400, id="fullwidth-digits"),
        pytest.param("bytes=\u2460-", 400, id="circled-one"),
    ],
)
def test_range_refused(header: str, status: int) -> None:
    with pytest.raises(ranges.RangeError) as caught:
        ranges.parse(header, 1000)
    assert caught.value.status == status
    assert "Range" in caught.value.message


def _parse(header: str, size: int) -> ranges.Span | ranges.RangeError:
    """The span, or the refusal (any other exception fails the test)."""
    try:
        return ranges.parse(header, size)
    except ranges.RangeError as exc:
        return exc


_RANGE_TEXT = st.text(
    alphabet=st.sampled_from("0123456789-=, \t" + "\u00b2\u00b9\u0663\uff11\u2460" + "bytesBYTES"),
    max_size=40,
)


@given(
    header=st.one_of(_RANGE_TEXT, st.text(max_size=60), _RANGE_TEXT.map(lambda t: "bytes=" + t)),
    size=st.integers(min_value=0, max_value=1 << 40),
)
def test_any_range_header_is_a_span_or_a_refusal(header: str, size: int) -> None:
    """Whatever the header, parse gives a span inside the file or a 400/416: never another
    exception (the server would answer 500 with a traceback)."""
    span = _parse(header, size)
    if isinstance(span, ranges.RangeError):
        assert span.status in (400, 416)
        return
    assert 0 <= span.start <= span.end < size
    numbers = header.partition("=")[2].replace("-", "").strip()
    assert numbers.isascii(), header  # only ASCII digits ever make a span


@given(
    start=st.integers(min_value=0, max_value=10**6),
    length=st.integers(min_value=1, max_value=10**6),
    size=st.integers(min_value=1, max_value=2 * 10**6),
)
def test_a_closed_ascii_range_is_read_as_written(start: int, length: int, size: int) -> None:
    end = start + length - 1
    span = _parse(f"bytes={start}-{end}", size)
    if isinstance(span, ranges.RangeError):
        assert span.status == 416
        assert start >= size
        return
    assert (span.start, span.end) == (start, min(end, size - 1))


def _multipart_etag(data: bytes, part: int) -> str:
    digests = [
        hashlib.md5(data[i : i + part], usedforsecurity=False).digest()
        for i in range(0, len(data), part)
    ]
    return f'"{hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest()}-{len(digests)}"'


def test_single_part_etag_checks_md5() -> None:
    data = b"weights" * 1000
    e = checks.from_s3(
        "a.safetensors", len(data), f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'
    )
    d = checks.Digest(e)
    d.update(data[:10])
    d.update(memoryview(data)[10:])
    assert d.problem() is None
    bad = checks.Digest(e)
    bad.update(b"X" + data[1:])
    assert "does not match" in (bad.problem() or "")
    short = checks.Digest(e)
    short.update(data[:-1])
    assert "bytes" in (short.problem() or "")


def test_multipart_etag_checks_parts() -> None:
    part = 5 * checks.MIB
    data = bytes(range(256)) * (part * 2 // 256) + b"tail"  # 3 parts of 5 MiB
    etag = _multipart_etag(data, part)
    e = checks.from_s3("big.safetensors", len(data), etag)
    assert e.part_size == part
    assert e.checkable
    d = checks.Digest(e)
    for i in range(0, len(data), 3_000_001):  # chunks that straddle part boundaries
        d.update(data[i : i + 3_000_001])
    assert d.problem() is None
    flipped = bytearray(data)
    flipped[part + 7] ^= 1
    d2 = checks.Digest(e)
    d2.update(bytes(flipped))
    assert d2.problem() is not None


@pytest.mark.parametrize(
    "etag",
    [
        pytest.param("", id="none"),
        pytest.param('"not-a-digest"', id="garbage"),
        pytest.param(f'"{"a" * 32}-999999"', id="no-usual-part-size"),
    ],
)
def test_unknown_etag_is_not_checkable(etag: str) -> None:
    e = checks.from_s3("x", 100, etag)
    assert not e.checkable
    d = checks.Digest(e)
    d.update(b"x" * 100)
    assert "no digest" in (d.problem() or "")


@pytest.mark.parametrize(
    ("rel", "ok"),
    [
        ("model.safetensors", True),
        ("sub/dir/tokenizer.json", True),
        ("../etc/passwd", False),
        ("a/../../b", False),
        ("/abs", False),
        ("a//b", False),
        ("./a", False),
        ("a\\..\\b", False),
        ("a\x00b", False),
        ("", False),
    ],
)
def test_safe_rel(rel: str, ok: bool) -> None:
    assert server.safe_rel(rel) is ok


def test_transfer_rate_uses_recent_window() -> None:
    t = transfers.Transfers()
    t.start("m", source="s3://b/m/", total=1000, phase="peers", now=0.0)
    t.update("m", 100, now=1.0, peer_bytes=100)
    t.update("m", 600, now=2.0, peer_bytes=600)
    (p,) = t.snapshot(now=2.0)
    assert (p.done_bytes, p.total_bytes, p.peer_bytes, p.phase) == (600, 1000, 600, "peers")
    assert p.bytes_per_second == pytest.approx(300.0)
    for s in range(3, 20):  # stalled: the window forgets the fast start
        t.update("m", 600, now=float(s))
    (stalled,) = t.snapshot(now=19.0)
    assert stalled.bytes_per_second == 0.0
    t.finish("m")
    assert t.snapshot(now=20.0) == []
