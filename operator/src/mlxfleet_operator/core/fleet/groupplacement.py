"""Group placement: where a sharded ModelDeployment's replicas go (pure), groups of N ranks on
N distinct nodes (`core.sharded` is the sharded deployment's other decisions; `api.sharding`
its `spec.sharding`).

May import: the standard library and `core.fleet.placement` (node views, rejections).
Called by: `core.sharded` (the group request, formations, rank specs), `core.swapplan.groups`,
the sharded ModelDeployment handler, property tests.

Each rank holds its share of the weights and of the KV cache plus the runtime overhead:
- Tensor: every layer is split by KV heads, so each rank holds 1/N of both (the model's KV heads
  must divide by N: mlx-lm's `shard` divides heads by the group size);
- Pipeline: the layers are split in proportion to each chosen node's free memory (as exo does),
  each rank at least one layer, so a rank's share is its layers' fraction of weights and KV.
Every rank is checked against its node's budget minus what other slots use (`surge_bytes`: what
an old group of this deployment still holds there during a surge swap). Kept groups stay where
they are while every node is eligible; a group that lost a rank keeps its healthy nodes and gets
new ones. New groups prefer nodes sharing a fabric label (`topology.mlxfleet.io/fabric`), then
nodes with the weights cached, then the most free memory. Every node not chosen gets a rejection
that names it and says why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.fleet import placement

FABRIC_LABEL = "topology.mlxfleet.io/fabric"
# what the fabric is made of: `thunderbolt` (the default: its Macs need a Thunderbolt Bridge,
# `core.node.doctor`) or `ethernet`
FABRIC_LINK_LABEL = "topology.mlxfleet.io/fabric-link"


class Mode(StrEnum):
    TENSOR = "Tensor"
    PIPELINE = "Pipeline"


@dataclass(frozen=True)
class GroupRequest:
    """The deployment's sharded intent and the model's size, split into what ranks share."""

    groups: int
    size: int
    mode: Mode
    weights_bytes: int
    kv_bytes: int
    overhead_bytes: int
    num_layers: int
    num_kv_heads: int | None
    model: ModelRef  # the model the ranks load
    node_selector: Mapping[str, str] = field(default_factory=dict)
    nodes: tuple[str, ...] | None = None
    surge_bytes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RankPlan:
    rank: int
    node: str
    memory_bytes: int
    layers: int


@dataclass(frozen=True)
class GroupPlan:
    index: int
    ranks: tuple[RankPlan, ...]
    kept: bool  # the same nodes in the same order as the current formation

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(r.node for r in self.ranks)


@dataclass(frozen=True)
class GroupDecision:
    groups: tuple[GroupPlan, ...]
    rejections: tuple[placement.Rejection, ...]
    missing: int  # groups that found no set of nodes
    unsplittable: str | None = None  # the model cannot be split this way: a person must act

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for g in self.groups for n in g.nodes)

    def rejection_summary(self) -> str:
        """Why each node takes no (further) rank; with a group missing, the chosen nodes too
        (one rank per node), so the text always says why (`placement.summary`)."""
        hosting = [
            placement.Rejection(n, placement.Reason.HAS_REPLICA, HOSTS_RANK) for n in self.nodes
        ]
        return placement.summary([*self.rejections, *(hosting if self.missing else [])])


HOSTS_RANK = "already runs a rank of this deployment (one per node)"


def unsplittable(request: GroupRequest) -> str | None:
    """Why the model cannot be split into `size` ranks this way (None: it can)."""
    heads = request.num_kv_heads
    if request.mode == Mode.TENSOR and heads is not None and heads % request.size:
        return (
            f"spec.sharding.size {request.size}: tensor sharding splits the model's "
            f"{heads} KV heads, which do not divide by {request.size}"
        )
    if request.mode == Mode.PIPELINE and request.num_layers < request.size:
        return (
            f"spec.sharding.size {request.size}: pipeline sharding needs a layer per rank, "
            f"the model has {request.num_layers}"
        )
    return None


def _share(total: int, part: int, whole: int) -> int:
    return math.ceil(total * part / whole)


def tensor_rank_bytes(request: GroupRequest) -> int:
    n = request.size
    return (
        _share(request.weights_bytes, 1, n)
        + _share(request.kv_bytes, 1, n)
        + (request.overhead_bytes)
    )


def pipeline_layers(free: Sequence[int], num_layers: int) -> tuple[int, ...]:
    """Layers per rank in proportion to `free` (largest remainder), at least one each."""
    n = len(free)
    spare = num_layers - n
    weights = [max(f, 0) for f in free]
    total = sum(weights)
    exact = [spare / n] * n if total <= 0 else [spare * w / total for w in weights]
    base = [math.floor(x) for x in exact]
    left = spare - sum(base)
    order = sorted(range(n), key=lambda i: (-(exact[i] - base[i]), i))
    for i in order[:left]:
        base[i] += 1
    return tuple(b + 1 for b in base)


def rank_bytes(request: GroupRequest, layers: int) -> int:
    if request.mode == Mode.TENSOR:
        return tensor_rank_bytes(request)
    whole = request.num_layers
    return (
        _share(request.weights_bytes, layers, whole)
        + _share(request.kv_bytes, layers, whole)
        + request.overhead_bytes
    )


def free_bytes(node: placement.NodeView, request: GroupRequest) -> int:
    return node.budget_bytes - node.used_bytes - request.surge_bytes.get(node.name, 0)


def plan_ranks(
    request: GroupRequest, nodes: Sequence[placement.NodeView]
) -> tuple[tuple[RankPlan, ...], list[placement.Rejection]]:
    """Rank shares on these nodes (rank = position); the nodes whose share does not fit."""
    if request.mode == Mode.TENSOR:
        layers = tuple(request.num_layers for _ in nodes)
    else:
        layers = pipeline_layers([free_bytes(n, request) for n in nodes], request.num_layers)
    ranks = tuple(
        RankPlan(rank=i, node=n.name, memory_bytes=rank_bytes(request, k), layers=k)
        for i, (n, k) in enumerate(zip(nodes, layers, strict=True))
    )
    short = [
        placement.Rejection(
            n.name,
            placement.Reason.MEMORY,
            f"rank {r.rank} needs {placement.gib(r.memory_bytes)}, free "
            f"{placement.gib(max(free_bytes(n, request), 0))} of {placement.gib(n.budget_bytes)} "
            "budget" + (" (old group still held for a surge swap)" if n.name in
                        request.surge_bytes else ""),
        )
        for n, r in zip(nodes, ranks, strict=True)
        if free_bytes(n, request) < r.memory_bytes
    ]  # fmt: skip
    return ranks, short


def _static_reject(
    node: placement.NodeView, request: GroupRequest, *, now: datetime, delay: timedelta
) -> placement.Rejection | None:
    if not node.approved:
        return placement.Rejection(node.name, placement.Reason.UNAPPROVED, placement.UNAPPROVED)
    if request.nodes is not None and node.name not in request.nodes:
        return placement.Rejection(
            node.name, placement.Reason.NOT_LISTED, "not in spec.placement.nodes"
        )
    missing = {k: v for k, v in request.node_selector.items() if node.labels.get(k) != v}
    if missing:
        wanted = ",".join(f"{k}={v}" for k, v in sorted(missing.items()))
        return placement.Rejection(
            node.name, placement.Reason.SELECTOR, f"labels do not match {wanted}"
        )
    if node.unschedulable:
        return placement.Rejection(
            node.name, placement.Reason.CORDONED, "cordoned (spec.unschedulable)"
        )
    if node.fabric is None:
        return placement.Rejection(
            node.name,
            placement.Reason.NO_FABRIC,
            "its agent has no fabric address (--fabric-address): ranks listen only on the "
            "fabric network",
        )
    if not node.ready:
        grace = node.not_ready_since is not None and now - node.not_ready_since < delay
        text = "node is not Ready" + (" (failover delay not over yet)" if grace else "")
        return placement.Rejection(node.name, placement.Reason.NOT_READY, text)
    return None


def _score(node: placement.NodeView, request: GroupRequest) -> tuple[int, int, int, str]:
    """Explicit order first, then cached weights, cool before warm (`NodeView.warmth`), room."""
    preference = request.nodes.index(node.name) if request.nodes else 0
    cached = 0 if request.model in node.cached else 1
    return (preference, cached, node.warmth, node.name) if request.nodes else (
        cached, node.warmth, -free_bytes(node, request), node.name
    )  # fmt: skip


def _fabrics(pool: Sequence[placement.NodeView]) -> list[list[placement.NodeView]]:
    """Candidate sets: each fabric's nodes (largest first), then every node (mixed links)."""
    by_fabric: dict[str, list[placement.NodeView]] = {}
    for node in pool:
        fabric = node.labels.get(FABRIC_LABEL)
        if fabric:
            by_fabric.setdefault(fabric, []).append(node)
    sets = sorted(by_fabric.values(), key=lambda ns: (-len(ns), ns[0].name))
    return [*sets, list(pool)]


def _form(
    request: GroupRequest, pool: Sequence[placement.NodeView], keep: Sequence[placement.NodeView]
) -> tuple[RankPlan, ...] | None:
    """The best group: `keep` (a broken group's healthy nodes, in rank order) plus the best
    nodes of one fabric (else of the whole pool) whose shares fit; None when none fits."""
    need = request.size - len(keep)
    kept_fabrics = {n.labels.get(FABRIC_LABEL) for n in keep}
    for candidates in _fabrics(pool):
        if kept_fabrics - {None} and len(candidates) != len(pool):
            fabric = candidates[0].labels.get(FABRIC_LABEL)
            if kept_fabrics != {fabric}:
                continue  # a broken group stays on its fabric when it can
        chosen: list[placement.NodeView] = []
        for node in sorted(candidates, key=lambda n: _score(n, request)):
            if len(chosen) == need:
                break
            if request.mode == Mode.TENSOR and free_bytes(node, request) < tensor_rank_bytes(
                request
            ):
                continue
            chosen.append(node)
        if len(chosen) < need:
            continue
        ranks, short = plan_ranks(request, [*keep, *chosen])
        if not short:
            return ranks
    return None


def _in_grace(node: placement.NodeView, *, now: datetime, delay: timedelta) -> bool:
    """A lost node the group waits for: not Ready for less than the failover delay."""
    since = node.not_ready_since
    return not node.ready and not node.unschedulable and since is not None and now - since < delay


def place_groups(
    request: GroupRequest,
    nodes: Sequence[placement.NodeView],
    current: Sequence[Sequence[str]],
    *,
    now: datetime,
    failover_delay: timedelta,
) -> GroupDecision:
    """Choose `request.groups` groups of `request.size` distinct nodes. `current`: the nodes of
    each current group by rank (index = replica). A group whose nodes are all eligible and fit
    stays; one that lost a node within the failover delay waits (missing); after it, the group
    is re-formed on its healthy nodes plus new ones."""
    why = unsplittable(request)
    if why is not None:
        return GroupDecision(groups=(), rejections=(), missing=request.groups, unsplittable=why)
    by_name = {n.name: n for n in nodes}
    rejections: dict[str, placement.Rejection] = {}
    eligible: dict[str, placement.NodeView] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        rejected = _static_reject(node, request, now=now, delay=failover_delay)
        if rejected is None:
            eligible[node.name] = node
        else:
            rejections[node.name] = rejected
    used: set[str] = set()
    groups: list[GroupPlan] = []
    missing = 0
    for index in range(request.groups):
        members = list(dict.fromkeys(current[index])) if index < len(current) else []
        members = [m for m in members if m not in used]
        healthy = [eligible[m] for m in members if m in eligible]
        if members and len(healthy) == len(members) == request.size:
            ranks, short = plan_ranks(request, healthy)
            if not short:
                groups.append(GroupPlan(index=index, ranks=ranks, kept=True))
                used.update(members)
                continue
            healthy = [n for n in healthy if n.name not in {r.node for r in short}]
            for r in short:
                rejections[r.node] = r
        waiting = [
            m
            for m in members
            if m in by_name
            and m not in eligible
            and _in_grace(by_name[m], now=now, delay=failover_delay)
        ]
        if waiting:  # do not re-form before the failover delay: the node may come back
            missing += 1
            used.update(members)
            continue
        pool = [  # new ranks never go to a node under pressure (its own ranks stay)
            n
            for n in eligible.values()
            if n.name not in used and n not in healthy and not n.pressures
        ]
        ranks_or_none = _form(request, pool, healthy)
        if ranks_or_none is None and healthy:
            ranks_or_none = _form(request, [*pool, *healthy], [])
        if ranks_or_none is None:
            missing += 1
            continue
        groups.append(GroupPlan(index=index, ranks=ranks_or_none, kept=False))
        used.update(r.node for r in ranks_or_none)
    for name in used:
        rejections.pop(name, None)
    for name, node in eligible.items():
        if name in used or name in rejections:
            continue
        if node.pressures:
            first = node.pressures[0]
            rejections[name] = placement.Rejection(name, first.reason, first.message)
            continue
        need = tensor_rank_bytes(request) if request.mode == Mode.TENSOR else None
        if need is not None and free_bytes(node, request) < need:
            rejections[name] = placement.Rejection(
                name,
                placement.Reason.MEMORY,
                f"a rank needs {placement.gib(need)}, free "
                f"{placement.gib(max(free_bytes(node, request), 0))} of "
                f"{placement.gib(node.budget_bytes)} budget",
            )
        elif missing:
            rejections[name] = placement.Rejection(
                name, placement.Reason.MEMORY, "no group of nodes with room for every rank"
            )
        else:
            rejections[name] = placement.Rejection(
                name, placement.Reason.NOT_NEEDED, "enough groups"
            )
    return GroupDecision(
        groups=tuple(groups),
        rejections=tuple(rejections[k] for k in sorted(rejections)),
        missing=missing,
    )


class SwapMode(StrEnum):
    SURGE = "Surge"
    HOLD = "Hold"


def swap_mode(
    request: GroupRequest,
    nodes: Sequence[placement.NodeView],
    old_bytes: Mapping[str, int],
    group: GroupPlan,
) -> tuple[SwapMode, str]:
    """Surge when every node of the new group has room for the old rank and the new one at
    once; else Hold (drain, stop the old group, start the new). The text says why."""
    by_name = {n.name: n for n in nodes}
    short = []
    for r in group.ranks:
        node = by_name.get(r.node)
        if node is None:
            short.append(f"{r.node}: unknown")
            continue
        room = node.budget_bytes - node.used_bytes
        need = old_bytes.get(r.node, 0) + r.memory_bytes
        if room < need:
            short.append(
                f"{r.node}: old + new rank need {placement.gib(need)}, budget left "
                f"{placement.gib(max(room, 0))}"
            )
    if short:
        return SwapMode.HOLD, "hold: " + "; ".join(short)
    return SwapMode.SURGE, "surge: every node of the new group has room for old + new ranks"
