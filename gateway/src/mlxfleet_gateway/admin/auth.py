"""Who is calling the console or the admin API, and what they may do.

A credential is a Kubernetes bearer token (checked with a TokenReview by the gateway's own
identity; the user, groups and extra it names are the principal) or an API key with the `admin`
scope (an API key without it: 403; an unknown key: 401). Rights of a Kubernetes principal are
SubjectAccessReviews for the verb, resource and namespace a page or endpoint needs (`Check`);
an admin key may read everything and manage keys and budgets, but approves nothing and reads no
agent logs or Events (those act with a Kubernetes identity's own rights). Reviews are cached
briefly (`ttl_s`, 10 s; a refused token 1 s), keyed by the token's hash and by the user, so a
console polling every second costs the API server one TokenReview and one SAR per check every
ten seconds, and a revoked token or binding stops working within that.
`--allow-anonymous` plays no part here.
May import: the standard library, core.keys, admin.kubeapi, view.
Called by: console (pages and the admin API).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic, Literal, TypeVar

from mlxfleet_gateway import view
from mlxfleet_gateway.admin import kubeapi
from mlxfleet_gateway.core import keys

TTL_S = 10.0
V = TypeVar("V")
NEGATIVE_TTL_S = 1.0
MAX_CACHED = 4096
KUBE: Literal["kube"] = "kube"
KEY: Literal["key"] = "key"


class Denied(Exception):
    """401 (no or a bad credential) or 403 (a credential without the right); the message says
    which right, never why a token failed beyond what the API server said."""

    def __init__(self, status: int, message: str, *, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def unauthenticated(
    message: str = "send Authorization: Bearer <Kubernetes token or admin API key>, or log in",
) -> Denied:
    return Denied(401, message, code="unauthenticated")


def forbidden(message: str) -> Denied:
    return Denied(403, message, code="forbidden")


@dataclass(frozen=True, slots=True)
class Check:
    """One Kubernetes permission: `verb` on `resource` (of `group`) in `namespace` ("" for
    every namespace or a cluster-scoped resource)."""

    verb: str
    resource: str
    group: str = "mlxfleet.io"
    namespace: str = ""

    def describe(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{self.verb} {what}{where}"


@dataclass(frozen=True, slots=True)
class Principal:
    kind: Literal["kube", "key"]
    name: str  # the Kubernetes user name, or the API key's (Secret's) name
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    token: str | None = field(default=None, repr=False)  # kube: to act with the caller's rights

    @property
    def kube(self) -> bool:
        return self.kind == KUBE


def is_api_key(token: str) -> bool:
    return token.startswith(keys.KEY_PREFIX)


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer ...` header (None: none; "": another scheme)."""
    if header is None:
        return None
    scheme, _, rest = header.partition(" ")
    return rest.strip() if scheme.lower() == "bearer" else ""


class _Cache(Generic[V]):
    def __init__(self, clock: Callable[[], float]) -> None:
        self._items: OrderedDict[object, tuple[float, V]] = OrderedDict()
        self._clock = clock

    def get(self, key: object) -> V | None:
        found = self._items.get(key)
        if found is None:
            return None
        if found[0] <= self._clock():
            del self._items[key]
            return None
        return found[1]

    def put(self, key: object, value: V, ttl_s: float) -> None:
        self._items[key] = (self._clock() + ttl_s, value)
        self._items.move_to_end(key)
        while len(self._items) > MAX_CACHED:
            self._items.popitem(last=False)


class Authenticator:
    def __init__(
        self,
        kube: kubeapi.KubeApi,
        state: view.View,
        *,
        ttl_s: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.view = state
        self.ttl_s = ttl_s
        self._tokens: _Cache[Principal | Denied] = _Cache(clock)
        self._reviews: _Cache[bool] = _Cache(clock)

    # ---- who -----------------------------------------------------------------------------------

    def key_principal(self, key_hash: str) -> Principal:
        """An API key by its hash (a session holds the hash, never the key)."""
        found = self.view.keys.by_hash.get(key_hash)
        if found is None:
            raise unauthenticated("unknown or revoked API key")
        if found.expired(datetime.now(UTC)):
            raise unauthenticated(f"API key {found.name} has expired")
        if not found.admin:
            raise forbidden(
                f"API key {found.name} has no admin scope (its Secret's scopes: admin): it may "
                "call the OpenAI endpoints only"
            )
        return Principal(KEY, found.name)

    async def principal(self, token: str | None) -> Principal:
        """The caller behind a bearer token (Denied 401/403)."""
        if not token:
            raise unauthenticated()
        if is_api_key(token):
            return self.key_principal(keys.hash_key(token))
        digest = hashlib.sha256(token.encode()).digest()
        cached = self._tokens.get(digest)
        if cached is None:
            cached = await self._review(token)
            ttl = self.ttl_s if isinstance(cached, Principal) else NEGATIVE_TTL_S
            self._tokens.put(digest, cached, ttl)
        if isinstance(cached, Denied):
            raise cached
        return cached

    async def _review(self, token: str) -> Principal | Denied:
        reply = await self.kube.call(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        if not reply.ok:  # the gateway may not review tokens: its console RBAC is missing
            return Denied(
                503,
                f"the gateway could not review the token: the API server answered "
                f"{reply.status}: {reply.message}",
                code="kube_error",
            )
        status = reply.body.get("status") or {}
        if not status.get("authenticated"):
            return unauthenticated("the API server does not accept this token")
        user = status.get("user") or {}
        extra = {k: tuple(v or ()) for k, v in (user.get("extra") or {}).items()}
        return Principal(
            KUBE,
            str(user.get("username") or ""),
            groups=tuple(user.get("groups") or ()),
            uid=str(user.get("uid") or ""),
            extra=extra,
            token=token,
        )

    # ---- what ----------------------------------------------------------------------------------

    async def allowed(self, who: Principal, check: Check) -> bool:
        """May `who` do `check`? An admin key: yes; a Kubernetes user: a SubjectAccessReview."""
        if not who.kube:
            return True
        key = (who.name, who.groups, who.uid, check)
        cached = self._reviews.get(key)
        if cached is None:
            cached = await self._access_review(who, check)
            self._reviews.put(key, cached, self.ttl_s)
        return cached

    async def require(self, who: Principal, check: Check) -> None:
        if not await self.allowed(who, check):
            raise forbidden(f"{who.name} may not {check.describe()} (Kubernetes RBAC)")

    async def _access_review(self, who: Principal, check: Check) -> bool:
        attributes = {"verb": check.verb, "group": check.group, "resource": check.resource}
        if check.namespace:
            attributes["namespace"] = check.namespace
        reply = await self.kube.call(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            body={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": who.name,
                    "groups": list(who.groups),
                    "uid": who.uid,
                    "extra": {k: list(v) for k, v in who.extra.items()},
                    "resourceAttributes": attributes,
                },
            },
        )
        if not reply.ok:
            raise Denied(
                503,
                f"the gateway could not review access: the API server answered {reply.status}: "
                f"{reply.message}",
                code="kube_error",
            )
        return bool((reply.body.get("status") or {}).get("allowed"))
