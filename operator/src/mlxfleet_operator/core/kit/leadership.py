"""Leader election on a `coordination.k8s.io/v1` Lease: the decisions, pure.

The rules client-go's leaderelection follows, as functions of the observed Lease, this candidate's
identity and a monotonic `now` (seconds):

- Nobody trusts another machine's clock. A Lease held by someone else counts as expired only when
  its record has not changed for its `leaseDurationSeconds`, measured on the local monotonic clock
  from the moment this candidate first saw that exact record (`Seen.since`).
- A leader stops acting (`STEP_DOWN`) once `renew_deadline` has passed since the *start* of its
  last successful renew. A standby cannot take over before `lease_duration` has passed since it
  saw that renew, which is later than the renew's start, so `lease_duration - renew_deadline` is
  the fencing margin: the old leader has stopped before the new one may start.
- Writes are optimistic (the adapter sends the resourceVersion it read); a conflict means someone
  else wrote first and the decision is taken again from a fresh read.

May import: the standard library. Called by: `adapters.leader` (the elector loop) and unit tests.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime


@dataclass(frozen=True)
class Timing:
    """How long a lease lasts, how long a leader may go without renewing, how often to try.

    `lease_duration` is whole seconds (the Lease field is an integer). Each value must be shorter
    than the one before it: retry_period < renew_deadline < lease_duration.
    """

    lease_duration: int = 3
    renew_deadline: float = 2.0
    retry_period: float = 0.5

    def __post_init__(self) -> None:
        if self.lease_duration < 1:
            raise ValueError(f"lease_duration: {self.lease_duration}; allowed: 1 or more seconds")
        if not 0 < self.renew_deadline < self.lease_duration:
            raise ValueError(
                f"renew_deadline: {self.renew_deadline}; allowed: more than 0 and less than "
                f"lease_duration ({self.lease_duration}), the difference is the fencing margin"
            )
        if not 0 < self.retry_period < self.renew_deadline:
            raise ValueError(
                f"retry_period: {self.retry_period}; allowed: more than 0 and less than "
                f"renew_deadline ({self.renew_deadline})"
            )

    @property
    def margin(self) -> float:
        """Seconds between the old leader stopping and the earliest takeover."""
        return self.lease_duration - self.renew_deadline


@dataclass(frozen=True)
class Record:
    """What a Lease's spec says (the election record)."""

    holder: str | None
    lease_duration: int
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0

    @property
    def free(self) -> bool:
        """Nobody holds it (never held, or released by a leader that stepped down)."""
        return not self.holder


@dataclass(frozen=True)
class Seen:
    """A record and the local monotonic time it was first observed unchanged."""

    record: Record
    since: float


class Verdict(enum.Enum):
    CREATE = "create"  # no Lease yet: create it, holding it
    ACQUIRE = "acquire"  # free or expired (or ours from before): take it
    RENEW = "renew"  # we lead and may go on: write a new renewTime
    WAIT = "wait"  # someone else holds a live lease: stand by
    STEP_DOWN = "step-down"  # we lead but may not any more: stop acting now


def observe(previous: Seen | None, record: Record | None, *, now: float) -> Seen | None:
    """Fold a fresh read into what was seen: the clock starts again only when the record changed."""
    if record is None:
        return None
    if previous is not None and previous.record == record:
        return previous
    return Seen(record=record, since=now)


def expired(seen: Seen, *, now: float) -> bool:
    """The holder has not renewed for its whole lease duration, by our own clock."""
    return now >= seen.since + seen.record.lease_duration


def must_stop(renewed_at: float, *, now: float, timing: Timing) -> bool:
    """A leader whose last successful renew started `renew_deadline` ago must stop acting."""
    return now >= renewed_at + timing.renew_deadline


def decide(
    *, me: str, seen: Seen | None, now: float, renewed_at: float | None, timing: Timing
) -> Verdict:
    """What `me` does next. `renewed_at`: start of our last successful write of the lease while
    leading (None: we are a candidate); `seen`: the Lease as last read (None: there is none)."""
    if renewed_at is not None:
        if must_stop(renewed_at, now=now, timing=timing):
            return Verdict.STEP_DOWN
        if seen is None or seen.record.holder != me:  # deleted or taken over: not ours any more
            return Verdict.STEP_DOWN
        return Verdict.RENEW
    if seen is None:
        return Verdict.CREATE
    if seen.record.free or seen.record.holder == me or expired(seen, now=now):
        return Verdict.ACQUIRE
    return Verdict.WAIT


def claimed(previous: Record | None, *, me: str, wall: datetime, timing: Timing) -> Record:
    """The record that makes `me` the holder (a new term: transitions count up on a change)."""
    transitions = 0
    if previous is not None:
        transitions = previous.transitions + (0 if previous.holder == me else 1)
    return Record(
        holder=me,
        lease_duration=timing.lease_duration,
        acquire_time=wall,
        renew_time=wall,
        transitions=transitions,
    )


def renewed(record: Record, *, wall: datetime) -> Record:
    """The same term, renewed now."""
    return replace(record, renew_time=wall)


def released(record: Record, *, wall: datetime) -> Record:
    """What a leader that steps down writes: no holder, so a standby takes over at once."""
    return Record(
        holder=None,
        lease_duration=1,
        acquire_time=wall,
        renew_time=wall,
        transitions=record.transitions,
    )
