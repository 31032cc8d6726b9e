"""Per-key usage of the open telemetry interval: what each API key used, of which model, where.

Pure bookkeeping over explicit epoch seconds (the caller serialises access): `record` adds one
finished request, `roll(now)` closes the interval once `now` is past its end and returns it as a
`contract.TelemetryInterval` (component `gateway`, one `KeyTelemetry` row per key, model and
backend). Key names only (the Secret's name), never keys, never request text.
May import: the standard library, mlxfleet_agent.contract. Called by: the gateway's telemetry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from mlxfleet_agent import contract


class Use(NamedTuple):
    """One finished (or refused) request, as telemetry sees it (a NamedTuple: built once per
    request, a third of a frozen dataclass's cost)."""

    key: str
    owner: str | None
    team: str | None
    namespace: str | None
    model: str
    backend: str
    external: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    rate_limited: bool = False
    served: str | None = None  # served name of the deployment that answered (local only)


@dataclass(slots=True)
class UsageBook:
    node: str  # the gateway replica's name in object keys
    interval_s: float
    start: float  # epoch seconds, aligned to interval_s
    started_at: float = 0.0
    rows: dict[tuple[str, str, str, str], contract.KeyTelemetry] = field(default_factory=dict)

    @classmethod
    def open(cls, *, node: str, interval_s: float, now: float) -> UsageBook:
        return cls(node, interval_s, math.floor(now / interval_s) * interval_s, started_at=now)

    @property
    def end(self) -> float:
        return self.start + self.interval_s

    def record(self, use: Use) -> None:
        key = (use.key, use.namespace or "", use.model, use.backend)
        w = self.rows.get(key)
        if w is None:
            w = self.rows[key] = contract.KeyTelemetry(
                key=use.key,
                owner=use.owner,
                team=use.team,
                namespace=use.namespace,
                model=use.model,
                served=use.served,
                backend=use.backend,
                external=use.external,
            )
        if use.rate_limited:
            w.rate_limited += 1
            return
        w.requests += 1
        w.prompt_tokens += use.prompt_tokens
        w.completion_tokens += use.completion_tokens
        if use.error is not None:
            w.errors[use.error] = w.errors.get(use.error, 0) + 1

    def snapshot(self) -> contract.TelemetryInterval:
        return contract.TelemetryInterval(
            component="gateway",
            node=self.node,
            interval_start=datetime.fromtimestamp(self.start, tz=UTC),
            interval_seconds=self.interval_s,
            agent_started_at=datetime.fromtimestamp(self.started_at, tz=UTC),
            keys=[row.model_copy(deep=True) for _, row in sorted(self.rows.items())],
        )

    def roll(self, now: float) -> tuple[UsageBook, contract.TelemetryInterval | None]:
        """(the open book, the closed interval or None): a new book once `now` passed the end."""
        if now < self.end:
            return self, None
        closed = self.snapshot()
        fresh = UsageBook.open(node=self.node, interval_s=self.interval_s, now=now)
        fresh.started_at = self.started_at
        return fresh, closed
