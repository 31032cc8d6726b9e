"""The shipper's disk queue and checkpoint across restarts (files only, no upload)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mlxfleet_agent import contract
from mlxfleet_agent.telemetry import recorder, shipper, spool

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def agent(spool: Path, clock: Clock) -> shipper.Shipper:
    """One agent lifetime: telemetry + shipper with a bucket configured but never reached."""
    tel = recorder.Telemetry(node="mini-1", interval_seconds=60, clock=clock)
    cfg = shipper.ShipperConfig(spool_dir=spool, bucket="b", endpoint_url="http://127.0.0.1:9")
    ship = shipper.Shipper(tel, cfg)
    ship.recover()
    return ship


def serve(ship: shipper.Shipper, n: int) -> None:
    for _ in range(n):
        ship.telemetry.request_started("chat")
        ship.telemetry.request_finished(
            recorder.RequestRecord(
                slot="chat",
                served_name="m",
                source="file:///m",
                endpoint="completions",
                stream=False,
                prompt_tokens=1,
                completion_tokens=1,
                queue_wait_s=0.0,
                ttft_s=0.01,
                e2e_s=0.01,
            )
        )


def queued(ship: shipper.Shipper) -> list[contract.TelemetryInterval]:
    return [
        contract.TelemetryInterval.model_validate_json(p.read_bytes()) for p in ship.spool.pending()
    ]


def test_restart_within_the_interval_merges_the_checkpoint(tmp_path: Path) -> None:
    clock = Clock(T0 + 5)
    first = agent(tmp_path, clock)
    serve(first, 3)
    first.tick(upload=False)  # checkpoint
    clock.t = T0 + 20
    second = agent(tmp_path, clock)
    serve(second, 2)
    clock.t = T0 + 61
    second.tick(upload=False)
    (closed,) = queued(second)
    assert closed.slots[0].requests == 5


def test_restart_after_the_interval_queues_the_checkpoint_as_closed(tmp_path: Path) -> None:
    clock = Clock(T0 + 5)
    first = agent(tmp_path, clock)
    serve(first, 3)
    first.tick(upload=False)
    clock.t = T0 + 300  # down for four minutes
    second = agent(tmp_path, clock)
    (closed,) = queued(second)
    assert closed.interval_start == datetime.fromtimestamp(T0, UTC)
    assert closed.slots[0].requests == 3
    assert not second.spool.checkpoint_path.exists()


def test_a_checkpoint_already_queued_is_not_counted_twice(tmp_path: Path) -> None:
    clock = Clock(T0 + 5)
    first = agent(tmp_path, clock)
    serve(first, 3)
    saved = first.telemetry.checkpoint()
    first.spool.save_checkpoint(saved)
    first.spool.push(saved)  # closed and queued, then the agent died before the next checkpoint
    clock.t = T0 + 300
    second = agent(tmp_path, clock)
    assert [iv.slots[0].requests for iv in queued(second)] == [3]
    assert not second.spool.checkpoint_path.exists()


def test_trim_drops_the_oldest(tmp_path: Path) -> None:
    queue = spool.Spool(tmp_path)
    for minute in range(5):
        queue.push(
            contract.TelemetryInterval(
                node="n",
                interval_start=datetime.fromtimestamp(T0 + 60 * minute, UTC),
                interval_seconds=60,
            )
        )
    assert queue.trim(2) == 3
    starts = [
        contract.TelemetryInterval.model_validate_json(p.read_bytes()) for p in queue.pending()
    ]
    assert [iv.interval_start.minute for iv in starts] == [3, 4]


def test_node_name_is_usable_in_keys() -> None:
    assert shipper.node_name("Mac Studio (2)") == "Mac-Studio--2"
    assert contract.TELEMETRY_NODE.match(shipper.node_name(None))


def bucketless(spool: Path, clock: Clock, node: str = "Mac-Studio") -> shipper.Shipper:
    """One agent lifetime without a telemetry bucket."""
    tel = recorder.Telemetry(node=node, interval_seconds=60, clock=clock)
    ship = shipper.Shipper(tel, shipper.ShipperConfig(spool_dir=spool))
    ship.recover()
    return ship


def test_without_a_bucket_nothing_is_buffered_on_disk(tmp_path: Path) -> None:
    """Issue 15 item 3: the docs promise nothing is buffered without a bucket; the open
    interval was still checkpointed every tick (and shipped later, under that old name)."""
    spool = tmp_path / "telemetry"
    clock = Clock(T0 + 5)
    ship = bucketless(spool, clock)
    serve(ship, 3)
    ship.tick()
    clock.t = T0 + 65  # an interval closes
    serve(ship, 1)
    ship.tick()
    ship.stop()
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == []
    assert 'result="closed"} 1.0' in ship.telemetry.metrics.exposition().decode()


def test_a_checkpoint_ships_under_the_node_name_it_was_written_for(tmp_path: Path) -> None:
    """A rename (nodeName mini-1 -> mac-mini-1) within one interval: mini-1's partial interval
    is queued under mini-1, and none of its counts move to the new name."""
    clock = Clock(T0 + 5)
    first = agent(tmp_path, clock)
    serve(first, 3)
    first.tick(upload=False)  # checkpoint of mini-1, then the agent stops without closing it
    clock.t = T0 + 20
    tel = recorder.Telemetry(node="mac-mini-1", interval_seconds=60, clock=clock)
    cfg = shipper.ShipperConfig(spool_dir=tmp_path, bucket="b", endpoint_url="http://127.0.0.1:9")
    second = shipper.Shipper(tel, cfg)
    second.recover()
    assert not second.spool.checkpoint_path.exists()
    (old,) = queued(second)
    assert (old.node, old.slots[0].requests) == ("mini-1", 3)
    serve(second, 2)
    clock.t = T0 + 61
    second.tick(upload=False)
    # both names' intervals start at T0: both are queued (one file each), neither overwrites
    assert sorted((iv.node, iv.slots[0].requests) for iv in queued(second)) == [
        ("mac-mini-1", 2),
        ("mini-1", 3),
    ]


def test_a_run_without_a_bucket_leaves_an_earlier_checkpoint_for_the_bucket(
    tmp_path: Path,
) -> None:
    """Counts measured while a bucket was configured are not thrown away by a run without one."""
    clock = Clock(T0 + 5)
    first = agent(tmp_path, clock)
    serve(first, 3)
    first.tick(upload=False)
    clock.t = T0 + 300
    between = bucketless(tmp_path, clock, node="mini-1")
    serve(between, 7)
    between.stop()
    clock.t = T0 + 600
    last = agent(tmp_path, clock)
    assert [(iv.node, iv.slots[0].requests) for iv in queued(last)] == [("mini-1", 3)]


def test_the_default_node_name_is_announced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="mlxfleet_agent.shipper"):
        tel, _ = shipper.build(shipper.ShipperConfig(spool_dir=tmp_path, bucket="b"))
    (record,) = caplog.records
    assert tel.node in record.getMessage()
    assert "nodeName" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mlxfleet_agent.shipper"):
        shipper.build(shipper.ShipperConfig(spool_dir=tmp_path, bucket="b"), node="mac-studio-1")
        shipper.build(shipper.ShipperConfig(spool_dir=tmp_path))  # no bucket: nothing leaves
    assert caplog.records == []
