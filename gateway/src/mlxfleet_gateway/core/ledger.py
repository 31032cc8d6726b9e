"""The month so far: per-key usage rows summed over a UTC month (pure).

The rows are the gateway's telemetry rows (`contract.KeyTelemetry`: key, team, namespace,
requested and served model, backend, requests, tokens), the same rows each replica ships per
interval and the monthly report prices by team. `Months` sums one replica's closed intervals by
the month they started in; `MonthObject` is what a replica writes to the telemetry bucket as its
month-to-date (one object per replica and month, rewritten as intervals close), so every replica
can add the others' months to its own: the month's figures across replicas and restarts.
`summarize` groups rows by key, team or model with their cost at the budgets' prices.
May import: the standard library, pydantic, mlxfleet_agent.contract, core.budgets.
Called by: shipper (closed intervals), months (bucket objects, the budget gate), the admin API.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mlxfleet_agent import contract
from mlxfleet_gateway.core import budgets as budgets_mod

MONTH_OBJECT_VERSION = 1
RowKey = tuple[str, str, str, str, str, str, bool]
GroupBy = Literal["key", "team", "model"]
NO_TEAM = "(no team)"  # as the monthly report's "Cost by team" names keys without a team


def month_of(epoch_s: float) -> str:
    """`YYYY-MM` of a moment (UTC)."""
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m")


def month_start(month: str) -> datetime:
    return datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)


def next_month(month: str) -> datetime:
    """When `month` ends (and its budgets reset): the first moment of the month after, UTC."""
    start = month_start(month)
    year, mon = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return start.replace(year=year, month=mon)


def row_key(row: contract.KeyTelemetry) -> RowKey:
    return (
        row.key,
        row.team or "",
        row.namespace or "",
        row.model,
        row.served or "",
        row.backend,
        row.external,
    )


def add_rows(
    into: dict[RowKey, contract.KeyTelemetry], rows: Iterable[contract.KeyTelemetry]
) -> None:
    """Sum `rows` into `into` (one row per key, team, namespace, model, backend)."""
    for row in rows:
        k = row_key(row)
        found = into.get(k)
        if found is None:
            into[k] = row.model_copy(deep=True)
            continue
        found.requests += row.requests
        found.rate_limited += row.rate_limited
        found.prompt_tokens += row.prompt_tokens
        found.completion_tokens += row.completion_tokens
        for kind, n in row.errors.items():
            found.errors[kind] = found.errors.get(kind, 0) + n


def total(*sources: Iterable[contract.KeyTelemetry]) -> list[contract.KeyTelemetry]:
    out: dict[RowKey, contract.KeyTelemetry] = {}
    for rows in sources:
        add_rows(out, rows)
    return [out[k] for k in sorted(out)]


class Months:
    """One replica's closed intervals summed per UTC month (the last `keep` months)."""

    def __init__(self, *, keep: int = 2) -> None:
        self.keep = keep
        self._months: dict[str, dict[RowKey, contract.KeyTelemetry]] = {}
        self.version = 0  # bumped on every change: writers skip an unchanged month

    def add(self, interval: contract.TelemetryInterval) -> None:
        if not interval.keys:
            return
        month = month_of(interval.interval_start.timestamp())
        add_rows(self._months.setdefault(month, {}), interval.keys)
        for old in sorted(self._months)[: -self.keep]:
            del self._months[old]
        self.version += 1

    def rows(self, month: str) -> list[contract.KeyTelemetry]:
        found = self._months.get(month) or {}
        return [found[k] for k in sorted(found)]

    def months(self) -> list[str]:
        return sorted(self._months)


class MonthObject(BaseModel):
    """A replica's month so far, as stored in the bucket (`months.month_key`)."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = MONTH_OBJECT_VERSION
    node: str = Field(pattern=contract.TELEMETRY_NODE.pattern)
    month: str = Field(pattern=r"^\d{4}-\d{2}$")
    updated_at: datetime
    keys: list[contract.KeyTelemetry] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One key, team or model over the month: requests, tokens and what they cost."""

    name: str
    requests: int
    errors: int
    rate_limited: int
    prompt_tokens: int
    completion_tokens: int
    cost: float  # at the budgets' prices; tokens without a price count nothing
    unpriced_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def model_name(row: contract.KeyTelemetry) -> str:
    """The model a row's tokens ran on, as the monthly report names it: `<namespace>/<served>`
    (the requested name for an external backend)."""
    return f"{row.namespace or 'default'}/{row.served or row.model}"


def group_name(row: contract.KeyTelemetry, by: GroupBy) -> str:
    if by == "key":
        return row.key
    if by == "team":
        return row.team or NO_TEAM
    return model_name(row)


def summarize(
    rows: Iterable[contract.KeyTelemetry], budgets: budgets_mod.Budgets, *, by: GroupBy
) -> list[UsageRow]:
    """One row per key, team or model: costliest first, then by tokens, then by name."""
    acc: dict[str, list[float]] = {}
    for row in rows:
        a = acc.setdefault(group_name(row, by), [0, 0, 0, 0, 0, 0.0, 0])
        a[0] += row.requests
        a[1] += sum(row.errors.values())
        a[2] += row.rate_limited
        a[3] += row.prompt_tokens
        a[4] += row.completion_tokens
        cost = budgets.cost(row)
        if cost is None:
            a[6] += row.prompt_tokens + row.completion_tokens
        else:
            a[5] += cost
    out = [
        UsageRow(
            name=name,
            requests=int(a[0]),
            errors=int(a[1]),
            rate_limited=int(a[2]),
            prompt_tokens=int(a[3]),
            completion_tokens=int(a[4]),
            cost=float(a[5]),
            unpriced_tokens=int(a[6]),
        )
        for name, a in acc.items()
    ]
    return sorted(out, key=lambda r: (-r.cost, -r.tokens, r.name))
