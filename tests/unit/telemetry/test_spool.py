"""The shipper's disk queue and checkpoint across restarts (files only, no upload)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from mlxfleet_agent import contract, shipper, telemetry

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def agent(spool: Path, clock: Clock) -> shipper.Shipper:
    """One agent lifetime: telemetry + shipper with a bucket configured but never reached."""
    tel = telemetry.Telemetry(node="mini-1", interval_seconds=60, clock=clock)
    cfg = shipper.ShipperConfig(spool_dir=spool, bucket="b", endpoint_url="http://127.0.0.1:9")
    ship = shipper.Shipper(tel, cfg)
    ship.recover()
    return ship


def serve(ship: shipper.Shipper, n: int) -> None:
    for _ in range(n):
        ship.telemetry.request_started("chat")
        ship.telemetry.request_finished(
            telemetry.RequestRecord(
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
    spool = shipper.Spool(tmp_path)
    for minute in range(5):
        spool.push(
            contract.TelemetryInterval(
                node="n",
                interval_start=datetime.fromtimestamp(T0 + 60 * minute, UTC),
                interval_seconds=60,
            )
        )
    assert spool.trim(2) == 3
    starts = [
        contract.TelemetryInterval.model_validate_json(p.read_bytes()) for p in spool.pending()
    ]
    assert [iv.interval_start.minute for iv in starts] == [3, 4]


def test_node_name_is_usable_in_keys() -> None:
    assert shipper.node_name("Mac Studio (2)") == "Mac-Studio--2"
    assert contract.TELEMETRY_NODE.match(shipper.node_name(None))
