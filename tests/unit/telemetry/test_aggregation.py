"""Agent-side aggregation: histograms, busy time, interval roll-over, checkpoint/restore."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mlxfleet_agent import contract
from mlxfleet_agent.telemetry import intervals, recorder

T0 = 1_790_000_040.0  # an exact multiple of 60 s


class Clock:
    """Explicit time for the aggregator (it takes `clock` as an input, like `now` in core)."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def record(
    slot: str = "chat",
    *,
    model: str = "llama",
    prompt: int = 10,
    completion: int = 5,
    ttft: float | None = 0.2,
    e2e: float = 1.0,
    stream: bool = True,
    error: str | None = None,
    queue: float = 0.0,
) -> recorder.RequestRecord:
    return recorder.RequestRecord(
        slot=slot,
        served_name=model,
        source="file:///models/llama",
        endpoint="chat.completions",
        stream=stream,
        prompt_tokens=prompt,
        completion_tokens=completion,
        queue_wait_s=queue,
        ttft_s=ttft,
        e2e_s=e2e,
        error_kind=error,
    )


def make(clock: Clock, **kw: float) -> recorder.Telemetry:
    return recorder.Telemetry(node="mac-1", interval_seconds=60, clock=clock, **kw)


def test_histogram_buckets_are_upper_inclusive_and_overflow_last() -> None:
    h = intervals.Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 1.0, 7.0):
        h.observe(v)
    assert h.counts == [2, 2, 1]
    assert h.count == 5
    assert h.total == pytest.approx(8.65)


def test_histograms_with_other_buckets_do_not_merge() -> None:
    h = intervals.Histogram((0.1, 1.0))
    other = contract.HistogramData(bounds=[0.2, 1.0], counts=[1, 0, 0], sum=0.1, count=1)
    with pytest.raises(ValueError, match="different buckets"):
        h.merge(other)


def test_time_per_output_token_only_for_streams_with_two_tokens() -> None:
    assert recorder.time_per_output_token(record(ttft=0.5, e2e=2.5, completion=5)) == 0.5
    assert recorder.time_per_output_token(record(completion=1)) is None
    assert recorder.time_per_output_token(record(stream=False)) is None


def test_requests_tokens_errors_and_busy_time_of_one_interval() -> None:
    clock = Clock(T0)
    tel = make(clock)
    tel.request_started("chat")
    clock.t += 2
    tel.request_started("chat")  # overlaps: busy time counts the union, not the sum
    clock.t += 3
    tel.request_finished(record(prompt=7, completion=3))
    clock.t += 1
    tel.request_finished(record(prompt=11, completion=0, error="backend_5xx"))
    clock.t = T0 + 61
    closed = tel.roll()
    assert closed is not None
    assert closed.interval_start == datetime.fromtimestamp(T0, UTC)
    (slot,) = closed.slots
    assert (slot.slot, slot.model, slot.requests) == ("chat", "llama", 2)
    assert (slot.prompt_tokens, slot.completion_tokens) == (18, 3)
    assert slot.errors == {"backend_5xx": 1}
    assert slot.busy_seconds == pytest.approx(6.0)
    assert slot.max_in_flight == 2
    assert closed.host.busy_seconds == pytest.approx(6.0)
    assert slot.end_to_end_seconds is not None
    assert slot.end_to_end_seconds.count == 2
    assert tel.counters() == {
        "requests_total": 2,
        "requests_failed_total": 1,
        "prompt_tokens_total": 18,
        "completion_tokens_total": 3,
    }


def test_a_request_across_the_boundary_splits_its_busy_time() -> None:
    clock = Clock(T0 + 50)
    tel = make(clock)
    tel.observe_slot("chat", model="llama", namespace="team-a")
    tel.request_started("chat")
    clock.t = T0 + 70
    first = tel.roll()
    clock.t = T0 + 75
    tel.request_finished(record())
    clock.t = T0 + 125
    second = tel.roll()
    assert first is not None
    assert second is not None
    assert first.slots[0].busy_seconds == pytest.approx(10.0)
    assert first.slots[0].requests == 0
    assert second.slots[0].busy_seconds == pytest.approx(15.0)
    assert second.slots[0].requests == 1
    assert second.slots[0].namespace == "team-a"
    assert second.interval_start == datetime.fromtimestamp(T0 + 60, UTC)


def test_roll_before_the_end_closes_nothing() -> None:
    clock = Clock(T0 + 10)
    tel = make(clock)
    clock.t = T0 + 59.9
    assert tel.roll() is None


def test_energy_is_estimated_from_nominal_watts_when_not_measured() -> None:
    clock = Clock(T0)
    tel = make(clock, idle_watts=10.0, busy_watts=100.0)
    tel.request_started("chat")
    clock.t += 15
    tel.request_finished(record())
    clock.t = T0 + 60
    closed = tel.roll()
    assert closed is not None
    # (10 W x 45 s + 100 W x 15 s) / 3600 = 0.541666 Wh
    assert closed.host.energy_wh == pytest.approx(1950 / 3600, rel=1e-4)
    assert closed.host.power_source == "estimated"


def test_measured_power_wins_over_the_estimate() -> None:
    clock = Clock(T0)
    tel = make(clock, idle_watts=10.0, busy_watts=100.0)
    sample = intervals.HostSample(
        memory_total_bytes=100,
        memory_used_bytes=60,
        memory_available_bytes=40,
        pressure="warn",
        power_watts=20.0,
    )
    for _ in range(12):
        clock.t += 5
        tel.add_host_sample(sample)
    closed = tel.roll()
    assert closed is not None
    assert closed.host.power_source == "powermetrics"
    assert closed.host.energy_wh == pytest.approx(20 * 60 / 3600, rel=1e-3)
    assert closed.host.memory_pressure_max == "warn"
    assert closed.host.memory_available_bytes_min == 40


def test_checkpoint_restored_into_the_same_interval_keeps_every_count() -> None:
    clock = Clock(T0 + 5)
    before = make(clock)
    for _ in range(3):
        before.request_started("chat")
        before.request_finished(record(prompt=100, completion=50))
    saved = before.checkpoint()
    clock.t = T0 + 30  # "restart" within the same minute
    after = make(clock)
    assert after.restore(saved) is None
    after.request_started("chat")
    after.request_finished(record(prompt=1, completion=1))
    clock.t = T0 + 60
    closed = after.roll()
    assert closed is not None
    assert closed.slots[0].requests == 4
    assert closed.slots[0].prompt_tokens == 301
    assert closed.slots[0].end_to_end_seconds is not None
    assert closed.slots[0].end_to_end_seconds.count == 4


def test_checkpoint_of_an_older_interval_comes_back_closed() -> None:
    clock = Clock(T0 + 5)
    before = make(clock)
    before.request_started("chat")
    before.request_finished(record())
    saved = before.checkpoint()
    clock.t = T0 + 600
    after = make(clock)
    assert after.restore(saved) == saved


def test_swaps_are_counted_by_outcome_with_their_record() -> None:
    clock = Clock(T0)
    tel = make(clock)
    tel.observe_slot("chat", model="llama")
    swap = contract.SwapRecord(
        id="s1",
        slot="chat",
        requested_strategy=contract.SwapStrategy.AUTO,
        strategy=contract.SwapStrategy.SURGE,
        to_source="file:///b",
        started_at=datetime.fromtimestamp(T0, UTC),
        finished_at=datetime.fromtimestamp(T0 + 9, UTC),
        requests_served=12,
        outcome=contract.SwapOutcome.COMPLETED,
    )
    tel.swap_finished(slot="chat", outcome="Completed", record=swap)
    tel.swap_finished(slot="chat", outcome="RolledBack")
    clock.t = T0 + 60
    closed = tel.roll()
    assert closed is not None
    assert closed.slots[0].swaps == {"Completed": 1, "RolledBack": 1}
    assert [e.outcome for e in closed.swap_events] == ["Completed", "RolledBack"]
    assert closed.swap_events[0].requests_served == 12
    assert tel.counters() == {"swaps_total/Completed": 1, "swaps_total/RolledBack": 1}
