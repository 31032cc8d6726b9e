"""Formation ids and ring addresses of sharded groups (pure).

A formation has an id (`g<index>-<epoch>`); agents run a rank until its id changes, so every
re-forming or swap of a group takes the next epoch. Each rank of a formation listens for its
peers on its node's fabric address (the agent's `--fabric-address`, never the LAN address of its
control API) and a port derived from the deployment's uid, the slot, the formation id and the
rank: stable while the formation lives (every reconcile computes the same), unpredictable
without the object (its uid is random) and different for the next formation.

May import: the standard library, `core.fleet.facts`. Called by: `core.sharded.formation`
and `core.swapplan.groups` (through `core.sharded`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from mlxfleet_operator.core.fleet import facts as dep

# Ring ports stay below every OS's ephemeral range (Linux 32768-60999, macOS 49152-65535): a
# port there may be held by any outgoing connection (or its TIME_WAIT) and the rank's bind
# fails (EADDRINUSE; seen in e2e runs on a busy machine).
PORT_BASE = 20_000
PORT_SPAN = 750  # x 16 ports per group (ranks): 20000-31999


def epoch(group_id: str | None) -> int:
    """The epoch of formation `group_id` (0 for none or an id of another shape)."""
    try:
        return int((group_id or "").rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0


def next_id(index: int, old: str | None) -> str:
    """The id of group `index`'s next formation (`old`: its current id)."""
    return f"g{index}-{epoch(old) + 1}"


def ring_port(slot: str, group_id: str, rank: int, *, salt: str = "") -> int:
    """The port rank `rank` of formation `group_id` listens on for its peers (`salt`: the
    deployment's uid, so nobody without the object can tell the next formation's ports)."""
    digest = hashlib.sha256(f"{salt}/{slot}/{group_id}".encode()).digest()
    return PORT_BASE + (int.from_bytes(digest[:4], "big") % PORT_SPAN) * 16 + rank


def ring_host(fact: dep.NodeFacts) -> str:
    """The address other ranks reach this node on: its fabric address (placement leaves out
    nodes without one; the agent URL's host only for an agent too old to report it)."""
    host = fact.fabric_address or urlsplit(fact.node.spec.agent.url).hostname or "localhost"
    return f"[{host}]" if ":" in host else host


def hosts(
    facts: Mapping[str, dep.NodeFacts],
    nodes: Sequence[str],
    *,
    slot: str,
    group_id: str,
    salt: str = "",
) -> tuple[str, ...]:
    """The ring address of each rank of formation `group_id` on `nodes` (by rank)."""
    return tuple(
        f"{ring_host(facts[n])}:{ring_port(slot, group_id, rank, salt=salt)}"
        for rank, n in enumerate(nodes)
    )
