"""The activator: requests for a sleeping deployment wait here while the operator loads a replica.

A deployment that may sleep (spec.minReplicas 0, `catalog.Deployment.wakeable`) has no ready
replica while it sleeps, and none for a moment when it has just gone to sleep. A request for it
is not refused: `hold` admits it to the deployment's bounded queue (`core.coldstart.Held`), tells
the operator through this gateway replica's ModelDemand (`Demand.publish`, the writer in
`demand`), and waits for the view (the watched ModelDeployments) to show a replica: a ready one,
or one the operator has placed and whose agent loads it (`starting`: the agent's slot gate holds
the request until the backend is ready, so it is served the moment it can be, not at the
operator's next status write). Past the queue's bound or the deadline it is answered 503 with
Retry-After (`core.coldstart`). A request whose attempts fail while the deployment sleeps again
(the replica went between the view and the attempt) comes back here instead of failing.
The wait is measured from the first hold of a call (`Call.cold_start_t0`) to its last release
(`Call.held_ms`); its response carries `x-mlxfleet-cold-start-ms`: that wait plus the agent's
queue wait (`x-mlxfleet-queue-ms`, `relay.answer_headers`).
Nothing here runs for a deployment with a ready replica: the warm path is untouched.
May import: the standard library, core, calls, view, metrics. Called by: proxy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from mlxfleet_gateway import calls, metrics, view
from mlxfleet_gateway.core import catalog, coldstart, errors

log = logging.getLogger("mlxfleet_gateway.activator")
RETRY_PAUSE_S = 0.5  # after a failed attempt, before the same replicas are tried again
CHECK_GONE_S = 1.0  # how often a waiting request looks whether its client left


class Demand(Protocol):
    """Where the held requests are told (the ModelDemand writer)."""

    def publish(self, entries: list[coldstart.Entry]) -> None: ...


class Activator:
    def __init__(
        self,
        *,
        state: view.View,
        demand: Demand | None,
        gauges: metrics.GatewayMetrics,
        limit: int,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.view = state
        self.demand = demand
        self.metrics = gauges
        self.held = coldstart.Held(limit=limit)
        self.timeout_s = timeout_s
        self.clock = clock
        self.wall = wall

    async def hold(self, call: calls.Call, target: catalog.Deployment) -> catalog.Deployment:
        """Wait until `target` has a ready or starting replica; the deployment as the view has
        it then. A call held before whose attempts failed since (`again`) first waits for a
        change of the view or a pause, and goes back to the replicas at once if there are any:
        only a call with nothing to go to waits in the queue and counts as demand (a replica
        that keeps failing is not a reason to wake anything). Raises GatewayError 503 (queue
        full, deadline), or 503 `no_backend` when the deployment is gone or turned off."""
        again = call.cold_start_t0 is not None
        if call.cold_start_t0 is None:
            call.cold_start_t0 = self.clock()
        deadline = call.cold_start_t0 + self.timeout_s
        key = (target.namespace, target.name)
        if again:
            await self.view.changed(self.view.version, timeout_s=RETRY_PAUSE_S)
            found = self._usable(key)
            if found.replicas or found.starting:
                return self._release(call, target, found, deadline=deadline)
        arrived = self.wall()
        if not self.held.admit(key, at=arrived):
            self.metrics.cold_starts.labels(target.id, "queue_full").inc()
            raise coldstart.queue_full(target.id, self.held.limit)
        if self.held.count(key) == 1:
            log.info("holding requests for a sleeping deployment", extra={"deployment": target.id})
        self._changed()
        try:
            waited = await self._wait(call, key, deadline=deadline)
        finally:
            self.held.leave(key, at=arrived)
            self._changed()
        if waited is None and call.gone:
            raise errors.unavailable("the client left while it waited for a cold start")
        if not again:
            self.metrics.cold_starts.labels(target.id, "held").inc()
        return self._release(call, target, waited, deadline=deadline)

    def _release(
        self,
        call: calls.Call,
        target: catalog.Deployment,
        found: catalog.Deployment | None,
        *,
        deadline: float,
    ) -> catalog.Deployment:
        """The deployment to try now, or 503 `cold_start_timeout` past the deadline."""
        assert call.cold_start_t0 is not None
        if found is None or self.clock() > deadline:
            self.metrics.cold_starts.labels(target.id, "timeout").inc()
            raise coldstart.timed_out(target.id, self.clock() - call.cold_start_t0)
        call.held_ms = (self.clock() - call.cold_start_t0) * 1000.0
        return found

    def _usable(self, key: coldstart.Key) -> catalog.Deployment:
        """The deployment as the view has it (503 `no_backend` when gone or turned off)."""
        found = self.view.catalog.deployments.get(key)
        if found is None or not (found.wakeable or found.replicas):
            what = f"{key[0]}/{key[1]}"
            raise errors.unavailable(f"`{what}` is gone or turned off (spec.replicas 0)")
        return found

    async def _wait(
        self, call: calls.Call, key: coldstart.Key, *, deadline: float
    ) -> catalog.Deployment | None:
        version = self.view.version
        while not call.gone:
            found = self._usable(key)
            if found.replicas or found.starting:
                return found
            left = deadline - self.clock()
            if left <= 0:
                return None
            await self.view.changed(version, timeout_s=min(left, CHECK_GONE_S))
            version = self.view.version
        return None

    def _changed(self) -> None:
        self.metrics.cold_start_waiting.set(self.held.total)
        if self.demand is not None:
            self.demand.publish(self.held.entries())
