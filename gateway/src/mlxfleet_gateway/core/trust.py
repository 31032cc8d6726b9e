"""Which nodes the gateway sends requests to, and the credential it shows each one (pure).

Only approved InferenceNodes (`spec.approved` not false: declared by an admin, or approved by a
person after joining): a replica on any other node, or on a node the gateway has not seen, is
never a candidate, whatever a ModelDeployment's status says. With the fleet key, each node's own
data-plane key (`contract.credentials.data_plane_key`) is derived once, when the node first
appears, and its whole `Authorization` value kept: a request adds a dict lookup, never an HMAC,
and nothing per streamed event. A node's key opens that node's data plane only.
May import: the standard library, mlxfleet_operator.api, mlxfleet_agent.contract.
Called by: view (on every InferenceNode snapshot), catalog (replicas), the proxy (the header).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mlxfleet_agent import contract
from mlxfleet_operator.api import inferencenode as inode


def approved(nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The names of the approved nodes among raw InferenceNode objects."""
    out = set()
    for obj in nodes:
        name = (obj.get("metadata") or {}).get("name")
        if name and inode.approved((obj.get("spec") or {}).get("approved")):
            out.add(str(name))
    return frozenset(out)


class Credentials:
    """Each approved node's `Authorization` header value (b"": no fleet key, send none)."""

    def __init__(self, fleet_key: str | None) -> None:
        self._fleet_key = fleet_key
        self.names: frozenset[str] = frozenset()
        self.headers: dict[str, bytes] = {}

    def update(self, names: frozenset[str]) -> bool:
        """Know exactly these approved nodes; True when the set changed."""
        if names == self.names:
            return False
        key = self._fleet_key
        self.headers = {n: self.headers.get(n) or self._header(key, n) for n in names}
        self.names = names
        return True

    @staticmethod
    def _header(key: str | None, node: str) -> bytes:
        if key is None:
            return b""
        return b"Bearer " + contract.credentials.data_plane_key(key, node).encode()
