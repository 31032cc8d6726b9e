"""Everything the handlers share in one operator process: settings, the Kubernetes facade, the
fleet view, the Service + EndpointSlice publisher, and what it remembers per object
(`objects`: one `adapters.objects.ObjectState` per uid, forgotten when the object goes). Lives
in kopf's memo (`memo["runtime"]`).

May import: the standard library, sibling adapters, `api`, `mlxfleet_operator.settings`.
Called by: `main` (builds it with `start(config)` on the loop kopf then runs on) and handlers
(every one reads it with `of(memo)`; `lifecycle` closes it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import fleet, kube, kubeapi, leader, metrics, objects, publishing
from mlxfleet_operator.api import swapplan as swp

KEY = "runtime"


@dataclass
class NodeChanges:
    """What the converge-skip check needs of all InferenceNodes, kept as they change instead of
    scanned per deployment per tick: a version that moves when what a decision reads of any
    node object changes, the nodes whose Ready condition is not True, and `shape`: a version
    that moves only when a node may take replicas it could not before (new, Ready again, or its
    labels, cordon, drain or agent changed; not its status writes). Fed by the
    `inference_nodes` index (every watch event) and the node delete handler.

    `reads` (given by the index): the part of the object a decision reads (its labels, spec,
    conditions; not the heartbeat time, slots, memory and cached models the poll writes from
    the agent's answer, which the fleet view's own versions cover). A status write that changes
    none of it moves no version: every node status write at 500 x 1,000 (2,268 while
    converging, one per heartbeat after) woke every deployment placed on that node again.
    Without `reads`, the object's resourceVersion stands for it."""

    version: int = 0
    shape: int = 0
    not_ready: set[str] = field(default_factory=set)
    _seen: dict[str, object] = field(default_factory=dict)  # name -> what decisions read
    _moved: dict[str, int] = field(default_factory=dict)  # name -> times `_seen` changed
    _shapes: dict[str, object] = field(default_factory=dict)  # name -> what placement filters

    def observe(
        self,
        name: str,
        resource_version: str | None,
        *,
        ready: bool,
        shape: object = None,
        reads: object = None,
    ) -> None:
        seen = resource_version if reads is None else reads
        if name not in self._seen or self._seen[name] != seen:
            self._seen[name] = seen
            self._moved[name] = self._moved.get(name, 0) + 1
            self.version += 1
        if name not in self._shapes or self._shapes[name] != shape:
            self._shapes[name] = shape
            self.shape += 1
        if ready:
            if name in self.not_ready:
                self.shape += 1
            self.not_ready.discard(name)
        else:
            self.not_ready.add(name)

    def versions(self, names: Iterable[str]) -> tuple[int | None, ...]:
        """How often what decisions read of each named node changed (None: not seen)."""
        return tuple(self._moved.get(name) for name in names)

    def forget(self, name: str) -> None:
        self._seen.pop(name, None)
        self._moved.pop(name, None)
        self._shapes.pop(name, None)
        self.not_ready.discard(name)
        self.version += 1


def now() -> datetime:
    """The one clock of the operator (core functions get it as an argument)."""
    return datetime.now(UTC).replace(microsecond=0)


@dataclass
class Runtime:
    config: opsettings.OperatorSettings
    kube: kube.Kube
    fleet: fleet.Fleet
    publisher: publishing.Publisher
    objects: objects.Objects = field(default_factory=objects.Objects)  # per object uid
    nodes: NodeChanges = field(default_factory=NodeChanges)
    # (namespace, deployment) -> the demand whose wake-up was told (a ModelDemand names a
    # deployment, not its uid; dropped by the deployment's teardown)
    woken: dict[tuple[str, str], object] = field(default_factory=dict)

    def lock(self, uid: str) -> asyncio.Lock:
        """One reconcile at a time per object (a timer and an event handler may overlap)."""
        return self.objects.of(uid).lock

    def first_time(self, uid: str, what: str, *, about: str = "") -> bool:
        """True once per (object, `about`, announcement): handlers may run on a body that
        predates their own last status patch, so status alone cannot tell an Event was sent."""
        told = self.objects.of(uid).announced
        if told.get(about) == what:
            return False
        told[about] = what
        return True

    def unchanged(self, uid: str, inputs: object, *, at: float, resync: float) -> bool:
        """The object's last full run saw these same `inputs` less than `resync` seconds before
        `at` (a monotonic time): running again would decide the same (see `settle`)."""
        found = self.objects.get(uid)
        last = found.settled if found is not None else None
        return last is not None and last[0] == inputs and at - last[1] < resync

    def settle(self, uid: str, inputs: object | None, *, at: float) -> None:
        """Remember what a full run saw (None: forget, the next run is a full one)."""
        if inputs is None:
            if (found := self.objects.get(uid)) is not None:
                found.settled = None
        else:
            self.objects.of(uid).settled = (inputs, at)

    async def aclose(self) -> None:
        await self.fleet.aclose()
        await self.kube.aclose()


class StartError(Exception):
    """The runtime cannot start; the message names the flag to fix and why."""


async def start(config: opsettings.OperatorSettings) -> Runtime:
    """The runtime for `config`: the operator's one Kubernetes client (the kubeconfig, else
    in-cluster; its connection pool opens on the running loop, closed by `Runtime.aclose`), the
    fleet view, the publisher, and the metrics server when a port is set. Raises `StartError`."""
    try:
        client = await kubeapi.connect(config.kubeconfig)
    except kubeapi.ConfigError as exc:
        where = f"--kubeconfig {config.kubeconfig}" if config.kubeconfig else "in-cluster config"
        raise StartError(f"{where}: {exc}") from exc
    k = kube.Kube(client)
    metrics.report_leadership(leader.may_act)
    metrics.count_phases(str(p) for p in swp.SwapPhase if p.terminal)
    if config.metrics_port is not None:
        try:
            metrics.serve(config.metrics_host, config.metrics_port)
        except OSError as exc:
            await k.aclose()
            where = f"--metrics-host {config.metrics_host} --metrics-port {config.metrics_port}"
            raise StartError(f"{where}: {exc}") from exc
    return Runtime(
        config=config,
        kube=k,
        fleet=fleet.Fleet(k, fleet_keys=config.fleet_keys),
        publisher=publishing.Publisher(k),
    )


def of(memo: MutableMapping[str, Any]) -> Runtime:
    found = memo.get(KEY)
    if not isinstance(found, Runtime):
        raise RuntimeError("operator runtime missing: run the handlers through mlxfleet-operator")
    return found
