"""The month so far across gateway replicas, and the budget gate that follows it.

Each replica knows its own month (the shipper's closed intervals and its open one). With a
telemetry bucket it also writes that month, whenever it changed, as one object per replica
(`month_key`: `<prefix>/v1/month-to-date/month=YYYY-MM/node=<replica>.json`, the sums of the
rows it ships) and reads the other replicas' objects every `peer_interval_s`, so the month's
figures span every replica and survive restarts (a restarted replica has a new name; its
predecessor's object stays). Without a bucket the month is this process's since it started.

Every `gate_interval_s` (1 s) the month's rows are priced (`core.budgets`) and the gate's
refusals replaced: a key whose own or whose team's spend reached its budget is refused from then
on; another replica's use is seen after at most two peer intervals. Nothing here runs per
request: the proxy reads `budgets.Gate.refusals`, one dict lookup.
May import: the standard library, mlxfleet_agent.contract, core (budgets, ledger), shipper, view.
Called by: server (start/stop), the admin API and the console (figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pydantic

from mlxfleet_agent import contract
from mlxfleet_gateway import shipper, view
from mlxfleet_gateway.core import budgets, ledger

log = logging.getLogger("mlxfleet_gateway.months")
LAYOUT = "month-to-date"


def month_prefix(prefix: str, month: str) -> str:
    head = prefix.strip("/")
    return "/".join([*([head] if head else []), contract.TELEMETRY_KEY_LAYOUT, LAYOUT, ""]) + (
        f"month={month}/"
    )


def month_key(prefix: str, month: str, node: str) -> str:
    return f"{month_prefix(prefix, month)}node={node}.json"


class MonthLedger:
    def __init__(
        self,
        *,
        usage: shipper.Shipper,
        state: view.View,
        gate: budgets.Gate,
        prefix: str,
        peer_interval_s: float = 60.0,
        gate_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.usage = usage
        self.view = state
        self.gate = gate
        self.prefix = prefix
        self.node = usage.config.node
        self.peer_interval_s = peer_interval_s
        self.gate_interval_s = gate_interval_s
        self.clock = clock
        self.peers: dict[str, dict[str, tuple[str, list[contract.KeyTelemetry]]]] = {}
        self._written: dict[str, int] = {}  # month -> Months.version written
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def month(self) -> str:
        return ledger.month_of(self.clock())

    def rows(self, month: str | None = None) -> list[contract.KeyTelemetry]:
        """Every replica's rows of `month` (default: this one) so far."""
        month = month or self.month()
        others = [rows for _, rows in (self.peers.get(month) or {}).values()]
        return ledger.total(self.usage.month_rows(month), *others)

    def months(self) -> list[str]:
        """Months with figures (this replica's and the peers' read so far), newest first."""
        return sorted({self.month(), *self.usage.months.months(), *self.peers}, reverse=True)

    # ---- the budget gate ---------------------------------------------------------------------

    def refresh_gate(self) -> None:
        b = self.view.budgets
        ring = list(self.view.keys.by_hash.values())
        if not b.teams and not any(k.spec.monthly_budget is not None for k in ring):
            self.gate.refusals = {}
            return
        month = self.month()
        spent = budgets.spend(self.rows(month), b)
        self.gate.refusals = budgets.refusals(spent, b, ring, resets_at=ledger.next_month(month))

    # ---- the bucket ----------------------------------------------------------------------------

    async def sync_bucket(self) -> None:
        """Write this replica's month if it changed; read the other replicas' changed ones."""
        store = self.usage.store
        if store is None:
            return
        month = self.month()
        try:
            version = self.usage.months.version
            if self._written.get(month) != version and self.usage.months.rows(month):
                body = ledger.MonthObject(
                    node=self.node,
                    month=month,
                    updated_at=datetime.fromtimestamp(self.clock(), tz=UTC),
                    keys=self.usage.months.rows(month),
                ).model_dump_json()
                key = month_key(self.prefix, month, self.node)
                await asyncio.to_thread(store.put, key, body.encode())
                self._written[month] = version
            await self._read_peers(store, month)
            self._failing = False
        except Exception as exc:  # the store's errors: figures stay as they were, retried later
            if not self._failing:
                log.warning("month-to-date objects unreachable: %s", exc)
            self._failing = True

    async def read_month(self, month: str) -> None:
        """Read the other replicas' objects of an earlier `month` (the admin API asks)."""
        store = self.usage.store
        if store is not None and month != self.month():
            await self._read_peers(store, month)

    async def _read_peers(self, store: shipper.Uploader, month: str) -> None:
        listed = await asyncio.to_thread(store.list, month_prefix(self.prefix, month))
        known = self.peers.setdefault(month, {})
        own = month_key(self.prefix, month, self.node)
        seen = set()
        for key, etag in listed:
            if key == own:
                continue
            seen.add(key)
            if key in known and known[key][0] == etag:
                continue
            raw = await asyncio.to_thread(store.get, key)
            try:
                obj = ledger.MonthObject.model_validate_json(raw)
            except pydantic.ValidationError as exc:
                log.warning("ignoring month-to-date object %s: %s", key, exc.errors()[:1])
                continue
            if obj.month == month:
                known[key] = (etag, obj.keys)
        for gone in set(known) - seen:
            del known[gone]
        for old in sorted(self.peers)[:-2]:
            del self.peers[old]

    # ---- running -------------------------------------------------------------------------------

    async def _run(self) -> None:
        next_sync = 0.0
        while True:
            self.refresh_gate()
            now = time.monotonic()
            if now >= next_sync:
                next_sync = now + self.peer_interval_s
                await self.sync_bucket()
            await asyncio.sleep(self.gate_interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop, after writing this replica's month one last time (the shipper closed its open
        interval first)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.sync_bucket()
