"""Per-key usage shipped to the fleet's S3/R2 telemetry bucket, in the agents' interval format.

Every `interval_s` (60 by default) the open `usage.UsageBook` is closed into one
`TelemetryInterval` line (component `gateway`, node `<gateway name>`, a `keys` section) and
uploaded under the same key layout as the agents' (`contract.telemetry_key`), so the reports read
both with one listing. Every closed interval is also summed into `months` (this replica's month
so far, `core.ledger`), which `months.MonthLedger` adds to the other replicas' for the console,
the admin API and the budgets. The gateway is stateless: closed intervals wait in memory while
the store is unreachable (at most `max_buffered` after each tick, one more between two; the oldest
are dropped and counted), and the open interval is closed and flushed on shutdown. Nothing is
shipped without a bucket. The queue, its bound and the uploads are the one telemetry shipper's
(mlxfleet_common.telemetry.shipper, with a `MemoryQueue`): closing an interval on a request's path
is an append, never I/O; the tick (every interval / 12, at most 5 s) uploads, each PUT in a worker
thread, then keeps the bound.
May import: mlxfleet_common (s3client: boto3, lazily; telemetry.shipper), the standard library,
mlxfleet_agent.contract, core.usage, core.ledger, metrics.
Called by: server (start/stop) and metering (record).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from mlxfleet_agent import contract
from mlxfleet_common import s3client
from mlxfleet_common.telemetry import shipper as common
from mlxfleet_gateway import metrics
from mlxfleet_gateway.core import ledger, usage

log = logging.getLogger("mlxfleet_gateway.shipper")


@dataclass(frozen=True, slots=True)
class ShipperConfig:
    node: str
    bucket: str | None = None
    prefix: str = "mlxfleet-telemetry"
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    interval_s: float = 60.0
    max_buffered: int = 1440


class Uploader(Protocol):
    def put(self, key: str, body: bytes) -> None: ...

    def list(self, prefix: str) -> list[tuple[str, str]]:
        """(key, ETag) of every object under `prefix`."""
        ...

    def get(self, key: str) -> bytes: ...


class Shipper:
    """The open `UsageBook`, this replica's month, and the shared shipper over a memory queue."""

    def __init__(
        self,
        config: ShipperConfig,
        gauges: metrics.GatewayMetrics,
        *,
        uploader: Uploader | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.metrics = gauges
        self._clock = clock
        self.book = usage.UsageBook.open(
            node=config.node, interval_s=config.interval_s, now=clock()
        )
        self.months = ledger.Months()  # closed intervals summed per UTC month
        self._uploader = uploader
        if uploader is None and config.bucket:
            # short timeouts: an unreachable store only delays the queue
            self._uploader = s3client.Bucket(
                config.bucket,
                profile=s3client.TELEMETRY,
                endpoint_url=config.endpoint_url,
                region=config.region,
                access_key_id=config.access_key_id,
                secret_access_key=config.secret_access_key,
            )
        codec = contract.IntervalCodec(config.prefix)
        counter = gauges.telemetry
        self._ship = common.Shipper(
            common.MemoryQueue[contract.TelemetryInterval](),
            self._uploader,
            codec=codec,
            key=codec.key,
            max_buffered=config.max_buffered,
            count=lambda result, n: counter.labels(result).inc(n),
            log=log,
        )
        self._task: asyncio.Task[None] | None = None

    @property
    def store(self) -> Uploader | None:
        """The bucket (None without one)."""
        return self._uploader

    @property
    def uploaded(self) -> list[str]:
        """This process's latest uploads, in order (diagnostics)."""
        return list(self._ship.uploaded)

    def month_rows(self, month: str) -> list[contract.KeyTelemetry]:
        """This replica's rows of `month` so far: closed intervals and the open one."""
        rows = self.months.rows(month)
        if ledger.month_of(self.book.start) == month and self.book.rows:
            return ledger.total(rows, self.book.rows.values())
        return rows

    def record(self, use: usage.Use) -> None:
        self._roll()
        self.book.record(use)

    def _roll(self, *, force: bool = False) -> None:
        now = self._clock()
        if force:  # shutting down: close the interval as it is (its key is this process's own)
            closed: contract.TelemetryInterval | None = self.book.snapshot()
            self.book = usage.UsageBook.open(
                node=self.config.node, interval_s=self.config.interval_s, now=now
            )
        else:
            self.book, closed = self.book.roll(now)
        if closed is None:
            return
        self.months.add(closed)
        self.metrics.telemetry.labels("closed").inc()
        if closed.keys:  # an append, O(1) and no I/O (this runs on a request's path); the
            self._ship.enqueue(closed)  # bound is kept by the tick (`_run`)

    async def _run(self) -> None:
        tick = max(0.05, min(5.0, self.config.interval_s / 12))
        while True:
            await asyncio.sleep(tick)
            self._roll()
            await self._ship.flush_async()
            self._ship.trim()  # what the store could not take, beyond `max_buffered`

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Close the open interval early and try one last upload."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._roll(force=True)
        await self._ship.flush_async()
        self._ship.trim()
