"""Condition bookkeeping (pure): set one condition, keeping `lastTransitionTime` unless the
status flips, and the kstatus trio Ready / Reconciling / Stalled derived from one verdict.

`ready_changed`: the Event a change of Ready says. May import: the standard library,
`api.conditions` and `core.kit.events`. Called by: core status functions and the handlers (which
always write the whole list: kopf merge patches replace lists).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from mlxfleet_operator.api import conditions as api
from mlxfleet_operator.core.kit import events

TRUE = api.ConditionStatus.TRUE
FALSE = api.ConditionStatus.FALSE


def set_condition(
    current: Sequence[api.Condition],
    *,
    kind: api.ConditionType | str,
    status: api.ConditionStatus | bool,
    reason: api.Reason | str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[api.Condition]:
    """Return a new list with `kind` set; other conditions keep their order and values."""
    if isinstance(status, bool):
        status = TRUE if status else FALSE
    wanted = str(kind)
    old = api.find(list(current), wanted)
    since = old.last_transition_time if old is not None and old.status is status else now
    new = api.Condition(
        type=wanted,
        status=status,
        reason=str(reason),
        message=message[:32768],
        observed_generation=generation,
        last_transition_time=since,
    )
    out = [c for c in current if c.type != wanted]
    index = next((i for i, c in enumerate(current) if c.type == wanted), len(out))
    out.insert(index, new)
    return out


def set_reading(
    current: Sequence[api.Condition],
    *,
    kind: api.ConditionType | str,
    status: api.ConditionStatus | bool,
    reason: api.Reason | str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[api.Condition]:
    """`set_condition` for a condition that mirrors a reading which moves on every poll (memory
    pressure, heat, free disk): the message already written is kept while the status and reason
    stay, so an unchanged node does not rewrite its status each time its figures move."""
    if isinstance(status, bool):
        status = TRUE if status else FALSE
    old = api.find(list(current), str(kind))
    if old is not None and old.status is status and old.reason == str(reason):
        message = old.message
    return set_condition(
        current,
        kind=kind,
        status=status,
        reason=reason,
        message=message,
        generation=generation,
        now=now,
    )


def drop_condition(
    current: Sequence[api.Condition], kind: api.ConditionType | str
) -> list[api.Condition]:
    """The list without `kind` (a condition that no longer applies: the agent stopped reporting
    the reading it mirrors)."""
    return [c for c in current if c.type != str(kind)]


@dataclass(frozen=True)
class Verdict:
    """One object's summary: ready, converging (reconciling) or stuck until a person acts."""

    ready: bool
    reason: api.Reason | str
    message: str
    reconciling: bool = False
    stalled: bool = False


def apply_verdict(
    current: Sequence[api.Condition], verdict: Verdict, *, generation: int | None, now: datetime
) -> list[api.Condition]:
    """Ready, Reconciling and Stalled from one verdict (kstatus: never Reconciling and Stalled)."""
    out = set_condition(
        current,
        kind=api.ConditionType.READY,
        status=verdict.ready,
        reason=verdict.reason,
        message=verdict.message,
        generation=generation,
        now=now,
    )
    reconciling = verdict.reconciling and not verdict.stalled
    out = set_condition(
        out,
        kind=api.ConditionType.RECONCILING,
        status=reconciling,
        reason=verdict.reason
        if reconciling
        else api.Reason.READY
        if verdict.ready
        else verdict.reason,
        message=verdict.message if reconciling else "",
        generation=generation,
        now=now,
    )
    return set_condition(
        out,
        kind=api.ConditionType.STALLED,
        status=verdict.stalled,
        reason=verdict.reason,
        message=verdict.message if verdict.stalled else "",
        generation=generation,
        now=now,
    )


def ready_changed(
    before: Sequence[api.Condition], after: Sequence[api.Condition]
) -> events.Event | None:
    """The Event to post when the Ready condition's status or reason changed (what `kubectl
    describe` and `kubectl get events` show a person): its reason and message, a Warning when
    the object is Stalled; None when nothing changed."""
    old, new = (
        api.find(list(before), api.ConditionType.READY),
        api.find(list(after), api.ConditionType.READY),
    )
    if new is None or (old is not None and (old.status, old.reason) == (new.status, new.reason)):
        return None
    stalled = api.find(list(after), api.ConditionType.STALLED)
    warning = new.status is FALSE and stalled is not None and stalled.status is TRUE
    return events.Event(reason=new.reason, message=new.message or new.reason, warning=warning)
