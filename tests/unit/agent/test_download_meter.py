"""models.progress.Meter: bytes done/total and the rate over the last seconds (explicit clock)."""

from __future__ import annotations

from mlxfleet_agent.models import progress


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_nothing_before_the_first_report() -> None:
    assert progress.Meter().snapshot() is None


def test_rate_is_measured_over_the_window_and_falls_to_zero_when_it_stalls() -> None:
    clock = Clock()
    meter = progress.Meter(window_s=5.0, clock=clock)
    for second in range(11):  # 1 MB/s for 10 s
        clock.t = 100.0 + second
        meter.update(second * 1_000_000, 20_000_000)
    got = meter.snapshot()
    assert got is not None
    assert (got.bytes_done, got.bytes_total) == (10_000_000, 20_000_000)
    assert got.bytes_per_second == 1_000_000.0
    clock.t += 2.5  # no report for 2.5 s: half the window moved nothing
    half = meter.snapshot()
    assert half is not None
    assert 0 < half.bytes_per_second < 1_000_000
    clock.t += 10  # stalled longer than the window
    stalled = meter.snapshot()
    assert stalled is not None
    assert (stalled.bytes_done, stalled.bytes_per_second) == (10_000_000, 0.0)


def test_resumed_bytes_count_as_done_and_totals_never_go_negative() -> None:
    clock = Clock()
    meter = progress.Meter(clock=clock)
    meter.update(-5, -1)
    got = meter.snapshot()
    assert got is not None
    assert (got.bytes_done, got.bytes_total) == (0, 0)
