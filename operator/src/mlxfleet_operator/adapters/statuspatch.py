"""The status a handler writes, put into kopf's patch of the object being handled.

Status of the object a handler is working on is written by kopf's own patch (not by a request of
ours): `write_status` puts the merge patch (`status_patch`) into it when something changed. It
does not hand kopf the same status again while kopf's body is still the version it was computed
against (only after `STATUS_RESEND_S`, in case kopf's patch was lost), nor conditions whose only
change is a transition time stamped because the body lags (`_kept_transitions`). What was last
sent is kept in the object's record (`objects.ObjectState.sent`), forgotten with the object.
May import: pydantic, the standard library, `adapters.objects`. Called by: handlers (every one
that writes status).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from pydantic import BaseModel

from mlxfleet_operator.adapters import objects

JsonDict = dict[str, Any]


def status_patch(status: BaseModel, current: Mapping[str, Any] | None = None) -> JsonDict | None:
    """The merge patch that makes `.status` equal `status`: nested nulls left out (the API server
    drops them, and lists are replaced whole), top-level fields that became unset set to null.
    None when nothing would change (no write, no watch event)."""
    body = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    for name, info in type(status).model_fields.items():
        key = info.alias or name
        if key not in body and current is not None and key in current:
            body[key] = None
    if current is not None and {k: v for k, v in body.items() if v is not None} == dict(current):
        return None
    return body


# The same status against the same body version is sent again only after this: kopf's patch may
# have failed (the API server away), and then the body never moves. Not shorter: under load kopf's
# body lags our writes by more than 30 s, and a time-based resend was then 98 % of the steady
# writes at 500 x 1,000 (779 ModelDeployment status PATCHes a minute that changed nothing).
STATUS_RESEND_S = 600.0


def write_status(
    patch: MutableMapping[str, Any],
    status: BaseModel,
    body: Mapping[str, Any],
    kept: objects.Objects,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Put the status into kopf's patch of the object being handled (if anything changed).

    Not when this process already sent exactly this status against the very same version of
    the object (until `STATUS_RESEND_S`, for a lost patch): kopf's body lags our own writes when the
    operator is busy, so every run would compare against the old status and send the same
    patch again (at 500 x 1,000: 47 InferenceNode and 54 ModelDeployment status PATCHes a
    second with nothing changing, each one a write and a watch event to process). What was
    sent is kept in the object's record in `kept` (the runtime's `objects`)."""
    shown = body.get("status") or {}
    meta = body.get("metadata") or {}
    uid, version, now = str(meta.get("uid") or ""), meta.get("resourceVersion"), clock()
    record = kept.of(uid) if uid else None
    last = record.sent if record is not None else None
    found = status_patch(status, shown)
    if found is not None and last is not None:
        found = _kept_transitions(found, last.patch, shown)
        if {k: v for k, v in found.items() if v is not None} == dict(shown):
            return
    if found is None:
        return
    if (
        uid
        and last is not None
        and (last.version, last.patch) == (version, found)
        and now - last.when < STATUS_RESEND_S
    ):
        return
    patch["status"] = found
    if record is not None:
        record.sent = objects.Sent(version, found, now)


def _kept_transitions(found: JsonDict, sent: JsonDict, shown: Mapping[str, Any]) -> JsonDict:
    """`found` with each condition's lastTransitionTime as this process last sent it, where the
    condition has the status it was sent with and only kopf's lagging body (`shown`: that type
    missing or with another status) made it look like a transition. Else a run on a body from
    before our last write stamps `now` on every condition again: at 500 x 1,000, 55 status
    PATCHes a second that changed nothing but the times of Ready, Reconciling and Stalled."""
    new, before = found.get("conditions"), sent.get("conditions")
    if not isinstance(new, list) or not isinstance(before, list):
        return found
    was = {c.get("type"): c for c in before if isinstance(c, dict)}
    body = {c.get("type"): c for c in shown.get("conditions") or [] if isinstance(c, dict)}
    kept = []
    for c in new:
        prior, seen = was.get(c.get("type")), body.get(c.get("type"))
        lagging = seen is None or seen.get("status") != c.get("status")
        if prior is not None and prior.get("status") == c.get("status") and lagging:
            c = {**c, "lastTransitionTime": prior.get("lastTransitionTime")}
        kept.append(c)
    return {**found, "conditions": kept}
