"""Priority and preemption (pure): which replicas of lower-priority ModelDeployments a
deployment that cannot be placed may evict, which nodes an evicted deployment leaves and avoids,
and what both say about it.

The preemptor side (`sites`, `choose`): a replica that found no node is given one where only
memory was missing (`placement.Reason.MEMORY`), by evicting replicas of deployments of strictly
lower `spec.priority` there (never an equal or higher one), never taking a deployment below its
floor (`floor`: minReplicas), counting what other preemptors already evict from it. Of the
nodes that would do, the one whose evicted replicas matter least: the lowest highest priority,
then the fewest replicas, the fewest bytes, the name (Kubernetes' own order). On that node the
most important candidates are spared first while the rest still make room (Kubernetes'
"reprieve"). The result is a `Nomination` per node: the preemptor waits for that node while its
victims leave; others see the node's memory as promised to it (`claim`).

The victim side (`honoured`, `leave`, `evicted`): a deployment named by a nomination moves that
replica off the node, make-before-break where memory allows (placement drops it, the slot
hand-over keeps it serving until its replacement elsewhere serves; with nowhere to go it is
removed). Each eviction is recorded in the victim's status (`PreemptionStatus`); the victim
places nothing on that node again before a back-off that doubles with every eviction within a
window (`backoff`), so a deployment evicted again and again does not come back and go at the
preemptor's pace. Equal priorities never evict each other, so two of them cannot oscillate.

Decisions take an explicit `now`; the records live in both deployments' status, so an
operator restart resumes them. May import: the standard library, `api`, the agent `contract`,
`core.fleet` (`placement`, `facts`), `core.kit.events`. Called by: the ModelDeployment
handler (with the nominations the fleet adapter holds), `intent` (the nodes to leave), `status`
(the messages).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.api import deploymentspec
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.fleet import facts as f
from mlxfleet_operator.core.fleet import placement
from mlxfleet_operator.core.kit import events

BACKOFF_GROWTH_MAX = 16  # the back-off doubles per eviction up to this many times the base
RECORDS_MAX = 8  # evictions a victim's status keeps (the newest)


def floor(spec: deploymentspec.ModelDeploymentSpec) -> int:
    """Replicas a deployment never goes below through preemption: spec.minReplicas, or
    spec.replicas for a deployment that does not set it (never preempted below what it asks);
    the autoscaler's own lower bound (`autoscale.Bounds.low`), the same number."""
    return spec.fewest_replicas


@dataclass(frozen=True)
class Tenant:
    """A ModelDeployment as preemption sees it."""

    namespace: str
    name: str
    priority: int = 0
    floor: int = 0  # replicas it keeps whatever preempts it (`floor`)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def tenant(md: mdep.ModelDeployment) -> Tenant:
    return Tenant(
        namespace=md.metadata.namespace or "",
        name=md.metadata.name or "",
        priority=md.spec.priority,
        floor=floor(md.spec),
    )


@dataclass(frozen=True)
class Occupant:
    """One replica on a node: its slot, the memory the scheduler counts for it, whose it is
    (None: not a whole replica of a ModelDeployment preemption knows: never evicted)."""

    slot: str
    bytes: int
    tenant: Tenant | None


@dataclass(frozen=True)
class Site:
    """A node that refused the preemptor for memory alone: its free memory as the preemptor
    sees it, and what occupies it."""

    node: str
    free: int
    occupants: tuple[Occupant, ...]


@dataclass(frozen=True)
class Eviction:
    """One replica that must leave `node` for a preemptor."""

    node: str
    slot: str  # the victim's agent slot
    victim: Tenant
    bytes: int


@dataclass(frozen=True)
class Nomination:
    """A node promised to a preemptor's replica while the evicted replicas leave it."""

    node: str
    preemptor: Tenant
    slot: str  # the preemptor's agent slot
    bytes: int  # the preemptor's footprint
    evictions: tuple[Eviction, ...]
    since: datetime


def sites(
    decision: placement.Decision,
    facts: Mapping[str, f.NodeFacts],
    *,
    slot: str,
    tenants: Mapping[str, Tenant],
) -> list[Site]:
    """The nodes placement refused for memory alone (every other filter passed), with their
    occupants: the agent's listed slots, each with its deployment (`tenants`, by slot name;
    a rank of a sharded group or a slot nobody claims is never evicted). Slots the operator
    only promised (a PUT in flight, another preemptor's nomination) are not occupants: their
    memory is not there to free."""
    out = []
    for rejection in decision.rejections:
        fact = facts.get(rejection.node)
        if rejection.reason != placement.Reason.MEMORY or fact is None or fact.state is None:
            continue
        cached = fact.state.cached_models
        occupants = tuple(
            Occupant(
                slot=s.name,
                bytes=f.held_bytes(s, cached),
                tenant=tenants.get(s.name) if s.spec.shard is None else None,
            )
            for s in fact.state.slots
            if s.name != slot and s.spec is not None
        )
        free = f.budget(fact) - f.used_by_others(fact, slot)
        out.append(Site(node=fact.name, free=free, occupants=occupants))
    return out


def spare(
    victims: Iterable[Tenant],
    *,
    placed: Mapping[str, int],
    others: Iterable[Nomination],
) -> dict[str, int]:
    """Replicas each deployment may still lose: placed now, less its floor, less those other
    preemptors already evict (`others`: every nomination but the deciding deployment's)."""
    leaving: dict[str, int] = {}
    for nomination in others:
        for eviction in nomination.evictions:
            leaving[eviction.victim.key] = leaving.get(eviction.victim.key, 0) + 1
    return {t.key: max(0, placed.get(t.key, 0) - t.floor - leaving.get(t.key, 0)) for t in victims}


def _victims(
    site: Site, preemptor: Tenant, footprint: int, spare: Mapping[str, int]
) -> tuple[tuple[Occupant, Tenant], ...] | None:
    """The fewest and least important replicas whose leaving makes room on `site`, each with
    its deployment (None: evicting every lower-priority replica allowed would not)."""
    need = footprint - site.free
    if need <= 0:
        return None  # room without evicting: placement takes it on its own
    allowed = [
        (o, o.tenant)
        for o in site.occupants
        if o.tenant is not None
        and o.tenant.priority < preemptor.priority
        and spare.get(o.tenant.key, 0) > 0
    ]
    freed = sum(o.bytes for o, _ in allowed)
    if freed < need:
        return None
    chosen = list(allowed)
    # reprieve the most important first, while the others still make room
    for pair in sorted(allowed, key=lambda p: (-p[1].priority, -p[0].bytes, p[0].slot)):
        if freed - pair[0].bytes >= need:
            chosen.remove(pair)
            freed -= pair[0].bytes
    return tuple(sorted(chosen, key=lambda p: p[0].slot))


def _cost(site: Site, victims: Sequence[tuple[Occupant, Tenant]]) -> tuple[int, int, int, str]:
    """Smallest first: the highest priority evicted, how many, how many bytes, the name."""
    top = max(t.priority for _, t in victims)
    return (top, len(victims), sum(o.bytes for o, _ in victims), site.node)


def choose(
    preemptor: Tenant,
    *,
    slot: str,
    footprint: int,
    missing: int,
    sites: Sequence[Site],
    spare: Mapping[str, int],
    previous: Mapping[str, datetime],
    now: datetime,
) -> tuple[Nomination, ...]:
    """At most `missing` nominations on distinct nodes. The nodes of `previous` nominations
    (node -> since) come first and keep their time while they still work (a preemptor does not
    wander while its victims leave), then the cheapest others (`_cost`)."""
    left = dict(spare)
    out: list[Nomination] = []

    def take(site: Site, victims: Sequence[tuple[Occupant, Tenant]], since: datetime) -> None:
        for _, victim in victims:
            left[victim.key] -= 1
        evictions = tuple(Eviction(site.node, o.slot, t, o.bytes) for o, t in victims)
        out.append(Nomination(site.node, preemptor, slot, footprint, evictions, since))

    pool = sorted(sites, key=lambda s: s.node)
    for site in [s for s in pool if s.node in previous]:
        victims = _victims(site, preemptor, footprint, left)
        if len(out) < missing and victims is not None:
            take(site, victims, previous[site.node])
    while len(out) < missing:
        taken = {n.node for n in out}
        options = [
            (site, victims)
            for site in pool
            if site.node not in taken
            and (victims := _victims(site, preemptor, footprint, left)) is not None
        ]
        if not options:
            break
        site, victims = min(options, key=lambda sv: _cost(*sv))
        take(site, victims, now)
    return tuple(out)


def landing(
    held: Iterable[Nomination],
    decision: placement.Decision,
    facts: Mapping[str, f.NodeFacts],
    *,
    slot: str,
) -> tuple[Nomination, ...]:
    """Of the preemptor's nominations held so far, those placement now gives it (the victims
    left) whose slot its agent does not list yet: kept until it does, so that the node stays
    promised while the agent still drains the evicted replica (a PUT answered 507 meanwhile
    would otherwise start a second eviction)."""
    out = []
    for n in held:
        fact = facts.get(n.node)
        if n.node in decision.added and fact is not None and fact.slot(slot) is None:
            out.append(n)
    return tuple(out)


def claim(nomination: Nomination, state: contract.AgentState) -> int:
    """Memory the nomination holds on its node for the preemptor beyond what its victims still
    hold there: the node counts the preemptor's footprint in full once they left, and nothing
    twice while they leave (a replica that is not evicted never looks short of room)."""
    victims = {e.slot for e in nomination.evictions}
    cached = state.cached_models
    still = sum(f.held_bytes(s, cached) for s in state.slots if s.name in victims)
    return max(0, nomination.bytes - still)


# ------------------------------------------------------------------------ the victim's side


def honoured(
    me: Tenant, nominations: Iterable[Nomination], *, current: Sequence[str]
) -> tuple[Nomination, ...]:
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
    taken: Iterable[Nomination],
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
    me: Tenant,
    taken: Iterable[Nomination],
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
    nominations: Sequence[Nomination],
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
    nominations: Sequence[Nomination], records: Sequence[mdep.PreemptionStatus]
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


def evicted_events(me: Tenant, new: Sequence[mdep.PreemptionStatus]) -> list[events.Event]:
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


def waiting_text(nominations: Sequence[Nomination]) -> str:
    """`evicting ns/a (priority 0) on mac-1 for this deployment, waiting for its memory`."""
    parts = []
    for n in sorted(nominations, key=lambda n: n.node):
        who = ", ".join(f"{e.victim.key} (priority {e.victim.priority})" for e in n.evictions)
        parts.append(f"evicting {who} on {n.node}, waiting for its memory")
    return "; ".join(parts)


def evicted_text(me: Tenant, records: Sequence[mdep.PreemptionStatus], *, now: datetime) -> str:
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

    taken: tuple[Nomination, ...]
    records: tuple[mdep.PreemptionStatus, ...]
    new: tuple[mdep.PreemptionStatus, ...]
    leave: Mapping[str, str]


def as_victim(
    me: Tenant,
    nominations: Iterable[Nomination],
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


def need_nodes(decision: placement.Decision) -> bool:
    """A replica found no node, and waiting for capacity may help (not a spec problem)."""
    return decision.missing > 0 and not decision.fits_nowhere


@dataclass(frozen=True)
class Standing:
    """What preemption adds to one deployment's status: its records as preemptor and as
    victim, and what its Ready condition says while a replica is missing because of it."""

    preempting: tuple[mdep.PreemptionStatus, ...] = ()
    preempted_by: tuple[mdep.PreemptionStatus, ...] = ()
    waiting: str = ""  # preemptor: the evictions it waits for
    evicted: str = ""  # victim: the evictions that keep a replica away


def standing(
    me: Tenant,
    *,
    nominations: Sequence[Nomination],
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
    me: Tenant,
    nominations: Sequence[Nomination],
    preempting_before: Sequence[mdep.PreemptionStatus],
    victim: Victim,
) -> list[events.Event]:
    """The Events of one reconcile: evictions it starts as preemptor, evictions it suffers."""
    return [*nominated_events(nominations, preempting_before), *evicted_events(me, victim.new)]
