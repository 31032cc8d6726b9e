"""API keys: Kubernetes Secrets of type `mlxfleet.io/api-key` in the gateway's namespace.

A Secret holds the SHA-256 of the key (never the key), who owns it, which namespaces and models it
may use, its limits and an optional expiry:

    type: mlxfleet.io/api-key
    stringData:
      keyHash: <sha256 hex of the key>          # `mlxfleet-gateway new-key` prints key + Secret
      owner: alice@example.com                  # optional
      team: search                              # optional; the monthly report groups cost by it
      namespaces: team-a,shared                 # where names resolve, in this order ("*": all)
      models: chat,embed                        # optional; "*" or unset: every name in scope
      requestsPerMinute: "600"                  # optional
      tokensPerMinute: "200000"                 # optional
      expiresAt: "2027-01-31T00:00:00Z"         # optional (RFC 3339)
      monthlyBudget: "50"                       # optional; spend per UTC month (core.budgets)
      scopes: admin                             # optional; `admin`: the console and admin API

`from_secret` validates one Secret (errors name the field); `minted` adds what only a key being
minted must satisfy (the API server takes its Secret, it can be used at all);
`KeyRing.authenticate` finds a key by its hash (a SHA-256 lookup: keys are long random strings,
so a slow hash adds nothing).
May import: the standard library, pydantic, errors, `mlxfleet_operator.api.fields` (name patterns).
Called by: the watches, the proxy, the CLI.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from mlxfleet_gateway.core import errors
from mlxfleet_operator.api import fields

SECRET_TYPE = "mlxfleet.io/api-key"  # noqa: S105 - a Secret type, not a secret
KEY_PREFIX = "mfk-"
HASH_PATTERN = r"^[0-9a-f]{64}$"
ANONYMOUS = "anonymous"
ADMIN_SCOPE = "admin"  # the console and the admin API (`/console/`, `/admin/v1/`)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A fresh random key (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _csv(value: object) -> object:
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    return value


class KeySpec(BaseModel):
    """The data of one API-key Secret (camelCase keys, all values strings in the Secret)."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, extra="ignore"
    )

    key_hash: str = Field(pattern=HASH_PATTERN)
    owner: str | None = Field(default=None, max_length=256)
    team: str | None = Field(default=None, max_length=256)
    namespaces: tuple[str, ...] = Field(min_length=1)
    models: tuple[str, ...] | None = None
    requests_per_minute: int | None = Field(default=None, ge=1, le=10_000_000)
    tokens_per_minute: int | None = Field(default=None, ge=1, le=10_000_000_000)
    expires_at: datetime | None = None
    monthly_budget: float | None = Field(default=None, ge=0, le=1e12, allow_inf_nan=False)
    scopes: tuple[Literal["admin"], ...] = ()

    _split = field_validator("namespaces", "models", "scopes", mode="before")(_csv)

    @field_validator("key_hash", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("expires_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("expiresAt needs a time zone, such as 2027-01-31T00:00:00Z")
        return value


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A validated key: its Secret's name and what it may do."""

    name: str
    spec: KeySpec

    @property
    def scope(self) -> tuple[str, ...]:
        return self.spec.namespaces

    def may_use(self, model: str) -> bool:
        models = self.spec.models
        return models is None or "*" in models or model in models

    def expired(self, now_utc: datetime) -> bool:
        return self.spec.expires_at is not None and now_utc >= self.spec.expires_at

    @property
    def admin(self) -> bool:
        """May use the console and the admin API (its Secret's `scopes` has `admin`)."""
        return ADMIN_SCOPE in self.spec.scopes


ANONYMOUS_KEY = ApiKey(
    ANONYMOUS, KeySpec(key_hash="0" * 64, namespaces=("*",), owner=None, team=None)
)


class InvalidKey(ValueError):
    """An API-key Secret that cannot be used; the message names the Secret and the field.
    `problems`: (field, what is wrong) pairs, the field as the Secret spells it (`expiresAt`;
    `name` and `namespace` for the Secret's own)."""

    def __init__(self, name: str, problems: Iterable[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            f"API-key Secret {name}: " + "; ".join(f"{f}: {m}" for f, m in self.problems)
        )


def from_secret(name: str, data: Mapping[str, str]) -> ApiKey:
    """Validate one Secret's (decoded) data."""
    try:
        return ApiKey(name, KeySpec.model_validate(dict(data)))
    except ValidationError as exc:
        raise InvalidKey(
            name,
            ((".".join(str(p) for p in e["loc"]) or "data", e["msg"]) for e in exc.errors()),
        ) from None


NAME_RULE = (
    "must be a DNS-1123 subdomain: at most 253 lower-case letters, digits, '-' and '.', "
    "starting and ending with a letter or digit (such as search-app)"
)
NAMESPACE_RULE = (
    "must be a DNS-1123 label: at most 63 lower-case letters, digits and '-', starting and "
    "ending with a letter or digit (such as team-a)"
)


def _is_name(text: str) -> bool:
    return len(text) <= 253 and re.fullmatch(fields.DNS_SUBDOMAIN_PATTERN, text) is not None


def _is_namespace(text: str) -> bool:
    return len(text) <= 63 and re.fullmatch(fields.DNS_LABEL_PATTERN, text) is not None


def minted(name: str, data: Mapping[str, str], *, namespace: str, now_utc: datetime) -> ApiKey:
    """A key about to be minted (`mlxfleet-gateway new-key`): what `from_secret` checks, and
    what a Secret that the API server takes and that can be used needs: its name and namespace
    are Kubernetes names, every namespace it may use is one (or `*`), and it has not expired
    yet. The watch stays with `from_secret`: a Secret written before keeps working."""
    problems: list[tuple[str, str]] = []
    if not _is_name(name):
        problems.append(("name", f"{name!r} {NAME_RULE}"))
    if not _is_namespace(namespace):
        problems.append(("namespace", f"{namespace!r} {NAMESPACE_RULE}"))
    try:
        key: ApiKey | None = from_secret(name, data)
    except InvalidKey as exc:
        key = None
        problems.extend(exc.problems)
    if key is not None:
        bad = [ns for ns in key.spec.namespaces if ns != "*" and not _is_namespace(ns)]
        if bad:
            listed = ", ".join(repr(ns) for ns in bad)
            problems.append(("namespaces", f"{listed}: each namespace {NAMESPACE_RULE}, or *"))
        expires = key.spec.expires_at
        if expires is not None and expires <= now_utc:
            passed = f"{expires.isoformat(timespec='seconds')} has passed"
            now = now_utc.isoformat(timespec="seconds")
            problems.append(("expiresAt", f"{passed} (now {now}): must be in the future"))
    if problems or key is None:
        raise InvalidKey(name, problems)
    return key


class KeyRing:
    """Keys by hash; built anew whenever the watched Secrets change."""

    def __init__(self, keys: Iterable[ApiKey] = ()) -> None:
        self.by_hash = {k.spec.key_hash: k for k in keys}

    def __len__(self) -> int:
        return len(self.by_hash)

    def authenticate(self, token: str | None, *, now_utc: datetime) -> ApiKey:
        """The key behind a bearer token; 401 when missing, unknown or expired."""
        if not token:
            raise errors.unauthorized("missing API key: send Authorization: Bearer <key>")
        found = self.by_hash.get(hash_key(token))
        if found is None:
            raise errors.unauthorized()
        if found.expired(now_utc):
            raise errors.GatewayError(
                401, "this API key has expired", type_="authentication_error", code="key_expired"
            )
        return found
