"""The admin API against a real fleet (tests/e2e/console/conftest.py): a key made through it
serves a chat at once and, revoked, is refused within a second; a team over its monthly budget
gets the budget error (429 `budget_exceeded`, not retried by the openai client) while another
team is served, and is served again once its budget is raised; the month's usage per key equals
what the clients were told.
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.e2e.console.conftest import ConsoleFleet, unique

pytestmark = [pytest.mark.cluster, pytest.mark.mlx, pytest.mark.s3, pytest.mark.slow]
HELLO = [{"role": "user", "content": "hello there"}]


def _chat(client: openai.OpenAI, **kwargs: object) -> int:
    """One chat; the tokens (prompt + completion) the client was told it used."""
    reply = client.chat.completions.create(model="chat", messages=HELLO, max_tokens=8, **kwargs)  # type: ignore[call-overload]
    assert reply.usage is not None
    return int(reply.usage.prompt_tokens + reply.usage.completion_tokens)


def test_a_key_made_through_the_api_serves_at_once_and_is_refused_once_revoked(
    console_fleet: ConsoleFleet,
) -> None:
    cf = console_fleet
    name = unique(f"{cf.fleet.ws.label}-made")
    r = cf.admin(
        "POST", "/admin/v1/keys", json={"name": name, "namespaces": [cf.ns], "team": "made"}
    )
    assert r.status_code == 201, r.text
    key = r.json()["key"]
    client = cf.gw.openai(api_key=key)
    assert _chat(client) > 0  # at once: no wait for the watch
    r = cf.admin("DELETE", f"/admin/v1/keys/{name}")
    assert r.status_code == 200, r.text
    revoked = time.monotonic()
    with pytest.raises(openai.AuthenticationError):
        _chat(client)
    assert time.monotonic() - revoked < 1.0


def test_a_team_over_its_budget_is_refused_while_another_is_served(
    console_fleet: ConsoleFleet,
) -> None:
    cf = console_fleet
    # a price and a budget of a few requests' worth for team gamma
    r = cf.admin(
        "PUT",
        "/admin/v1/budgets",
        json={"currency": "USD", "prices": {"default": 100.0}, "teams": {"gamma": 0.01}},
    )
    assert r.status_code == 200, r.text
    gamma, delta = cf.client("gamma"), cf.client("delta")
    refused: openai.RateLimitError | None = None
    spent_tokens = 0
    started = time.monotonic()
    for _ in range(200):
        try:
            spent_tokens += _chat(gamma)
        except openai.RateLimitError as exc:
            refused = exc
            break
    took = time.monotonic() - started
    assert refused is not None, f"gamma was never refused ({spent_tokens} tokens)"
    # 0.01 USD at 100 USD per million tokens is 100 tokens; the gate looks every second
    assert spent_tokens >= 100, spent_tokens
    body = refused.body if isinstance(refused.body, dict) else {}
    assert refused.code == "budget_exceeded", body
    assert refused.response.headers["x-should-retry"] == "false"
    assert "team gamma has spent" in refused.message
    assert "monthly budget of 0.01 USD" in refused.message
    assert refused.response.status_code == 429
    assert took < 120
    # the other team is served, gamma still refused
    assert _chat(delta) > 0
    with pytest.raises(openai.RateLimitError):
        _chat(gamma)
    # the admin API and the budgets show it
    budgets = cf.admin("GET", "/admin/v1/budgets").json()
    assert budgets["teams"]["gamma"]["spent"] >= 0.01
    keys = {k["name"]: k for k in cf.admin("GET", "/admin/v1/keys").json()["items"]}
    assert keys[cf.key_names["gamma"]]["refused"] is True
    assert keys[cf.key_names["delta"]]["refused"] is False
    # raising the budget lets gamma in again within a second or two
    r = cf.admin("PUT", "/admin/v1/budgets", json={"teams": {"gamma": 1000.0}})
    assert r.status_code == 200, r.text
    assert _chat(gamma) > 0


def test_the_months_usage_per_key_is_what_the_clients_were_told(
    console_fleet: ConsoleFleet,
) -> None:
    cf = console_fleet
    client = cf.client("beta")
    told = 0
    for i in range(3):
        told += _chat(client)
        stream = client.chat.completions.create(
            model="assistant",
            messages=[{"role": "user", "content": f"stream {i}"}],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            if chunk.usage is not None:
                told += chunk.usage.prompt_tokens + chunk.usage.completion_tokens
    usage = cf.admin("GET", "/admin/v1/usage").json()
    rows = {r["name"]: r for r in usage["byKey"]}
    assert rows[cf.key_names["beta"]]["tokens"] == told
    teams = {r["name"]: r for r in usage["byTeam"]}
    assert teams["beta"]["tokens"] == told
    assert teams["beta"]["requests"] == 6
    models = {r["name"] for r in usage["byModel"]}
    assert f"{cf.ns}/chat" in models
    assert usage["currency"] == "USD"
    r = httpx.get(
        cf.gw.url + "/admin/v1/usage?month=2026-13",
        headers={"Authorization": f"Bearer {cf.admin_key}"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "month"
