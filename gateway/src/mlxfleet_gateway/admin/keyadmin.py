"""API keys through the admin API: list, create, change, rotate, revoke.

Keys are what they always were, Secrets of type `mlxfleet.io/api-key` in the gateway's namespace
holding the key's SHA-256 (core.keys); these endpoints write them as `mlxfleet-gateway new-key`
would, with the same checks (`keys.minted`: Kubernetes names, limits of at least 1, an expiry in
the future; errors name the field), and touch no other Secret: a name that is not an API key of
the gateway's is 404. A new or rotated key is returned once, never stored; the Secret carries
the creator in the annotation `mlxfleet.io/created-by`. The view is updated at once
(`Parts.remember`/`forget`): a key created here works on the next request, a revoked one is
refused on the next.
May import: the standard library, core (keys, budgets), admin (auth, parts, web, kubeapi).
Called by: admin.api.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pydantic

from mlxfleet_gateway import view
from mlxfleet_gateway.admin import auth, kubeapi, parts, web
from mlxfleet_gateway.core import budgets, keys, ledger

CREATED_BY = "mlxfleet.io/created-by"
FIELDS = (
    "owner",
    "team",
    "namespaces",
    "models",
    "requestsPerMinute",
    "tokensPerMinute",
    "expiresAt",
    "monthlyBudget",
    "scopes",
)
LISTS = frozenset({"namespaces", "models", "scopes"})


def _text(name: str, value: Any) -> str | None:
    """A JSON value as the Secret holds it (lists comma-separated); None removes the field."""
    if value is None:
        return None
    if name in LISTS and isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise web.bad(f"{name}: a list of names", param=name)
        return ",".join(value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise web.bad(f"{name}: expected a string or a number", param=name)
    return str(value)


def _fields(body: dict[str, Any], *, allowed: tuple[str, ...]) -> dict[str, str | None]:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise web.bad(
            f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}",
            param=unknown[0],
        )
    return {k: _text(k, v) for k, v in body.items()}


def _invalid(exc: keys.InvalidKey) -> web.ApiError:
    field, _ = exc.problems[0] if exc.problems else ("", "")
    return web.bad(str(exc), param=field or None)


def entry(raw: dict[str, Any], p: parts.Parts, spent: dict[str, float]) -> dict[str, Any]:
    """One key as the admin API lists it: what its Secret says, never its hash."""
    meta = raw.get("metadata") or {}
    name = str(meta.get("name") or "")
    data = view.secret_data(raw)
    try:
        spec: keys.KeySpec | None = keys.from_secret(name, data).spec
        problem = None
    except keys.InvalidKey as exc:
        spec, problem = None, str(exc)
    out: dict[str, Any] = {
        "name": name,
        "createdAt": meta.get("creationTimestamp"),
        "createdBy": (meta.get("annotations") or {}).get(CREATED_BY),
        "valid": spec is not None,
        "problem": problem,
        "spent": round(spent.get(name, 0.0), 6),
        "currency": p.view.budgets.currency,
        "refused": p.gate.refusals.get(name) is not None,
    }
    if spec is not None:
        out.update(
            owner=spec.owner,
            team=spec.team,
            namespaces=list(spec.namespaces),
            models=list(spec.models) if spec.models is not None else None,
            requestsPerMinute=spec.requests_per_minute,
            tokensPerMinute=spec.tokens_per_minute,
            expiresAt=spec.expires_at,
            monthlyBudget=spec.monthly_budget,
            scopes=list(spec.scopes),
        )
    return out


def secrets(p: parts.Parts) -> dict[str, dict[str, Any]]:
    """The gateway's API-key Secrets by name."""
    return {
        str((raw.get("metadata") or {}).get("name") or ""): raw
        for raw in p.view.raw["api-keys"].values()
        if (raw.get("metadata") or {}).get("namespace") == p.namespace
    }


def spent_by_key(p: parts.Parts) -> dict[str, float]:
    return dict(budgets.spend(p.ledger.rows(), p.view.budgets).keys)


def _secret_path(p: parts.Parts, name: str = "") -> str:
    base = kubeapi.path("api", "v1", "namespaces", p.namespace, "secrets")
    return base + (kubeapi.path(name) if name else "")


async def list_keys(p: parts.Parts) -> list[dict[str, Any]]:
    spent = spent_by_key(p)
    return [entry(raw, p, spent) for _, raw in sorted(secrets(p).items())]


def get_key(p: parts.Parts, name: str) -> dict[str, Any]:
    raw = secrets(p).get(name)
    if raw is None:
        raise web.not_found(
            f"no API key {name} (Secret of type {keys.SECRET_TYPE} in {p.namespace})"
        )
    return raw


async def create(p: parts.Parts, who: auth.Principal, body: dict[str, Any]) -> dict[str, Any]:
    name = body.get("name")
    if not isinstance(name, str):
        raise web.bad("name: required, the Secret's name (such as search-app)", param="name")
    values = _fields({k: v for k, v in body.items() if k != "name"}, allowed=FIELDS)
    key = keys.new_key()
    data = {"keyHash": keys.hash_key(key), **{k: v for k, v in values.items() if v is not None}}
    try:
        keys.minted(name, data, namespace=p.namespace, now_utc=datetime.now(UTC))
    except keys.InvalidKey as exc:
        raise _invalid(exc) from None
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": keys.SECRET_TYPE,
        "metadata": {
            "name": name,
            "namespace": p.namespace,
            "annotations": {CREATED_BY: who.name},
        },
        "stringData": data,
    }
    made = await p.write(who, "POST", _secret_path(p), body=secret)
    p.remember("api-keys", made)
    return {"key": key, **entry(made, p, spent_by_key(p))}


async def update(
    p: parts.Parts, who: auth.Principal, name: str, body: dict[str, Any]
) -> dict[str, Any]:
    raw = get_key(p, name)
    changes = _fields(body, allowed=FIELDS)
    if "namespaces" in changes and changes["namespaces"] is None:
        raise web.bad(
            "namespaces: required (a key needs at least one namespace, or *)", param="namespaces"
        )
    data = {**view.secret_data(raw), **{k: v for k, v in changes.items() if v is not None}}
    for k, v in changes.items():
        if v is None:
            data.pop(k, None)
    try:
        key = keys.from_secret(name, data)
    except keys.InvalidKey as exc:
        raise _invalid(exc) from None
    if "expiresAt" in changes and key.expired(datetime.now(UTC)):
        raise web.bad("expiresAt: must be in the future", param="expiresAt")
    patch = {
        "data": {
            k: None if v is None else base64.b64encode(v.encode()).decode()
            for k, v in changes.items()
        }
    }
    changed = await p.write(
        who,
        "PATCH",
        _secret_path(p, name),
        body=patch,
        content_type="application/merge-patch+json",
    )
    p.remember("api-keys", changed)
    p.ledger.refresh_gate()  # a new monthlyBudget holds from this request on
    return entry(changed, p, spent_by_key(p))


async def rotate(p: parts.Parts, who: auth.Principal, name: str) -> dict[str, Any]:
    """A new key for the same Secret (limits, budget, usage history kept); the old one stops
    working at once."""
    get_key(p, name)
    key = keys.new_key()
    patch = {"data": {"keyHash": base64.b64encode(keys.hash_key(key).encode()).decode()}}
    changed = await p.write(
        who,
        "PATCH",
        _secret_path(p, name),
        body=patch,
        content_type="application/merge-patch+json",
    )
    p.remember("api-keys", changed)
    return {"key": key, **entry(changed, p, spent_by_key(p))}


async def revoke(p: parts.Parts, who: auth.Principal, name: str) -> dict[str, Any]:
    get_key(p, name)
    await p.write(who, "DELETE", _secret_path(p, name))
    p.forget("api-keys", p.namespace, name)
    return {"name": name, "revoked": True}


# ---- budgets ---------------------------------------------------------------------------------


def budgets_entry(p: parts.Parts) -> dict[str, Any]:
    b = p.view.budgets
    month = p.ledger.month()
    spent = budgets.spend(p.ledger.rows(month), b)
    key_budgets = {
        name: {
            "monthlyBudget": e.get("monthlyBudget"),
            "spent": e["spent"],
            "refused": e["refused"],
        }
        for name, e in ((e["name"], e) for e in _entries(p, spent.keys))
        if e.get("monthlyBudget") is not None
    }
    return {
        "month": month,
        "resetsAt": ledger.next_month(month),
        "currency": b.currency,
        "prices": dict(b.prices),
        "teams": {
            team: {"monthlyBudget": limit, "spent": round(spent.teams.get(team, 0.0), 6)}
            for team, limit in sorted(b.teams.items())
        },
        "keys": key_budgets,
    }


def _entries(p: parts.Parts, spent: Any) -> list[dict[str, Any]]:
    return [entry(raw, p, dict(spent)) for _, raw in sorted(secrets(p).items())]


async def put_budgets(p: parts.Parts, who: auth.Principal, body: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(body) - {"currency", "prices", "teams"})
    if unknown:
        raise web.bad(
            f"unknown field(s) {', '.join(unknown)}; allowed: currency, prices, teams",
            param=unknown[0],
        )
    current = p.view.budgets.spec().model_dump()
    try:
        spec = budgets.BudgetSpec.model_validate({**current, **body})
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise web.bad(f"{where}: {first['msg']}", param=where.split(".")[0]) from None
    data = budgets.of(spec).secret_data()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": budgets.SECRET_TYPE,
        "metadata": {"name": budgets.SECRET_NAME, "namespace": p.namespace},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }
    applied = await p.write(
        who,
        "PATCH",
        _secret_path(p, budgets.SECRET_NAME),
        body=secret,
        params={"fieldManager": "mlxfleet-console", "force": "true"},
        content_type="application/apply-patch+yaml",
    )
    p.remember("budgets", applied)
    p.ledger.refresh_gate()
    return budgets_entry(p)
