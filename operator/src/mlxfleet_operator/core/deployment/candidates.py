"""The fleet's placement views indexed for placement's prefilter: by label (nodeSelector), by
cached model and by free memory, so a reconcile considers only the nodes that may take its
replicas instead of walking every node (issue 12: at 500 nodes x 1,000 deployments every
reconcile walked all 500 in `placement.place`).

`NodeIndex` is a plain in-memory structure (no I/O, no clock): the fleet adapter keeps one,
`put`ting a node's view whenever it makes that view again and `drop`ping a node it forgets.
`shortlist` names the nodes a decision can need: the ones the caller must see anyway (current
replicas, nodes whose view counts the deployment's own slot), and, in placement's own score
order, enough of the nodes that pass every filter to fill every replica. A decision on the
shortlist equals the decision on every node whenever it places every replica (it differs only
in listing fewer rejections; `replicas.place` decides on every node when a replica is missing,
since the status then names each node's reason).

May import: the standard library, `api.modelref`, `core.fleet.placement`. Called by: `replicas`
(`shortlist`), the fleet adapter (`put`, `drop`).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Iterator
from typing import TypeVar

from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.fleet import placement

_K = TypeVar("_K", bound=Hashable)


def takes(node: placement.NodeView, request: placement.Request) -> bool:
    """The node passes every filter of `placement.place` for a new replica (the same rules,
    without the rejection messages)."""
    fp = request.footprint_bytes
    return (
        node.approved
        and (request.nodes is None or node.name in request.nodes)
        and all(node.labels.get(k) == v for k, v in request.node_selector.items())
        and request.engine in node.engines
        and fp <= node.budget_bytes
        and not node.unschedulable
        and not node.draining
        and node.ready
        and not node.pressures
        and node.name not in request.leave
        and (request.served_name is None or request.served_name not in node.served_names)
        and node.budget_bytes - node.used_bytes >= fp
    )


class NodeIndex:
    """Placement views by node name, label, cached model and free memory (kept by `put`)."""

    def __init__(self) -> None:
        self._views: dict[str, placement.NodeView] = {}
        self._slots: dict[str, frozenset[str]] = {}  # node -> slots its view counts
        self._counting: dict[str, set[str]] = {}  # slot -> nodes whose view counts it
        self._labels: dict[tuple[str, str], set[str]] = {}
        self._models: dict[ModelRef, set[str]] = {}
        # (free, name) ascending (BinPack's order) and (-free, name) ascending (Spread's),
        # free = budget - used: placement's order among nodes alike but for the room left
        self._least: list[tuple[int, str]] = []
        self._most: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._views)

    def names(self) -> list[str]:
        return list(self._views)

    def view(self, name: str) -> placement.NodeView | None:
        return self._views.get(name)

    def counting(self, slot: str) -> frozenset[str]:
        """Nodes whose view counts `slot` (listed by the agent or reserved): not valid for that
        slot's deployment, which must leave its own usage out (`core.fleet.nodeviews.node_view`)."""
        return frozenset(self._counting.get(slot, ()))

    def put(self, view: placement.NodeView, slots: frozenset[str]) -> None:
        """Index the node's view (as any deployment whose slot it does not count sees it)."""
        old = self._views.get(view.name)
        if old is view and self._slots.get(view.name) == slots:
            return
        self.drop(view.name)
        name = view.name
        self._views[name] = view
        self._slots[name] = slots
        for slot in slots:
            self._counting.setdefault(slot, set()).add(name)
        for label in view.labels.items():
            self._labels.setdefault(label, set()).add(name)
        for model in view.cached:
            self._models.setdefault(model, set()).add(name)
        free = view.budget_bytes - view.used_bytes
        bisect.insort(self._least, (free, name))
        bisect.insort(self._most, (-free, name))

    def drop(self, name: str) -> None:
        view = self._views.pop(name, None)
        if view is None:
            return
        for slot in self._slots.pop(name, frozenset()):
            _discard(self._counting, slot, name)
        for label in view.labels.items():
            _discard(self._labels, label, name)
        for model in view.cached:
            _discard(self._models, model, name)
        free = view.budget_bytes - view.used_bytes
        del self._least[bisect.bisect_left(self._least, (free, name))]
        del self._most[bisect.bisect_left(self._most, (-free, name))]

    def shortlist(self, request: placement.Request, *, keep: Iterable[str]) -> set[str]:
        """`keep` (indexed or not) plus, in placement's score order (cached weights first, cool
        before warm, then room left per strategy, then name), the first `request.replicas`
        indexed nodes outside `keep` that pass every filter (`takes`): every node placement
        could add is among them. Explicit `spec.placement.nodes`: all of them (they are few)."""
        out = set(keep)
        if request.nodes is not None:
            return out | {n for n in request.nodes if n in self._views}
        pool = self._pool(request)
        want = request.replicas

        def fits(name: str) -> bool:
            return name not in out and (pool is None or name in pool)

        cached = [
            v
            for n in self._models.get(request.model, ())
            if fits(n) and takes(v := self._views[n], request)
        ]
        sign = 1 if request.strategy is placement.Strategy.BIN_PACK else -1
        cached.sort(key=lambda v: (v.warmth, sign * (v.budget_bytes - v.used_bytes), v.name))
        out.update(v.name for v in cached[:want])
        need = want - len(cached)
        # placement ranks cool nodes before warm ones, then by room: walk in room order, take
        # cool takers first and keep the warm ones met on the way for what cool ones leave over
        warm: list[str] = []
        for name in self._walk(request):
            if need <= 0:
                break
            if not fits(name):
                continue
            view = self._views[name]
            if request.model in view.cached or not takes(view, request):
                continue
            if view.warmth:
                if len(warm) < need:
                    warm.append(name)
                continue
            out.add(name)
            need -= 1
        out.update(warm[: max(need, 0)])
        return out

    def _pool(self, request: placement.Request) -> set[str] | None:
        """Nodes with every label of the selector (None: no selector)."""
        pool: set[str] | None = None
        for label in request.node_selector.items():
            found = self._labels.get(label, set())
            pool = set(found) if pool is None else pool & found
        return pool

    def _walk(self, request: placement.Request) -> Iterator[str]:
        """Nodes with room for the footprint, least room first (BinPack) or most (Spread),
        then by name."""
        if request.strategy is placement.Strategy.BIN_PACK:
            least = self._least
            for i in range(bisect.bisect_left(least, (request.footprint_bytes, "")), len(least)):
                yield least[i][1]
            return
        for free, name in self._most:
            if -free < request.footprint_bytes:
                return
            yield name


def _discard(index: dict[_K, set[str]], key: _K, name: str) -> None:
    found = index.get(key)
    if found is not None:
        found.discard(name)
        if not found:
            del index[key]
