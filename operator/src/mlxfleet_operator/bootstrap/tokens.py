"""Bootstrap tokens as kubeadm makes them (pure): `<id>.<secret>`, a Secret
`bootstrap-token-<id>` of type bootstrap.kubernetes.io/token in kube-system, authenticated by
kube-apiserver (`--enable-bootstrap-token-auth`) as user `system:bootstrap:<id>` in the groups
`system:bootstrappers` and the token's extra group (`system:bootstrappers:mlxfleet`), whose RBAC
and admission policy (charts/mlxfleet/templates/join) allow exactly what join needs.

Expiry: kube-apiserver refuses a token after its `expiration` itself; the tokens-cleaner of
kube-controller-manager deletes expired Secrets later. Where no controller-manager runs (the dev
control plane), `mlxfleet token list` shows them as expired and `mlxfleet token delete` or
`--prune` removes them.
May import: the standard library. Called by: bootstrap.cli, tests.
"""

from __future__ import annotations

import re
import secrets
import string
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

NAMESPACE = "kube-system"
SECRET_TYPE = "bootstrap.kubernetes.io/token"  # noqa: S105 - a type name, not a secret
SECRET_PREFIX = "bootstrap-token-"  # noqa: S105
DEFAULT_GROUP = "system:bootstrappers:mlxfleet"
DEFAULT_TTL = timedelta(hours=24)
MAX_TTL = timedelta(days=30)
MIN_TTL = timedelta(minutes=1)
TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
GROUP = re.compile(r"^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$")
_TTL = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_ALPHABET = string.ascii_lowercase + string.digits


class TokenError(ValueError):
    """Bad input for a token; the message names the flag and what is allowed."""


@dataclass(frozen=True)
class Token:
    id: str
    secret: str

    def __str__(self) -> str:
        return f"{self.id}.{self.secret}"

    @property
    def secret_name(self) -> str:
        return SECRET_PREFIX + self.id


def generate() -> Token:
    return Token(
        id="".join(secrets.choice(_ALPHABET) for _ in range(6)),
        secret="".join(secrets.choice(_ALPHABET) for _ in range(16)),
    )


def parse(text: str, *, flag: str = "--token") -> Token:
    found = TOKEN.fullmatch(text.strip())
    if found is None:
        raise TokenError(
            f"{flag}: not a bootstrap token; expected <6 of [a-z0-9]>.<16 of [a-z0-9]> "
            "as `mlxfleet token create` prints it"
        )
    return Token(found[1], found[2])


def parse_ttl(text: str, *, flag: str = "--ttl") -> timedelta:
    """`90s`, `30m`, `24h`, `7d` -> timedelta, between 1 minute and 30 days."""
    found = _TTL.fullmatch(text.strip())
    if found is None:
        raise TokenError(f"{flag}: {text!r} is not a duration; use a number and s, m, h or d")
    ttl = timedelta(**{_UNITS[found[2]]: int(found[1])})
    if not MIN_TTL <= ttl <= MAX_TTL:
        raise TokenError(f"{flag}: {text!r} is out of range; allowed: 1m to 30d")
    return ttl


def check_group(group: str, *, flag: str = "--group") -> str:
    if GROUP.fullmatch(group) is None:
        raise TokenError(
            f"{flag}: {group!r} is not allowed; kube-apiserver accepts only "
            "system:bootstrappers:<lowercase letters, digits, ':' and '-'>"
        )
    return group


def check_namespace(name: str, *, flag: str) -> str:
    if _NAMESPACE.fullmatch(name) is None:
        raise TokenError(
            f"{flag}: {name!r} is not a namespace name (a DNS label of at most 63 lowercase "
            "letters, digits and '-')"
        )
    return name


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def secret(
    token: Token, *, now: datetime, ttl: timedelta, group: str, description: str
) -> dict[str, Any]:
    """The Secret kube-apiserver's bootstrap authenticator reads."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": token.secret_name,
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "mlxfleet"},
        },
        "type": SECRET_TYPE,
        "stringData": {
            "token-id": token.id,
            "token-secret": token.secret,
            "expiration": rfc3339(now + ttl),
            "usage-bootstrap-authentication": "true",
            "auth-extra-groups": group,
            "description": description,
        },
    }


@dataclass(frozen=True)
class Listed:
    id: str
    expiration: datetime | None
    groups: str
    description: str

    def expired(self, now: datetime) -> bool:
        return self.expiration is not None and self.expiration <= now


def listed(data: dict[str, str]) -> Listed:
    """A token Secret's decoded data as `mlxfleet token list` shows it (never the secret)."""
    raw = data.get("expiration")
    try:
        expiration = datetime.fromisoformat(raw.replace("Z", "+00:00")) if raw else None
    except ValueError:
        expiration = None
    return Listed(
        id=data.get("token-id", "?"),
        expiration=expiration,
        groups=data.get("auth-extra-groups", ""),
        description=data.get("description", ""),
    )
