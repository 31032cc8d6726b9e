"""Per-node credentials (pure): no data-plane or peer secret is shared by the fleet's Macs.

The gateway and the operator hold the fleet key (`--fleet-key-file`: one key a line, the first
current, the others accepted while a rotation runs; it never leaves the cluster). From it each
node's own credentials are derived by the node's name (HMAC-SHA256, hex):

- data-plane key of node N = HMAC(fleet key, "mlxfleet/data-plane/v1" NUL N): what the gateway
  sends N's data plane as `Authorization: Bearer ...`, and what N's data plane accepts;
- peer key of node N = HMAC(fleet key, "mlxfleet/peer/v1" NUL N): N keeps it to check the fetch
  tokens other nodes show its peer file server; it is never sent to another node;
- fetch token of node A for model M on node B = "A/" + HMAC(B's peer key, "mlxfleet/peer-fetch/v1"
  NUL A NUL M): the operator puts it in A's prefetch request (`Peer.token`); B checks it with its
  own peer key, so it opens B's copy of M for A and nothing else.

The operator sends each approved node its two keys (`NodeCredentials`, PUT /v1/credentials) and
sees from the agent's state (`AgentState.credentials`, a `fingerprint`) whether it holds them. A
node learns its own keys and the fetch tokens of the models it is told to copy: nothing that
opens another node's data plane, nor another model on a peer.
May import: the standard library and pydantic only (pure). Called by: the agent (its credential
store, data plane, peer server), the operator (heartbeat, prefetch), the gateway (per-node keys).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Sequence
from typing import Annotated

from pydantic import Field

from mlxfleet_agent.contract.base import StrictWire, Wire

FLEET_KEY_MIN = 32
"""Characters a fleet key has at least (`openssl rand -hex 32` gives 64)."""
FLEET_KEYS_MAX = 4
"""Keys a fleet-key file holds at most (the current one and those a rotation still accepts)."""
KEYS_MAX = 4
"""Keys of one kind a node holds at most (one per fleet key)."""
KEY_PATTERN = r"^[0-9a-f]{64}$"
_FLEET_KEY = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no spaces
_DATA_PLANE = b"mlxfleet/data-plane/v1\x00"
_PEER = b"mlxfleet/peer/v1\x00"
_FETCH = b"mlxfleet/peer-fetch/v1\x00"
_FINGERPRINT = b"mlxfleet/credentials/v1\x00"
FETCH_TOKEN = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)/([0-9a-f]{64})$")
"""`<fetcher node name>/<64 hex>`: a node name has no '/'."""

Key = Annotated[str, Field(pattern=KEY_PATTERN, description="64 lowercase hex digits")]


class NodeCredentials(StrictWire):
    """PUT /v1/credentials: this node's own keys, derived from each fleet key (first: current)."""

    data_plane: list[Key] = Field(
        repr=False,
        min_length=1,
        max_length=KEYS_MAX,
        description="keys the data plane accepts (besides --data-api-keys-file); the gateway "
        "sends the first",
    )
    peer: list[Key] = Field(
        repr=False,
        default_factory=list,
        max_length=KEYS_MAX,
        description="keys the peer file server checks fetch tokens with (empty: it serves no "
        "node by token)",
    )


class CredentialsStatus(Wire):
    """The answer of PUT /v1/credentials: what `AgentState.credentials` now says."""

    fingerprint: str


def parse_fleet_keys(text: str, *, flag: str) -> tuple[str, ...]:
    """A fleet-key file's keys (one a line; blank lines and lines starting with # skipped), the
    current one first; ValueError naming `flag` and what is allowed."""
    keys = tuple(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )
    if not keys:
        raise ValueError(
            f"{flag}: no key in the file (one key a line, such as the output of "
            "`openssl rand -hex 32`)"
        )
    if len(keys) > FLEET_KEYS_MAX:
        raise ValueError(
            f"{flag}: {len(keys)} keys; at most {FLEET_KEYS_MAX} (the current one first, then "
            "the ones a rotation still accepts)"
        )
    for n, key in enumerate(keys, 1):
        if len(key) < FLEET_KEY_MIN or not _FLEET_KEY.fullmatch(key):
            raise ValueError(
                f"{flag}: key {n} is not a fleet key: it needs at least {FLEET_KEY_MIN} printable "
                "ASCII characters without spaces (`openssl rand -hex 32`)"
            )
    return keys


def _mac(key: bytes, *parts: bytes) -> str:
    return hmac.new(key, b"".join(parts), hashlib.sha256).hexdigest()


def data_plane_key(fleet_key: str, node: str) -> str:
    """The key node `node`'s data plane accepts, derived from one fleet key."""
    return _mac(fleet_key.encode(), _DATA_PLANE, node.encode())


def peer_key(fleet_key: str, node: str) -> str:
    """Node `node`'s own peer key (it checks fetch tokens with it), from one fleet key."""
    return _mac(fleet_key.encode(), _PEER, node.encode())


def for_node(fleet_keys: Sequence[str], node: str) -> NodeCredentials:
    """What the operator sends node `node`: its keys from each fleet key, the current first."""
    return NodeCredentials(
        data_plane=[data_plane_key(k, node) for k in fleet_keys],
        peer=[peer_key(k, node) for k in fleet_keys],
    )


def fingerprint(creds: NodeCredentials) -> str:
    """A short digest of a node's keys (safe to show: the keys are 256-bit HMACs)."""
    text = "\n".join([*creds.data_plane, "", *creds.peer]).encode()
    return hashlib.sha256(_FINGERPRINT + text).hexdigest()[:16]


def fetch_token(server_peer_key: str, *, fetcher: str, model_id: str) -> str:
    """What node `fetcher` shows the node whose peer key is `server_peer_key` to read model
    `model_id` from it."""
    mac = _mac(server_peer_key.encode(), _FETCH, fetcher.encode(), b"\x00", model_id.encode())
    return f"{fetcher}/{mac}"


def fetcher_of(token: str, *, peer_keys: Iterable[str], model_id: str) -> str | None:
    """The node a fetch token was made for, when one of `peer_keys` (this node's) made it for
    `model_id`; None otherwise (constant-time comparison)."""
    found = FETCH_TOKEN.fullmatch(token)
    if found is None:
        return None
    fetcher = found[1]
    ok = False
    for key in peer_keys:
        ok |= hmac.compare_digest(fetch_token(key, fetcher=fetcher, model_id=model_id), token)
    return fetcher if ok else None


def model_id(source: str, revision: str | None) -> str:
    """The stable id of a model (source and revision): the agent's cache id, the peer file
    server's path, what a fetch token is for."""
    return hashlib.sha256(f"{source}\n{revision or ''}".encode()).hexdigest()[:16]
