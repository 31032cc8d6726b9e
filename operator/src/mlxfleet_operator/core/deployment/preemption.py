"""Priority and preemption (pure): which replicas of lower-priority ModelDeployments a
deployment that cannot be placed may evict, and the nominations that hold the nodes it takes.

A replica that found no node (`need_nodes`) is given one where only memory was missing
(`placement.Reason.MEMORY`; `sites`), by evicting replicas of deployments of strictly lower
`spec.priority` there (never an equal or higher one), never taking a deployment below its floor
(`floor`: minReplicas), counting what other preemptors already evict from it (`spare`). Of the
nodes that would do, the one whose evicted replicas matter least: the lowest highest priority,
then the fewest replicas, the fewest bytes, the name (Kubernetes' own order). On that node the
most important candidates are spared first while the rest still make room (Kubernetes'
"reprieve"). The result is a `Nomination` per node (`choose`): the preemptor waits for that node
while its victims leave (`landing`); others see the node's memory as promised to it (`claim`).
What an eviction does next (the victim leaves and backs off, both record it and say it) is
`evictions`'. Equal priorities never evict each other, so two of them cannot oscillate.

Decisions take an explicit `now`. May import: the standard library, `api`, the agent
`contract`, `core.fleet` (`placement`, `facts`). Called by: the ModelDeployment handler (with
the nominations the fleet adapter holds), the fleet adapter and `core.fleet.facts` (`claim`),
`evictions`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from mlxfleet_agent import contract
from mlxfleet_operator.api import deploymentspec
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.fleet import facts as f
from mlxfleet_operator.core.fleet import placement


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
    return tenant_of(md.metadata.namespace or "", md.metadata.name or "", md.spec)


def tenant_of(namespace: str, name: str, spec: deploymentspec.ModelDeploymentSpec) -> Tenant:
    return Tenant(namespace=namespace, name=name, priority=spec.priority, floor=floor(spec))


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


def need_nodes(decision: placement.Decision) -> bool:
    """A replica found no node, and waiting for capacity may help (not a spec problem)."""
    return decision.missing > 0 and not decision.fits_nowhere
