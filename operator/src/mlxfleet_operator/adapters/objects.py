"""What this operator process remembers about each object between its handler runs: one typed
record (`ObjectState`) per object uid, in one registry (`Objects`, `Runtime.objects`), dropped
whole by `Objects.forget(uid)` when the object goes (its kind's delete handler, through
`handlers.guard.guarded(..., last=True)`). Nothing here is cleared wholesale: an object's record
lives exactly as long as the object does for this process.

Memory only: a new leader starts with none of it (every field is a shortcut or a once-only
announcement, never a decision's only input: status holds what must survive).
Not here: the fleet view of nodes and slots (`adapters.fleet`: per node, forgotten with the
node) and the wake-ups told per deployment name (`Runtime.woken`: a ModelDemand names a
deployment, not its uid).

May import: the standard library, `core` (the value types it keeps).
Called by: `adapters.runtime` (owns the registry), `adapters.statuspatch` (what it last sent),
handlers (their object's record).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from mlxfleet_operator.core.deployment import autoscale
from mlxfleet_operator.core.fleet import facts
from mlxfleet_operator.core.kit import heartbeat


class Sent(NamedTuple):
    """The status this process last put into kopf's patch of the object (`statuspatch`)."""

    version: object  # the object's resourceVersion it was sent against
    patch: dict[str, Any]
    when: float  # monotonic


@dataclass(frozen=True)
class GroupWatch:
    """What the sharded group watch (`handlers.sharded.watch_groups`, a kopf daemon) checks
    between reconciles: the ready groups' ranks (group id -> nodes, rank 0 first), the
    endpoints the last reconcile published, and what it knew of the nodes then."""

    body: Mapping[str, object]  # the deployment as that reconcile saw it (owner of the slices)
    watched: Mapping[str, Sequence[str]]
    endpoints: Sequence[tuple[str, str, bool]]
    facts: Mapping[str, facts.NodeFacts]
    slot: str


@dataclass
class ObjectState:
    """One object's memory in this process (see the module). Fields by the kinds that use them."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one handler run at a time
    announced: dict[str, str] = field(default_factory=dict)  # topic -> what was told last
    settled: tuple[object, float] | None = None  # inputs of the last full run, and when
    sent: Sent | None = None  # the last status handed to kopf
    # ModelDeployment
    handled: object | None = None  # what of the object its event handler last ran for
    waiting: int | None = None  # footprint that found no room at the last reconcile
    scale: autoscale.Scale | None = None  # the autoscaler's last decision
    scale_told: object | None = None  # the decision whose Event was posted
    groups: GroupWatch | None = None  # sharded: what the group watch checks (None: nothing)
    withdrawn: set[str] = field(default_factory=set)  # group ids the watch took out
    # InferenceNode
    health: heartbeat.Health | None = None  # the heartbeat's debounced view
    heartbeat_written: datetime | None = None  # the heartbeat time this process last wrote


class Objects:
    """The registry: `of(uid)` makes an object's record on first use, `forget(uid)` drops it."""

    def __init__(self) -> None:
        self._by_uid: dict[str, ObjectState] = {}

    def of(self, uid: str) -> ObjectState:
        found = self._by_uid.get(uid)
        if found is None:
            found = self._by_uid[uid] = ObjectState()
        return found

    def get(self, uid: str) -> ObjectState | None:
        """The record if the object has one (never makes one)."""
        return self._by_uid.get(uid)

    def forget(self, uid: str) -> None:
        """The object is gone: everything this process kept about it goes too."""
        self._by_uid.pop(uid, None)

    def __len__(self) -> int:
        return len(self._by_uid)

    def __contains__(self, uid: object) -> bool:
        return uid in self._by_uid

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._by_uid))
