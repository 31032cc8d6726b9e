"""Each node's agent credentials (URL, token, CA) as read from the Secrets its InferenceNode
names, checked and kept for a while.

The token and CA come from `spec.agent.tokenSecretRef` and `spec.agent.caSecretRef` through
`kube.Kube.agent_credential`, which refuses a Secret not labelled as agent credentials
(docs/operator.md, "Trust model"); a CA key that holds no PEM certificate is refused here, so a
node's status names the Secret instead of a TLS error in every poll. Both are typed errors a
person must fix (`CredentialsError` and its kinds), which the fleet maps to a poll's error.
The Secrets are read at most every `ttl` seconds per node (not on every poll: one GET per node
per poll was the top API request at 500 nodes), again at once when the node's references
change, and when the caller drops the node's entry (`forget`: the agent answered 401/403, a
rotated token, or the node is gone). Memory only.
May import: the standard library, `agent` (the credentials value, the CA check), `kube`, `api`.
Called by: `fleet.Fleet` (its agent clients and the poll's 401/403 retry).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from mlxfleet_operator.adapters import agent, kube
from mlxfleet_operator.api import inferencenode as inode

TTL_S = 600.0  # a rotated token is read at once on the agent's 401/403 anyway


class CredentialsError(Exception):
    """The token (or CA) Secret of a node cannot be read: a person must fix the reference."""


class CredentialsNotAllowed(CredentialsError):
    """The token (or CA) Secret is not labelled as agent credentials: it is never used."""


class CredentialsInvalid(CredentialsError):
    """The CA Secret's key holds no PEM certificate the operator can trust."""


@dataclass(frozen=True)
class _Cached:
    refs: tuple[object, ...]  # the node's URL and Secret references the credentials came from
    credentials: agent.Credentials
    read_at: float


class Cache:
    """Every node's last read credentials, by node name."""

    def __init__(
        self,
        kube_: kube.Kube,
        *,
        ttl: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube_
        self._ttl = ttl
        self._clock = clock
        self._cached: dict[str, _Cached] = {}

    async def get(self, node: inode.InferenceNode) -> agent.Credentials:
        """The node's URL, token and CA; the Secrets are read again only when the node's
        references changed, `ttl` passed, or `forget` was called."""
        name, spec = node.metadata.name or "", node.spec.agent
        refs = (spec.url, spec.token_secret_ref, spec.ca_secret_ref)
        cached = self._cached.get(name)
        if (
            cached is not None
            and cached.refs == refs
            and self._clock() - cached.read_at < self._ttl
        ):
            return cached.credentials
        creds = await self._read(node)
        self._cached[name] = _Cached(refs, creds, self._clock())
        return creds

    def forget(self, name: str) -> bool:
        """Drop the node's cached credentials (True: there were some)."""
        return self._cached.pop(name, None) is not None

    async def _read(self, node: inode.InferenceNode) -> agent.Credentials:
        spec = node.spec.agent
        ref = spec.token_secret_ref
        try:
            token = await self.kube.agent_credential(
                namespace=ref.namespace, name=ref.name, key=ref.key
            )
            ca = None
            if spec.ca_secret_ref is not None:
                c = spec.ca_secret_ref
                ca = await self.kube.agent_credential(namespace=c.namespace, name=c.name, key=c.key)
        except kube.SecretNotAllowed as exc:
            raise CredentialsNotAllowed(str(exc)) from exc
        except kube.SecretMissing as exc:
            raise CredentialsError(str(exc)) from exc
        bad = spec.ca_secret_ref
        if (
            ca is not None
            and bad is not None
            and (problem := agent.untrusted(ca.value)) is not None
        ):
            raise CredentialsInvalid(
                f"key {bad.key!r} of Secret {bad.namespace}/{bad.name} (spec.agent.caSecretRef) "
                f"is not a PEM CA certificate: {problem}"
            )
        return agent.Credentials(
            url=spec.url,
            token=token.value,
            ca_pem=ca.value if ca is not None else None,
            token_expires_at=token.expires_at,
        )
