"""The one telemetry shipper (mlxfleet_common.telemetry.shipper) as the agent and the gateway use
it: upload order, the bound, failures, and the gateway's memory queue under its event loop.
The store is a stand-in (pure logic); the real S3 server is tests/integration/telemetry's."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from mlxfleet_agent.host import files
from mlxfleet_common.telemetry import shipper as common
from mlxfleet_gateway import metrics
from mlxfleet_gateway import shipper as gateway_shipper
from mlxfleet_gateway.core import usage

T0 = 1_790_000_040.0  # a minute boundary
LOG = logging.getLogger("test.shipper")


class Store:
    """Records PUTs; fails while `down`; blocks while `gate` is clear (when one is given)."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.puts: list[tuple[str, bytes]] = []
        self.down = False
        self.gate = gate
        self.entered = threading.Event()

    def put(self, key: str, body: bytes) -> None:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.down:
            raise ConnectionError("store down")
        self.puts.append((key, body))

    def get(self, key: str) -> bytes:  # (the gateway's Uploader reads back too)
        return next(body for k, body in reversed(self.puts) if k == key)

    def list(self, prefix: str) -> list[tuple[str, str]]:
        return [(key, "") for key, _ in self.puts if key.startswith(prefix)]


class Codec:
    def dump(self, item: str) -> bytes:
        return item.encode()

    def load(self, data: bytes) -> str:
        if not data.startswith(b"i"):
            raise ValueError("not an item")
        return data.decode()

    def name(self, item: str) -> str:
        return f"{item}.json"


def make(
    queue: common.Queue[str], store: Store | None, counts: dict[str, int], limit: int = 3
) -> common.Shipper[str]:
    def count(result: str, n: int) -> None:
        counts[result] = counts.get(result, 0) + n

    return common.Shipper(
        queue,
        store,
        codec=Codec(),
        key=lambda item: f"p/{item}.jsonl",
        max_buffered=limit,
        count=count,
        log=LOG,
    )


def queues(tmp_path: Path) -> list[common.Queue[str]]:
    return [common.MemoryQueue[str](), common.DiskQueue(tmp_path, Codec(), files.write_atomic)]


def flush_async(ship: common.Shipper[str]) -> int:
    return asyncio.run(ship.flush_async())


@pytest.mark.parametrize("kind", [0, 1], ids=["memory", "disk"])
@pytest.mark.parametrize(
    "flush",
    [pytest.param(common.Shipper.flush, id="blocking"), pytest.param(flush_async, id="loop")],
)
def test_oldest_first_stops_at_the_first_failure_and_resumes(
    tmp_path: Path, kind: int, flush: Callable[[common.Shipper[str]], int]
) -> None:
    """Both drivers (the agent's blocking `flush`, the gateway's `flush_async`) run the same
    steps: oldest first, stop at the first failure, resume from it."""
    store, counts = Store(), dict[str, int]()
    ship = make(queues(tmp_path)[kind], store, counts)
    for item in ("i1", "i2"):
        ship.enqueue(item)
    store.down = True
    assert flush(ship) == 0
    assert len(ship.queue) == 2
    assert counts == {"upload_failed": 1}
    store.down = False
    ship.enqueue("i3")
    assert flush(ship) == 3
    assert store.puts == [("p/i1.jsonl", b"i1\n"), ("p/i2.jsonl", b"i2\n"), ("p/i3.jsonl", b"i3\n")]
    assert len(ship.queue) == 0
    assert counts["uploaded"] == 3
    assert list(ship.uploaded) == ["p/i1.jsonl", "p/i2.jsonl", "p/i3.jsonl"]


@pytest.mark.parametrize("kind", [0, 1], ids=["memory", "disk"])
def test_the_bound_drops_the_oldest_and_counts_them(tmp_path: Path, kind: int) -> None:
    store, counts = Store(), dict[str, int]()
    ship = make(queues(tmp_path)[kind], store, counts, limit=2)
    for i in range(1, 6):
        ship.enqueue(f"i{i}")
    assert ship.trim() == 3
    assert counts == {"dropped": 3}
    ship.flush()
    assert [k for k, _ in store.puts] == ["p/i4.jsonl", "p/i5.jsonl"]


def test_without_a_store_nothing_is_queued_nor_written(tmp_path: Path) -> None:
    disk = common.DiskQueue(tmp_path / "spool", Codec(), files.write_atomic)
    ship = make(disk, None, {})
    ship.enqueue("i1")
    assert not ship.shipping
    assert ship.flush() == 0
    assert flush_async(ship) == 0
    assert not (tmp_path / "spool").exists()


def test_an_unreadable_queued_file_is_dropped_and_the_rest_ship(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store()
    disk = common.DiskQueue(tmp_path, Codec(), files.write_atomic, log=LOG)
    ship = make(disk, store, {})
    ship.enqueue("i1")
    files.write_atomic(disk.queue_dir / "i0.json", b"garbage")
    with caplog.at_level(logging.ERROR, logger="test.shipper"):
        assert ship.flush() == 1
    assert "dropping unreadable queued interval i0.json" in caplog.text
    assert disk.pending() == []


def test_an_item_dropped_while_its_put_is_in_flight_takes_no_other_with_it() -> None:
    """The gateway's queue lives on its event loop while each PUT runs in a worker thread. When
    the bound drops the item being uploaded, the upload's end must remove nothing else.
    Before (the gateway's own deque): it popped the head, by then the next, never uploaded."""

    async def scenario() -> list[str]:
        store, counts = Store(threading.Event()), dict[str, int]()
        ship = make(common.MemoryQueue[str](), store, counts, limit=2)
        ship.enqueue("i1")
        flush = asyncio.ensure_future(ship.flush_async())
        assert await asyncio.to_thread(store.entered.wait, 10)  # i1's PUT is in flight
        ship.enqueue("i2")
        ship.enqueue("i3")
        assert ship.trim() == 1  # drops i1
        assert store.gate is not None
        store.gate.set()
        assert await flush == 3
        assert counts == {"dropped": 1, "uploaded": 3}
        return [key for key, _ in store.puts]

    assert asyncio.run(scenario()) == ["p/i1.jsonl", "p/i2.jsonl", "p/i3.jsonl"]


def use() -> usage.Use:
    return usage.Use(
        key="team-a", owner=None, team=None, namespace="ns", model="m", backend="ns/m",
        external=False, prompt_tokens=3, completion_tokens=2,
    )  # fmt: skip


def test_gateway_requests_only_append_and_its_tick_keeps_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A request that closes an interval appends it and does nothing else (no trim, no log, no
    I/O), however long the store has been down; the tick (here: stop) uploads, then drops the
    oldest beyond `max_buffered` and says so."""
    store = Store()
    store.down = True
    now = [T0 + 1]
    cfg = gateway_shipper.ShipperConfig(node="gateway-a", interval_s=60, max_buffered=2)
    ship = gateway_shipper.Shipper(
        cfg, metrics.GatewayMetrics(), uploader=store, clock=lambda: now[0]
    )
    with caplog.at_level(logging.DEBUG, logger="mlxfleet_gateway.shipper"):
        for minute in range(1, 5):
            ship.record(use())
            now[0] = T0 + 1 + 60 * minute  # the next record closes the interval before it
        ship.record(use())
        assert caplog.records == []
        assert len(ship._ship.queue) == 4
        asyncio.run(ship.stop())  # closes the fifth, fails to upload, keeps the newest two
    assert len(ship._ship.queue) == 2
    assert "dropped 3 oldest intervals" in caplog.text
    store.down = False
    assert ship._ship.flush() == 2
    assert [k.rsplit("/", 1)[1] for k, _ in store.puts] == [
        "20260921T141700Z.jsonl",
        "20260921T141800Z.jsonl",
    ]
