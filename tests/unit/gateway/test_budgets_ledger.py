"""Budgets in money and the month's ledger (pure): prices, spend per key and team, who is refused
and with what, months summed from intervals, usage tables, the keys' new fields."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mlxfleet_agent import contract
from mlxfleet_gateway.core import budgets, errors, keys, ledger

HASH = "a" * 64


def row(
    key: str, team: str | None, *, ns: str = "team-a", model: str = "chat", **n: int
) -> contract.KeyTelemetry:
    return contract.KeyTelemetry(
        key=key, team=team, namespace=ns, model=model, served=model, backend=f"{ns}/{model}",
        requests=n.get("requests", 1), prompt_tokens=n.get("prompt", 0),
        completion_tokens=n.get("completion", 0),
    )  # fmt: skip


def key(name: str, *, team: str | None = None, budget: float | None = None) -> keys.ApiKey:
    data = {"keyHash": HASH, "namespaces": "*"}
    if team:
        data["team"] = team
    if budget is not None:
        data["monthlyBudget"] = str(budget)
    return keys.from_secret(name, data)


def test_the_budgets_secret_parses_and_names_what_is_wrong() -> None:
    b = budgets.from_secret(
        "mlxfleet-budgets",
        {"currency": "EUR", "prices": '{"default": 0.5, "team-a/chat": 2}', "teams": '{"x": 10}'},
    )
    assert b.currency == "EUR"
    assert b.price("team-a", "chat") == 2
    assert b.price("team-b", "chat") == 0.5
    assert b.teams == {"x": 10}
    assert budgets.from_secret("b", {}) == budgets.NONE
    for data, field in (
        ({"prices": "{not json"}, "prices"),
        ({"prices": '{"default": -1}'}, "prices"),
        ({"teams": '{"x": "lots"}'}, "teams"),
        ({"teams": '{"x": 1e13}'}, "teams"),
        ({"currency": "<b>"}, "currency"),
    ):
        with pytest.raises(budgets.InvalidBudgets, match=field):
            budgets.from_secret("b", data)


def test_without_a_price_tokens_cost_nothing_and_show_as_unpriced() -> None:
    rows = [row("k", "t", prompt=10, completion=5)]
    assert budgets.spend(rows, budgets.NONE).keys == {}
    table = ledger.summarize(rows, budgets.NONE, by="key")
    assert table[0].cost == 0
    assert table[0].unpriced_tokens == 15


def test_spend_is_tokens_times_the_price_per_million_by_key_and_team() -> None:
    b = budgets.Budgets(prices={"default": 1.0, "team-a/big": 10.0})
    rows = [
        row("k1", "search", prompt=400_000, completion=100_000),  # 0.5 at the default
        row("k1", "search", model="big", completion=100_000),  # 1.0
        row("k2", None, prompt=1_000_000),  # no team: counts for the key only
    ]
    spent = budgets.spend(rows, b)
    assert spent.keys == pytest.approx({"k1": 1.5, "k2": 1.0})
    assert spent.teams == pytest.approx({"search": 1.5})


def test_a_key_is_refused_when_its_own_or_its_teams_budget_is_spent() -> None:
    b = budgets.Budgets(prices={"default": 1.0}, teams={"search": 1.0, "ads": 5.0})
    ring = [
        key("own", team="ads", budget=0.2),
        key("member", team="search"),
        key("other", team="ads"),
        key("free"),
    ]
    spent = budgets.Spend(keys={"own": 0.2, "member": 1.0}, teams={"search": 1.0, "ads": 0.2})
    resets = datetime(2026, 8, 1, tzinfo=UTC)
    refused = budgets.refusals(spent, b, ring, resets_at=resets)
    assert set(refused) == {"own", "member"}
    err = refused["member"]
    assert isinstance(err, errors.GatewayError)
    assert err.status == 429
    assert err.code == "budget_exceeded"
    assert err.type == "insufficient_quota"
    assert (b"x-should-retry", b"false") in err.headers
    assert str(err) == (
        "team search has spent 1.00 USD of its monthly budget of 1.00 USD; it resets at "
        "2026-08-01T00:00:00Z"
    )
    assert "API key own has spent 0.20 USD of its monthly budget of 0.20 USD" in str(refused["own"])
    # just under: not refused
    under = budgets.Spend(keys={"own": 0.19}, teams={"search": 0.99})
    assert budgets.refusals(under, b, ring, resets_at=resets) == {}


def test_months_sum_closed_intervals_and_keep_two() -> None:
    months = ledger.Months()

    def interval(day: str, *rows: contract.KeyTelemetry) -> contract.TelemetryInterval:
        return contract.TelemetryInterval(
            component="gateway",
            node="gateway-a",
            interval_start=datetime.fromisoformat(day + "T10:00:00+00:00"),
            interval_seconds=60,
            keys=list(rows),
        )

    months.add(interval("2026-05-31", row("k", "t", prompt=5)))
    months.add(interval("2026-06-01", row("k", "t", prompt=1, completion=2)))
    months.add(interval("2026-06-02", row("k", "t", prompt=3), row("j", None, completion=4)))
    june = months.rows("2026-06")
    assert [(r.key, r.prompt_tokens, r.completion_tokens, r.requests) for r in june] == [
        ("j", 0, 4, 1),
        ("k", 4, 2, 2),
    ]
    assert months.rows("2026-05")[0].prompt_tokens == 5
    months.add(interval("2026-07-01", row("k", "t", prompt=1)))
    assert months.months() == ["2026-06", "2026-07"]
    assert ledger.next_month("2026-12") == datetime(2027, 1, 1, tzinfo=UTC)
    assert ledger.month_of(datetime(2026, 6, 30, 23, 59, tzinfo=UTC).timestamp()) == "2026-06"


def test_usage_tables_group_by_key_team_and_model() -> None:
    b = budgets.Budgets(prices={"default": 1.0})
    rows = [
        row("k1", "search", prompt=600_000, completion=400_000),
        row("k2", "search", model="embed", prompt=500_000),
        row("k3", None, ns="team-b", prompt=1),
    ]
    teams = ledger.summarize(rows, b, by="team")
    assert [(t.name, t.tokens, round(t.cost, 6)) for t in teams] == [
        ("search", 1_500_000, 1.5),
        ("(no team)", 1, 0.000001),
    ]
    models = [m.name for m in ledger.summarize(rows, b, by="model")]
    assert models == ["team-a/chat", "team-a/embed", "team-b/chat"]


def test_keys_take_an_admin_scope_and_a_monthly_budget() -> None:
    k = keys.from_secret(
        "ops", {"keyHash": HASH, "namespaces": "*", "scopes": "admin", "monthlyBudget": "12.5"}
    )
    assert k.admin
    assert k.spec.monthly_budget == 12.5
    assert not keys.from_secret("app", {"keyHash": HASH, "namespaces": "*"}).admin
    for data, field in (
        ({"scopes": "root"}, "scopes"),
        ({"monthlyBudget": "-1"}, "monthlyBudget"),
        ({"monthlyBudget": "nan"}, "monthlyBudget"),
    ):
        with pytest.raises(keys.InvalidKey, match=field):
            keys.from_secret("bad", {"keyHash": HASH, "namespaces": "*", **data})
