"""Post core's `events.Event` values as Kubernetes Events on the object being handled (kopf's
event poster: batched, never blocking the handler).

`announce_ready`: an Event whenever an object's Ready status or reason changes (ModelDeployments
said nothing in `kubectl describe` before).
May import: kopf, `core.kit.events`, `core.kit.conditions`, `adapters.runtime`. Called by: handlers.
"""

from __future__ import annotations

from collections.abc import Sequence

import kopf

from mlxfleet_operator.adapters import runtime
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.core.kit import conditions, events


def post(body: kopf.Body, event: events.Event | None) -> None:
    """Post `event` (None: nothing to say) on `body`."""
    if event is not None:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)


def announce_ready(
    rt: runtime.Runtime,
    body: kopf.Body,
    before: Sequence[cond.Condition],
    after: Sequence[cond.Condition],
) -> None:
    """An Event when the object's Ready status or reason changes (`conditions.ready_changed`),
    once per change: kopf's body may lag this process's own status writes."""
    event = conditions.ready_changed(before, after)
    if event is not None and rt.first_time(str(body.metadata.uid), event.reason, about="ready"):
        post(body, event)
