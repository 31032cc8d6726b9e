"""Replica placement: which InferenceNodes carry a ModelDeployment's replicas (pure).

May import: the standard library and `api.modelref`. Called by: `core.deployment.replicas` (with
the views `core.fleet.nodeviews` makes of InferenceNode facts, and the footprint from the shared
memory estimate), `core.fleet.groupplacement` (node views, rejections).

Filters (each rejection names the node and why): approval (a Mac that joined itself takes nothing
until a person approves it), explicit nodes, label selector, the engine
(the node's agent must list `spec.engine.name` as runnable; agents older than engines run
mlx-lm only), nodes the deployment must leave (`Request.leave`: a replica evicted there for a
higher-priority deployment, or its back-off), cordon, Ready, node pressure (`NodeView.pressures`:
a node reporting memory or thermal pressure takes no new replica; its replicas stay),
memory fit (node budget minus what other slots already use), one replica per node. Scoring: the
order of explicit nodes, weights already cached, cool nodes before warm ones (thermal pressure
fair, `NodeView.warmth`), then Spread (most room left) or BinPack (least room left), then name.
Stability: a replica already placed on a node that is still eligible stays there, healthy or not
yet failed over, even when a better node appeared; replicas are never counted twice.
Drain: a replica on a draining node is dropped once another node takes it (the handover keeps it
serving until its replacement serves); with nowhere to go it stays (drain never loses a replica)
and the decision says so (`held`, with every node's reason in `rejection_summary`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from mlxfleet_operator.api.modelref import ModelRef


class Strategy(StrEnum):
    SPREAD = "Spread"
    BIN_PACK = "BinPack"


class Reason(StrEnum):
    """Why a node cannot take a replica (one per node, the first filter that failed)."""

    NOT_LISTED = "NotInExplicitNodes"
    SELECTOR = "NodeSelectorMismatch"
    CORDONED = "Unschedulable"
    NOT_READY = "NotReady"
    MEMORY = "InsufficientMemory"
    TOO_SMALL = "LargerThanNodeBudget"
    HAS_REPLICA = "AlreadyHostsReplica"
    SERVED_NAME = "ServedNameConflict"  # another deployment serves the same name there
    NOT_NEEDED = "NotNeeded"
    ENGINE = "EngineUnavailable"
    PREEMPTED = "Preempted"  # its replica there was evicted for a higher priority (or backs off)
    MEMORY_PRESSURE = "MemoryPressure"  # the node reports memory pressure (`Pressure`)
    UNAPPROVED = "AwaitingApproval"  # joined with a bootstrap token, not approved by a person
    NO_FABRIC = "NoFabricAddress"  # a sharded rank: its agent has no --fabric-address
    THERMAL_PRESSURE = "ThermalPressure"  # the node reports thermal pressure serious/critical


# rejections that no amount of waiting for capacity fixes (a person must act)
STATIC = (
    Reason.UNAPPROVED,
    Reason.NOT_LISTED,
    Reason.SELECTOR,
    Reason.TOO_SMALL,
    Reason.ENGINE,
    Reason.NO_FABRIC,
)
# the deployment condition reason when every node is statically out, most specific first
NOWHERE = (
    (Reason.ENGINE, "EngineUnavailable"),
    (Reason.TOO_SMALL, "InsufficientMemory"),
)


@dataclass(frozen=True)
class Pressure:
    """A node reading that keeps new replicas off the node while it lasts (its replicas stay):
    memory pressure, thermal pressure, each with its own `reason`. `message` says what the
    node reports (the InferenceNode condition's message)."""

    reason: Reason
    message: str


@dataclass(frozen=True)
class NodeView:
    """What placement needs to know about one InferenceNode."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    approved: bool = True  # false: joined itself, no person approved it yet (spec.approved)
    unschedulable: bool = False
    draining: bool = False  # spec.drain: its replicas move elsewhere (make-before-break)
    ready: bool = True
    not_ready_since: datetime | None = None
    budget_bytes: int = 0
    used_bytes: int = 0  # by other slots than this deployment's
    cached: frozenset[ModelRef] = frozenset()  # models with weights on disk
    engines: frozenset[str] = frozenset({"mlx-lm"})  # what its agent can run
    engine_reasons: Mapping[str, str] = field(default_factory=dict)  # why not, per engine
    served_names: frozenset[str] = frozenset()  # served by other slots than this deployment's
    pressures: tuple[Pressure, ...] = ()  # readings that keep new replicas off (`Pressure`)
    fabric: str | None = "127.0.0.1"  # where its sharded ranks listen (None: it runs none)
    warmth: int = 0  # 1: thermal pressure fair (placement prefers cooler nodes), else 0


@dataclass(frozen=True)
class Request:
    """The deployment's placement intent."""

    replicas: int
    footprint_bytes: int
    model: ModelRef  # the model new replicas will load
    strategy: Strategy = Strategy.SPREAD
    node_selector: Mapping[str, str] = field(default_factory=dict)
    nodes: tuple[str, ...] | None = None  # explicit node names, or None for any
    engine: str = "mlx-lm"  # spec.engine.name
    served_name: str | None = None  # an agent serves one name once: a node serving it is out
    # nodes this deployment's replicas must leave and take no new replica on, with why: evicted
    # there for a higher-priority deployment, or backing off after such an eviction
    leave: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rejection:
    node: str
    reason: Reason
    message: str


@dataclass(frozen=True)
class Decision:
    nodes: tuple[str, ...]  # kept replicas first (in their old order), then new ones by score
    kept: tuple[str, ...]
    added: tuple[str, ...]
    dropped: tuple[str, ...]  # previously placed, no longer wanted (slots to remove)
    rejections: tuple[Rejection, ...]
    missing: int  # replicas that found no node
    fits_nowhere: bool  # footprint larger than every candidate's whole budget: needs a human
    held: tuple[str, ...] = ()  # kept on a draining node: no other node can take the replica

    def rejection_summary(self) -> str:
        """Why each node takes no (further) replica; with a replica missing or held on a
        draining node, the chosen nodes too, so the text always says why (`summary`)."""
        chosen = [
            Rejection(n, Reason.CORDONED, HELD)
            if n in self.held
            else Rejection(n, Reason.HAS_REPLICA, HOSTS_REPLICA)
            for n in self.nodes
        ]
        return summary([*self.rejections, *(chosen if self.missing or self.held else [])])


HOSTS_REPLICA = "already has a replica of this deployment (one per node)"
HELD = "draining (spec.drain), its replica stays until another node can take it"
NO_NODES = "no InferenceNodes to place on yet (add a Mac: `mlxfleet-agent join`, docs/install.md)"


def summary(rejections: Iterable[Rejection]) -> str:
    """`a, b: cordoned (spec.unschedulable); c: needs 4.00 GiB, ...`: nodes in name order, those
    with the same message in one entry, NotNeeded left out; `NO_NODES` when nothing is left (an
    empty fleet: every node given to `place` is either chosen or rejected)."""
    by_message: dict[str, list[str]] = {}
    for r in sorted(rejections, key=lambda r: r.node):
        if r.reason != Reason.NOT_NEEDED:
            by_message.setdefault(r.message, []).append(r.node)
    return "; ".join(f"{', '.join(nodes)}: {m}" for m, nodes in by_message.items()) or NO_NODES


def nowhere_reason(decision: Decision) -> str:
    """The condition reason of a deployment no node can take (`fits_nowhere`)."""
    found = {r.reason for r in decision.rejections}
    for reason, condition in NOWHERE:
        if reason in found:
            return condition
    return "NoMatchingNodes"


def gib(value: int) -> str:
    return f"{value / 2**30:.2f} GiB"


UNAPPROVED = "not approved (joined with a bootstrap token: `kubectl mlxfleet approve node NAME`)"


def _static_reject(node: NodeView, request: Request) -> Rejection | None:
    """Filters that do not depend on readiness, free memory or the other replicas."""
    if not node.approved:
        return Rejection(node.name, Reason.UNAPPROVED, UNAPPROVED)
    if request.nodes is not None and node.name not in request.nodes:
        return Rejection(node.name, Reason.NOT_LISTED, "not in spec.placement.nodes")
    missing = {k: v for k, v in request.node_selector.items() if node.labels.get(k) != v}
    if missing:
        wanted = ",".join(f"{k}={v}" for k, v in sorted(missing.items()))
        return Rejection(node.name, Reason.SELECTOR, f"labels do not match {wanted}")
    if request.engine not in node.engines:
        why = node.engine_reasons.get(request.engine, "its agent does not list it")
        return Rejection(node.name, Reason.ENGINE, f"cannot run engine {request.engine}: {why}")
    if request.footprint_bytes > node.budget_bytes:
        return Rejection(
            node.name,
            Reason.TOO_SMALL,
            f"needs {gib(request.footprint_bytes)} ({request.footprint_bytes} bytes), "
            f"node budget is {gib(node.budget_bytes)} ({node.budget_bytes} bytes)",
        )
    return None


def _within_grace(node: NodeView, *, now: datetime, failover_delay: timedelta) -> bool:
    """A node that went NotReady less than `failover_delay` ago keeps its replicas (no flapping)."""
    if node.ready:
        return True
    return node.not_ready_since is not None and now - node.not_ready_since < failover_delay


def _free(node: NodeView) -> int:
    return node.budget_bytes - node.used_bytes


def _score(node: NodeView, request: Request) -> tuple[int, int, int, int, str]:
    """Sort key, smallest first: the order of explicit nodes (a preference), cached weights,
    cool before warm (`warmth`), then room left per strategy, then name."""
    preference = request.nodes.index(node.name) if request.nodes else 0
    cached = 0 if request.model in node.cached else 1
    left = _free(node) - request.footprint_bytes
    room = -left if request.strategy == Strategy.SPREAD else left
    return (preference, cached, node.warmth, room, node.name)


def place(
    request: Request,
    nodes: Sequence[NodeView],
    current: Sequence[str],
    *,
    now: datetime,
    failover_delay: timedelta,
) -> Decision:
    """Choose `request.replicas` distinct nodes, keeping `current` replicas where still eligible."""
    by_name = {n.name: n for n in nodes}
    rejections: dict[str, Rejection] = {}
    static_ok: list[NodeView] = []
    for node in sorted(nodes, key=lambda n: n.name):
        rejected = _static_reject(node, request)
        if rejected is None:
            static_ok.append(node)
        else:
            rejections[node.name] = rejected

    kept: list[str] = []
    evacuating: list[str] = []
    for name in dict.fromkeys(current):  # de-duplicated, order kept: never count a replica twice
        held = by_name.get(name)
        if held is None or name in rejections or len(kept) >= request.replicas:
            continue
        if name in request.leave:  # evicted: make-before-break hands it over (core.slots)
            continue
        if held.draining:
            evacuating.append(name)
            continue
        if not _within_grace(held, now=now, failover_delay=failover_delay):
            continue
        if _free(held) < request.footprint_bytes:  # own usage is excluded from used_bytes
            continue
        kept.append(name)

    added: list[str] = []
    candidates: list[NodeView] = []
    for node in static_ok:
        if node.name in kept:
            continue
        if node.name in request.leave:
            rejections[node.name] = Rejection(node.name, Reason.PREEMPTED, request.leave[node.name])
        elif node.unschedulable or node.draining:
            why = "draining (spec.drain)" if node.draining else "cordoned (spec.unschedulable)"
            rejections[node.name] = Rejection(node.name, Reason.CORDONED, why)
        elif not node.ready:
            rejections[node.name] = Rejection(node.name, Reason.NOT_READY, "node is not Ready")
        elif node.pressures:
            first = node.pressures[0]
            rejections[node.name] = Rejection(node.name, first.reason, first.message)
        elif request.served_name is not None and request.served_name in node.served_names:
            # the other deployment may be another tenant's: say what, never whose
            rejections[node.name] = Rejection(
                node.name,
                Reason.SERVED_NAME,
                f"another deployment already serves the name {request.served_name!r} there",
            )
        elif _free(node) < request.footprint_bytes:
            rejections[node.name] = Rejection(
                node.name,
                Reason.MEMORY,
                f"needs {gib(request.footprint_bytes)}, free {gib(max(_free(node), 0))} of "
                f"{gib(node.budget_bytes)} budget",
            )
        else:
            candidates.append(node)
    for node in sorted(candidates, key=lambda n: _score(n, request)):
        if len(kept) + len(added) >= request.replicas:
            rejections[node.name] = Rejection(node.name, Reason.NOT_NEEDED, "enough replicas")
            continue
        added.append(node.name)
    stays: list[str] = []
    for name in evacuating:  # nowhere else to go (yet): the replica stays where it serves
        if len(kept) + len(added) < request.replicas and _within_grace(
            by_name[name], now=now, failover_delay=failover_delay
        ):
            kept.append(name)
            stays.append(name)

    chosen = (*kept, *added)
    dropped = tuple(n for n in dict.fromkeys(current) if n not in chosen)
    for name in chosen:
        rejections.pop(name, None)
    eligible_budget = [
        n for n in nodes if n.name not in rejections or rejections[n.name].reason not in STATIC
    ]
    return Decision(
        nodes=chosen,
        kept=tuple(kept),
        added=tuple(added),
        dropped=dropped,
        rejections=tuple(rejections[k] for k in sorted(rejections)),
        missing=request.replicas - len(chosen),
        fits_nowhere=request.replicas > 0 and bool(nodes) and not eligible_budget,
        held=tuple(stays),
    )
