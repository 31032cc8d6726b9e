"""Successive answers of one agent, held as one tree where they agree (`share`).

The operator keeps each node's last answer (`GET /v1/state`) and, until a decision reads the
node again, the facts made from the answer before it: two parsed trees per node, most of them
equal (every slot's spec with its server options, engine, swap policy and model shape; the
cached models; the engines; the host checks). At 500 nodes x 1,000 deployments those duplicates
were 16 MB of the operator's memory, and each poll made the whole tree again. `share` makes the
new answer refer to the old answer's object wherever the two are equal, so only what changed
(counters, clocks, free memory, a slot's phase) is held twice.

The answers are read, never changed in place, by every reader of the fleet view: sharing an
object between two of them changes nothing any reader sees.
May import: the agent `contract` and the standard library only (pure).
Called by: `adapters.fleetview` (`FleetView.record`).
"""

from __future__ import annotations

from typing import TypeVar

from mlxfleet_agent import contract

_T = TypeVar("_T")


def share(old: contract.AgentState | None, new: contract.AgentState) -> contract.AgentState:
    """`new`, with each part equal to `old`'s replaced by `old`'s object (in place; returned)."""
    if old is None:
        return new
    before = {s.name: s for s in old.slots}
    for slot in new.slots:
        was = before.get(slot.name)
        if was is not None:
            slot.spec = _same(was.spec, slot.spec)
            slot.download = _same(was.download, slot.download)
    cached = {(m.id, m.source, m.revision): m for m in old.cached_models}
    new.cached_models = [
        _cached(cached.get((m.id, m.source, m.revision)), m) for m in new.cached_models
    ]
    new.engines = _same(old.engines, new.engines)
    new.transfers = _same(old.transfers, new.transfers)
    new.doctor = _same(old.doctor, new.doctor)
    new.thermal = _same(old.thermal, new.thermal)
    new.disk = _same(old.disk, new.disk)
    new.memory = _same(old.memory, new.memory)
    return new


def _same(old: _T, new: _T) -> _T:
    return old if old is not None and old == new else new


def _cached(old: contract.CachedModel | None, new: contract.CachedModel) -> contract.CachedModel:
    """The cached model as it was, or the new one with the old model shape (its use and last
    use change with every request; the shape only with the weights)."""
    if old is None:
        return new
    if old == new:
        return old
    new.shape = _same(old.shape, new.shape)
    return new
