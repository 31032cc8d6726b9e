"""Post core's `events.Event` values as Kubernetes Events on the object being handled (kopf's
event poster: batched, never blocking the handler).

May import: kopf, `core.events`. Called by: handlers.
"""

from __future__ import annotations

import kopf

from mlxfleet_operator.core import events


def post(body: kopf.Body, event: events.Event | None) -> None:
    """Post `event` (None: nothing to say) on `body`."""
    if event is not None:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
