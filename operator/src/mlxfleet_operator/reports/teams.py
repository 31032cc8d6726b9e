"""Cost by team: what each API key's team used through the gateway, priced at the models' cost.

Gateway telemetry lines (`component: gateway`) carry per-key rows (key name, owner, team, the
namespace and served name of the deployment that answered, tokens). A team's cost is the tokens it
used on each local model x that model's serving cost per million tokens from the same report
(busy-time allocation); tokens served by external providers are listed apart (the provider bills
them). Keys without a team are grouped as `(no team)`.
May import: the standard library, `mlxfleet_agent.contract`, `core.kit.cost`. Called by: monthly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mlxfleet_agent import contract
from mlxfleet_operator.core.kit import cost

NO_TEAM = "(no team)"


@dataclass(slots=True)
class TeamRow:
    team: str
    keys: set[str] = field(default_factory=set)
    requests: int = 0
    errors: int = 0
    rate_limited: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    external_tokens: int = 0
    cost_usd: float | None = None
    unpriced_tokens: int = 0  # local tokens of models without a cost figure

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def rows(
    intervals: Iterable[contract.TelemetryInterval],
    cpm: Mapping[cost.ModelKey, float | None],
) -> list[TeamRow]:
    """One row per team, most expensive first (then by tokens)."""
    teams: dict[str, TeamRow] = {}
    for iv in intervals:
        for k in iv.keys:
            row = teams.setdefault(k.team or NO_TEAM, TeamRow(team=k.team or NO_TEAM))
            row.keys.add(k.key)
            row.requests += k.requests
            row.errors += sum(k.errors.values())
            row.rate_limited += k.rate_limited
            row.prompt_tokens += k.prompt_tokens
            row.completion_tokens += k.completion_tokens
            tokens = k.prompt_tokens + k.completion_tokens
            if k.external:
                row.external_tokens += tokens
                continue
            price = cpm.get(
                cost.ModelKey(namespace=k.namespace or "default", model=k.served or k.model)
            )
            if price is None:
                row.unpriced_tokens += tokens
            elif tokens:
                row.cost_usd = (row.cost_usd or 0.0) + cost.usd_for(tokens, price)
    return sorted(teams.values(), key=lambda r: (-(r.cost_usd or 0.0), -r.tokens, r.team))
