"""Whether a ModelDeployment's converge tick may be skipped, and on what it depends (pure): the
decision the converge-skip check takes before every timer reconcile, over typed readings of the
deployment, its plans, the fleet and the node index; the handler gathers the readings and keys
the skip on the inputs the answer names (`Reads`).

A deployment whose replicas are all placed (as many nodes hold its slot as it wants, no SwapPlan
open, not sharded) reads only those nodes. One whose last decision found no room for a replica
reads those nodes and whatever could give it room. Any other one may place on any node, so any
change in the fleet counts. Never skipped: while a node it uses (placed, or named by its status)
is not Ready (failover is timed), while a preemption for or against it is under way, while its
status names a preemption to resume, and a sharded one while any known node is not Ready.
A deployment waiting for room decides again once it is due to turn Stalled (`stall_due`).
May import: the standard library. Called by: the ModelDeployment handler (`handlers.deployments`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


class Reads(StrEnum):
    """What a reconcile reads, so what may change its outcome."""

    ALWAYS = "Always"  # never skipped
    PLACED = "Placed"  # settled: only the nodes that hold its replicas
    ROOM = "Room"  # waiting for room: its nodes, and what could give it room
    FLEET = "Fleet"  # any change in the fleet


@dataclass(frozen=True)
class Readings:
    """What the check knows of one deployment, typed (the handler reads it off the body, the
    indexes and the fleet view)."""

    sharded: bool  # spec.sharding is set
    plans_finished: bool  # every SwapPlan of the deployment is in a terminal phase
    settles_at: int  # replicas placed for it to count as settled
    placed: Collection[str]  # nodes that hold its slot (listed or reserved)
    listed: Sequence[str]  # nodes its status.placements names
    not_ready: Collection[str]  # nodes whose Ready condition is not True
    known: Collection[str]  # InferenceNodes in the index (a deleted one is not)
    preempting: bool  # a nomination for its slot, or one that evicts a replica of it
    preemption_in_status: bool  # status.preempting or status.preemptedBy is set
    waiting: bool  # its last decision found no room for a replica


def settled(r: Readings) -> bool:
    """Every replica placed, no plan open, not sharded."""
    return not r.sharded and r.plans_finished and len(r.placed) >= r.settles_at


def reads(r: Readings) -> Reads:
    """What a reconcile of the deployment depends on (`Reads.ALWAYS`: never skip it)."""
    if any(n in r.not_ready and n in r.known for n in (*r.placed, *r.listed)):
        return Reads.ALWAYS  # failover is timed: never skipped while a node it uses is not Ready
    if r.preempting:
        return Reads.ALWAYS  # a preemption under way: its nodes free on their agents' time
    done = settled(r)
    if not done and r.preemption_in_status:
        return Reads.ALWAYS  # a nomination to resume after a restart, or a back-off that ends
    if done:
        return Reads.PLACED
    if r.sharded and any(n in r.known for n in r.not_ready):
        return Reads.ALWAYS
    if r.waiting and not r.sharded:
        return Reads.ROOM
    return Reads.FLEET


def stall_due(not_ready_since: datetime | None, *, now: datetime, after: timedelta) -> bool:
    """Its Ready condition has been False (since `not_ready_since`; None: it is not False) for
    `after`: a deployment waiting for room turns Stalled then (`status.verdict`), so that is an
    input of its skip key."""
    return not_ready_since is not None and now - not_ready_since >= after
