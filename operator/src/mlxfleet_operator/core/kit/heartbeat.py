"""Node heartbeat debounce (pure): N consecutive failed polls make a node NotReady, one success
makes it Ready again. One slow answer (a Mac waking from sleep) never flips it.

May import: the standard library. Called by: the InferenceNode timer handler, which keeps
the `Health` between polls in kopf's per-object memo, seeded from the node's status after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime


@dataclass(frozen=True)
class Health:
    ready: bool | None = None  # None: never decided (new node, or operator just started)
    misses: int = 0
    last_heartbeat: datetime | None = None
    last_error: str | None = None


@dataclass(frozen=True)
class Observation:
    health: Health
    flipped: bool  # Ready changed (an Event is due)


def observe(
    health: Health, *, ok: bool, now: datetime, threshold: int, error: str | None = None
) -> Observation:
    """Fold one poll result into the node's health."""
    if threshold < 1:
        raise ValueError("threshold must be at least 1")
    if ok:
        new = Health(ready=True, misses=0, last_heartbeat=now, last_error=None)
    else:
        misses = health.misses + 1
        if misses >= threshold:
            ready: bool | None = False
        elif health.ready is None and health.last_heartbeat is None:
            ready = None  # not yet known: wait for the threshold before judging a new node
        else:
            ready = health.ready
        new = replace(health, ready=ready, misses=misses, last_error=error)
    return Observation(health=new, flipped=new.ready is not None and new.ready != health.ready)
