"""Group variable-length sequences into padded batches under a token budget (pure).

Sequences are sorted longest first and packed greedily: a batch holds at most `max_rows`
sequences and its padded size (rows x longest) stays within `max_tokens`, so similar lengths
share a batch and padding stays small. A sequence longer than the budget gets a batch of its own
(request limits keep that bounded). Results are index lists into the input order.
May import: the standard library. Called by: embed_server (per request and across requests).
"""

from __future__ import annotations

from collections.abc import Sequence


def plan(lengths: Sequence[int], *, max_tokens: int, max_rows: int) -> list[list[int]]:
    """Batches of indices into `lengths`; every index appears exactly once."""
    if max_tokens < 1 or max_rows < 1:
        raise ValueError("max_tokens and max_rows must be positive")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        if current and ((len(current) + 1) * width > max_tokens or len(current) >= max_rows):
            batches.append(current)
            current = []
        if not current:
            width = max(lengths[i], 1)
        current.append(i)
    if current:
        batches.append(current)
    return batches


def padded_tokens(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> int:
    """Token slots a plan computes, padding included (for tests and the benchmark)."""
    return sum(len(b) * max(lengths[i] for i in b) for b in batches if b)
