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

`from_secret` validates one Secret (errors name the field); `KeyRing.authenticate` finds a key by
its hash (a SHA-256 lookup: keys are long random strings, so a slow hash adds nothing).
May import: the standard library, pydantic, errors. Called by: the watches, the proxy, the CLI.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from mlxfleet_gateway.core import errors

SECRET_TYPE = "mlxfleet.io/api-key"  # noqa: S105 - a Secret type, not a secret
KEY_PREFIX = "mfk-"
HASH_PATTERN = r"^[0-9a-f]{64}$"
ANONYMOUS = "anonymous"


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

    _split = field_validator("namespaces", "models", mode="before")(_csv)

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


ANONYMOUS_KEY = ApiKey(
    ANONYMOUS, KeySpec(key_hash="0" * 64, namespaces=("*",), owner=None, team=None)
)


class InvalidKey(ValueError):
    """An API-key Secret that cannot be used; the message names the Secret and the field."""


def from_secret(name: str, data: Mapping[str, str]) -> ApiKey:
    """Validate one Secret's (decoded) data."""
    try:
        return ApiKey(name, KeySpec.model_validate(dict(data)))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'data'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidKey(f"API-key Secret {name}: {problems}") from None


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
