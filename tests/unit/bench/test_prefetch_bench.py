"""The prefetch bench's report (pure): medians per mode, where the bytes came from, the ratio."""

from __future__ import annotations

from typing import Any

from benchmarks import prefetch_bench


def plan(prefetch: bool, seconds: float, origin: int, peers: int) -> dict[str, Any]:
    return {
        "prefetch": prefetch,
        "created_to_completed_s": round(seconds),
        "seen_to_completed_s": seconds,
        "apply_to_completed_s": seconds + 0.2,
        "origin_bytes": origin,
        "peer_bytes": peers,
        "requests_failed": 0,
    }


def test_report_has_both_modes_and_the_ratio_of_their_medians() -> None:
    gib = 2**30
    plans = [
        plan(True, 6.0, 0, 2 * gib),
        plan(False, 12.0, 2 * gib, 0),
        plan(True, 8.0, 0, 2 * gib),
        plan(False, 16.0, 2 * gib, 0),
    ]
    text = prefetch_bench.render({"weights_bytes": gib, "plans": plans}, 1.0, 2, (1.0, 2.0, 3.0))
    assert "| prefetch (default) | 7.0 (6-8) | 7.0 | 0.00 | 2.00 |" in text
    assert "| `--no-swap-prefetch` | 14.0 (12-16) | 14.0 | 2.00 | 0.00 |" in text
    assert "without / with prefetch (client clock): 2.00x" in text
    assert "at the start: 1.00 2.00 3.00" in text
