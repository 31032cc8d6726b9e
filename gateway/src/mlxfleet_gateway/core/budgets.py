"""Budgets in money: prices per model, a monthly spend limit per team or API key, and who is
refused once theirs is spent (pure).

Prices and team budgets are one Secret of type `mlxfleet.io/budgets` named `mlxfleet-budgets` in
the gateway's namespace (the admin API writes it; `kubectl apply` works too); a key's own budget
is its Secret's `monthlyBudget` (core.keys):

    type: mlxfleet.io/budgets
    metadata: {name: mlxfleet-budgets}
    stringData:
      currency: USD                                  # named with every figure (default USD)
      prices: '{"default": 0.5, "team-a/chat": 0.2}' # per million tokens, by <namespace>/<model>
      teams: '{"search": 100, "ads": 20}'            # per UTC month

A row of usage costs its tokens (prompt + completion) times the price of `<namespace>/<served
model>` (the report's model name; the requested name for an external backend), else `default`,
per million; without either it costs nothing (shown as unpriced). `refusals` names every key
that may not start a request now: its own spend reached its `monthlyBudget`, or its team's reached
the team's budget. Their requests get 429 `budget_exceeded` (`errors.budget_exceeded`) until the
month ends (UTC) or the budget is raised.
May import: the standard library, pydantic, mlxfleet_agent.contract, core.keys, core.errors.
Called by: view (the Secret), months (the gate), ledger and the admin API (figures).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mlxfleet_agent import contract
from mlxfleet_gateway.core import errors, keys

SECRET_TYPE = "mlxfleet.io/budgets"  # noqa: S105 - a Secret type, not a secret
SECRET_NAME = "mlxfleet-budgets"  # noqa: S105 - a Secret name
DEFAULT_PRICE = "default"
MILLION = 1_000_000
MAX_AMOUNT = 1e12
Money = float


class InvalidBudgets(ValueError):
    """A budgets Secret that cannot be used; the message names the Secret and the field."""


def _positive_amounts(value: dict[str, float], what: str) -> dict[str, float]:
    for name, amount in value.items():
        if not name or len(name) > 253:
            raise ValueError(f"{what} name {name!r}: 1 to 253 characters")
        if not 0 <= amount <= MAX_AMOUNT:
            raise ValueError(f"{what} {name}: {amount} is not between 0 and {MAX_AMOUNT:g}")
    return value


class BudgetSpec(BaseModel):
    """The data of the budgets Secret, each value parsed (prices and teams are JSON objects)."""

    model_config = ConfigDict(extra="ignore")

    currency: str = Field(default="USD", min_length=1, max_length=8, pattern=r"^[A-Za-z$€£¥]+$")
    prices: dict[str, float] = Field(default_factory=dict)
    teams: dict[str, float] = Field(default_factory=dict)

    @field_validator("prices", "teams", mode="before")
    @classmethod
    def _json(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except ValueError as exc:
                raise ValueError(f"not a JSON object ({exc})") from None
        return value

    @field_validator("prices")
    @classmethod
    def _prices(cls, value: dict[str, float]) -> dict[str, float]:
        return _positive_amounts(value, "price")

    @field_validator("teams")
    @classmethod
    def _teams(cls, value: dict[str, float]) -> dict[str, float]:
        return _positive_amounts(value, "team")


@dataclass(frozen=True, slots=True)
class Budgets:
    """Prices and team budgets in force (empty: nothing priced, no team limited)."""

    currency: str = "USD"
    prices: Mapping[str, float] = field(default_factory=dict)
    teams: Mapping[str, float] = field(default_factory=dict)

    def price(self, namespace: str | None, model: str) -> float | None:
        """Per million tokens of `<namespace>/<model>`, else the default, else None."""
        found = self.prices.get(f"{namespace or 'default'}/{model}")
        return found if found is not None else self.prices.get(DEFAULT_PRICE)

    def cost(self, row: contract.KeyTelemetry) -> Money | None:
        """What a usage row's tokens cost; None when no price applies."""
        price = self.price(row.namespace, row.served or row.model)
        if price is None:
            return None
        return (row.prompt_tokens + row.completion_tokens) * price / MILLION

    def spec(self) -> BudgetSpec:
        return BudgetSpec(currency=self.currency, prices=dict(self.prices), teams=dict(self.teams))

    def secret_data(self) -> dict[str, str]:
        """The Secret's `stringData` for these budgets (the admin API writes it)."""
        return {
            "currency": self.currency,
            "prices": json.dumps(dict(sorted(self.prices.items()))),
            "teams": json.dumps(dict(sorted(self.teams.items()))),
        }


NONE = Budgets()


def of(spec: BudgetSpec) -> Budgets:
    return Budgets(currency=spec.currency, prices=dict(spec.prices), teams=dict(spec.teams))


def from_secret(name: str, data: Mapping[str, str]) -> Budgets:
    """Validate the budgets Secret's (decoded) data; InvalidBudgets names the field."""
    try:
        return of(BudgetSpec.model_validate(dict(data)))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'data'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidBudgets(f"budgets Secret {name}: {problems}") from None


@dataclass(frozen=True, slots=True)
class Spend:
    """Money spent over the month per key and per team (keys without a team: not counted)."""

    keys: Mapping[str, Money]
    teams: Mapping[str, Money]


def spend(rows: Iterable[contract.KeyTelemetry], budgets: Budgets) -> Spend:
    by_key: dict[str, Money] = {}
    by_team: dict[str, Money] = {}
    for row in rows:
        cost = budgets.cost(row)
        if not cost:
            continue
        by_key[row.key] = by_key.get(row.key, 0.0) + cost
        if row.team:
            by_team[row.team] = by_team.get(row.team, 0.0) + cost
    return Spend(keys=by_key, teams=by_team)


def _amount(value: Money, currency: str) -> str:
    return f"{value:,.2f} {currency}"


def refusals(
    spent: Spend, budgets: Budgets, ring: Iterable[keys.ApiKey], *, resets_at: datetime
) -> dict[str, errors.GatewayError]:
    """Key name -> the error its requests get now (keys not named may go on)."""
    out: dict[str, errors.GatewayError] = {}
    when = resets_at.isoformat(timespec="seconds").replace("+00:00", "Z")
    cur = budgets.currency
    for key in ring:
        own = key.spec.monthly_budget
        if own is not None and spent.keys.get(key.name, 0.0) >= own:
            used = _amount(spent.keys.get(key.name, 0.0), cur)
            out[key.name] = errors.budget_exceeded(
                f"API key {key.name} has spent {used} of its monthly budget of "
                f"{_amount(own, cur)}; it resets at {when}"
            )
            continue
        team = key.spec.team
        limit = budgets.teams.get(team) if team else None
        if team and limit is not None and spent.teams.get(team, 0.0) >= limit:
            used = _amount(spent.teams.get(team, 0.0), cur)
            out[key.name] = errors.budget_exceeded(
                f"team {team} has spent {used} of its monthly budget of "
                f"{_amount(limit, cur)}; it resets at {when}"
            )
    return out


class Gate:
    """The refusals in force, read by the proxy once per request (a dict lookup; empty while
    no budget is spent) and replaced whole by `months` every second."""

    __slots__ = ("refusals",)

    def __init__(self) -> None:
        self.refusals: dict[str, errors.GatewayError] = {}
