"""What a preemption's evictions do once nominated (pure): the victim leaves, backs off, and both
deployments record and say it.

The victim side (`honoured`, `leave`, `evicted`; one reconcile's in `as_victim`): a deployment
named by a nomination (`preemption.Nomination`) moves that replica off the node,
make-before-break where memory allows (placement drops it, the slot hand-over keeps it serving
until its replacement elsewhere serves; with nowhere to go it is removed), as many as its floor
allows. Each eviction is recorded in the victim's status (`PreemptionStatus`); the victim places
nothing on that node again before a back-off that doubles with every eviction within a window
(`backoff`), so a deployment evicted again and again does not come back and go at the
preemptor's pace. The preemptor's records (`preempting`, `previous`) say what it takes and
waits for. Both sides' Events and the texts of their Ready condition (`standing`, `events_of`).

Decisions take an explicit `now`; the records live in both deployments' status, so an operator
restart resumes them. May import: the standard library, `api`, `core.fleet` (`placement`),
`core.kit.events`, `preemption`. Called by: the ModelDeployment handler, `intent` (the nodes to
leave), `status` (the messages).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.deployment import preemption
from mlxfleet_operator.core.fleet import placement
from mlxfleet_operator.core.kit import events

BACKOFF_GROWTH_MAX = 16  # the back-off doubles per eviction up to this many times the base
RECORDS_MAX = 8  # evictions a victim's status keeps (the newest)


def honoured(
    me: preemption.Tenant, nominations: Iterable[preemption.Nomination], *, current: Sequence[str]
) -> tuple[preemption.Nomination, ...]:
    """The nominations that evict a replica of `me` (on a node it is placed on), oldest first,
    as many as its floor allows (a preemptor checked it; this holds it when replicas were lost
    since)."""
    mine = sorted(
        (
            n
            for n in nominations
            if n.node in current
            and n.preemptor.priority > me.priority
            and any(e.victim.key == me.key for e in n.evictions)
        ),
        key=lambda n: (n.since, n.node),
    )
    room = max(0, len(set(current)) - me.floor)
    return tuple(mine[:room])


def backoff(count: int, base: timedelta) -> timedelta:
    """How long an evicted deployment stays off the node, after its `count`-th eviction within
    the window (`window`): the base, doubled per eviction, at most BACKOFF_GROWTH_MAX times it."""
    factor: int = min(2 ** min(max(count - 1, 0), 16), BACKOFF_GROWTH_MAX)
    return base * factor


def window(base: timedelta) -> timedelta:
    """How long an eviction counts towards the next one's back-off (and stays in status)."""
    return base * BACKOFF_GROWTH_MAX * 2


def evicted(
    records: Sequence[mdep.PreemptionStatus],
    taken: Iterable[preemption.Nomination],
    *,
    now: datetime,
    base: timedelta,
) -> tuple[list[mdep.PreemptionStatus], list[mdep.PreemptionStatus]]:
    """The victim's eviction records after this reconcile, and the ones new in it: one per
    nomination honoured (`taken`) not recorded yet, timed from the nomination, with its back-off
    end; records older than the `window` are dropped, the newest RECORDS_MAX kept."""
    kept = [r for r in records if now - r.at < window(base)]
    new: list[mdep.PreemptionStatus] = []
    for n in sorted(taken, key=lambda n: (n.since, n.node)):
        # the same eviction: recorded since it was decided, or nominated again while the
        # replica backs off from the node (it cannot have come back in between)
        seen = any(
            r.node == n.node
            and r.deployment == n.preemptor.key
            and (r.at >= n.since or (r.backoff_until is not None and r.backoff_until > now))
            for r in [*kept, *new]
        )
        if seen:
            continue
        count = len(kept) + len(new) + 1
        new.append(  # timed from the nomination: a reconcile that reads an older status
            mdep.PreemptionStatus(  # decides the very same record
                node=n.node,
                deployment=n.preemptor.key,
                priority=n.preemptor.priority,
                at=n.since,
                backoff_until=n.since + backoff(count, base),
            )
        )
    out = sorted([*kept, *new], key=lambda r: (r.at, r.node))[-RECORDS_MAX:]
    return out, new


def leave(
    me: preemption.Tenant,
    taken: Iterable[preemption.Nomination],
    records: Sequence[mdep.PreemptionStatus],
    *,
    now: datetime,
) -> dict[str, str]:
    """Nodes the victim's replicas leave and take no new replica on, with why (placement's
    `Request.leave`): those of the nominations it honours, and those it backs off from."""
    out: dict[str, str] = {}
    for n in taken:
        out[n.node] = (
            f"replica evicted for {n.preemptor.key} "
            f"(priority {n.preemptor.priority} > {me.priority})"
        )
    for r in records:
        if r.backoff_until is not None and r.backoff_until > now and r.node not in out:
            out[r.node] = (
                f"evicted for {r.deployment} (priority {r.priority}) at {_when(r.at)}, "
                f"back-off until {_when(r.backoff_until)}"
            )
    return out


# ------------------------------------------------------------------- the preemptor's records


def preempting(
    nominations: Sequence[preemption.Nomination],
    records: Sequence[mdep.PreemptionStatus],
    *,
    holding: Sequence[str],
) -> list[mdep.PreemptionStatus]:
    """The preemptor's records: one per replica it evicts now (its nominations), and the
    earlier ones on nodes where its replica now is (`holding`): what it took, for as long as it
    holds the node."""
    out = [
        mdep.PreemptionStatus(
            node=n.node, deployment=e.victim.key, priority=e.victim.priority, at=n.since
        )
        for n in nominations
        for e in n.evictions
    ]
    waiting = {n.node for n in nominations}
    out += [r for r in records if r.node in holding and r.node not in waiting]
    return sorted(out, key=lambda r: (r.node, r.deployment))


def previous(
    records: Sequence[mdep.PreemptionStatus], *, holding: Sequence[str]
) -> dict[str, datetime]:
    """The nodes the preemptor was waiting for (recorded, not holding yet), with since when."""
    out: dict[str, datetime] = {}
    for r in records:
        if r.node not in holding:
            out[r.node] = min(out.get(r.node, r.at), r.at)
    return out


def nominated_events(
    nominations: Sequence[preemption.Nomination], records: Sequence[mdep.PreemptionStatus]
) -> list[events.Event]:
    """The preemptor's Events for evictions it starts now (not in its records yet)."""
    known = {(r.node, r.deployment) for r in records}
    return [
        events.Event(
            reason="Preempting",
            message=f"evicting the replica of {e.victim.key} (priority {e.victim.priority} < "
            f"{n.preemptor.priority}) on {n.node} to place a replica here",
        )
        for n in nominations
        for e in n.evictions
        if (n.node, e.victim.key) not in known
    ]


def evicted_events(
    me: preemption.Tenant, new: Sequence[mdep.PreemptionStatus]
) -> list[events.Event]:
    """The victim's Events for evictions recorded now."""
    return [
        events.Event(
            reason="Preempted",
            message=f"replica on {r.node} evicted for {r.deployment} (priority {r.priority} > "
            f"{me.priority}); it comes back when memory frees, not on {r.node} before "
            f"{_when(r.backoff_until)}",
            warning=True,
        )
        for r in new
    ]


def waiting_text(nominations: Sequence[preemption.Nomination]) -> str:
    """`evicting ns/a (priority 0) on mac-1 for this deployment, waiting for its memory`."""
    parts = []
    for n in sorted(nominations, key=lambda n: n.node):
        who = ", ".join(f"{e.victim.key} (priority {e.victim.priority})" for e in n.evictions)
        parts.append(f"evicting {who} on {n.node}, waiting for its memory")
    return "; ".join(parts)


def evicted_text(
    me: preemption.Tenant, records: Sequence[mdep.PreemptionStatus], *, now: datetime
) -> str:
    """`replica on mac-1 evicted for ns/b (priority 10 > 0) at ...; back on mac-1 from ...`."""
    parts = []
    for r in sorted(records, key=lambda r: (r.at, r.node)):
        text = (
            f"replica on {r.node} evicted for {r.deployment} "
            f"(priority {r.priority} > {me.priority}) at {_when(r.at)}"
        )
        if r.backoff_until is not None and r.backoff_until > now:
            text += f", back-off on {r.node} until {_when(r.backoff_until)}"
        parts.append(text)
    return "; ".join(parts)


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ") if at is not None else "?"


# ------------------------------------------------------------------------------ one reconcile


@dataclass(frozen=True)
class Victim:
    """One reconcile's victim side, decided before placement: the nominations it honours, its
    eviction records (and the new ones), and the nodes placement must keep it off."""

    taken: tuple[preemption.Nomination, ...]
    records: tuple[mdep.PreemptionStatus, ...]
    new: tuple[mdep.PreemptionStatus, ...]
    leave: Mapping[str, str]


def as_victim(
    me: preemption.Tenant,
    nominations: Iterable[preemption.Nomination],
    *,
    current: Sequence[str],
    records: Sequence[mdep.PreemptionStatus],
    now: datetime,
    base: timedelta,
) -> Victim:
    """`nominations`: those naming one of its replicas; `current`: nodes holding its slot."""
    taken = honoured(me, nominations, current=current)
    kept, new = evicted(records, taken, now=now, base=base)
    return Victim(
        taken=taken,
        records=tuple(kept),
        new=tuple(new),
        leave=leave(me, taken, kept, now=now),
    )


@dataclass(frozen=True)
class Standing:
    """What preemption adds to one deployment's status: its records as preemptor and as
    victim, and what its Ready condition says while a replica is missing because of it."""

    preempting: tuple[mdep.PreemptionStatus, ...] = ()
    preempted_by: tuple[mdep.PreemptionStatus, ...] = ()
    waiting: str = ""  # preemptor: the evictions it waits for
    evicted: str = ""  # victim: the evictions that keep a replica away


def standing(
    me: preemption.Tenant,
    *,
    nominations: Sequence[preemption.Nomination],
    preempting_before: Sequence[mdep.PreemptionStatus],
    victim: Victim,
    decision: placement.Decision,
    now: datetime,
) -> Standing:
    """Both records, and the texts: the victim's names the evictions still in the way (those
    it honours now, and those whose node still refuses it: backing off, or its memory not back
    yet)."""
    away = {
        r.node
        for r in decision.rejections
        if r.reason in (placement.Reason.PREEMPTED, placement.Reason.MEMORY)
    }
    away |= {n.node for n in victim.taken}
    in_way = [r for r in victim.records if r.node in away]
    return Standing(
        preempting=tuple(preempting(nominations, preempting_before, holding=decision.nodes)),
        preempted_by=victim.records,
        waiting=waiting_text(nominations),
        evicted=evicted_text(me, in_way, now=now),
    )


def events_of(
    me: preemption.Tenant,
    nominations: Sequence[preemption.Nomination],
    preempting_before: Sequence[mdep.PreemptionStatus],
    victim: Victim,
) -> list[events.Event]:
    """The Events of one reconcile: evictions it starts as preemptor, evictions it suffers."""
    return [*nominated_events(nominations, preempting_before), *evicted_events(me, victim.new)]
