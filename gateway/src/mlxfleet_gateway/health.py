"""Active health: a fast liveness probe of every agent the gateway routes to.

Every `interval_s` each agent origin gets `GET /healthz` on its data plane (answered by the
agent's own event loop, over a kept-alive connection, driven by callbacks) with a `timeout_s`
bound on connect and answer. A probe that fails ejects every replica on that agent at once (no
new request goes there) and tells the proxy's `liveness.Origins`, which moves the requests still
waiting for their first byte there once the agent has been silent for `move_after_s`; this is
what catches a frozen (SIGSTOPped, hung, asleep) Mac, whose kernel still accepts connections. An
ejected agent comes back after its minimum ejection when a probe succeeds again. External
backends are not probed (they come back when their ejection ends; the next failure ejects again).
One probe per agent is in flight at a time, so detection takes at most interval + timeout. An
agent that sent answer bytes within the last interval is alive and is not probed (under load the
probes cost nothing).
May import: the standard library, mlxfleet_common.wire (httpclient, healthcheck), core.balancer,
metrics. Called by: server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from mlxfleet_common.wire import healthcheck
from mlxfleet_common.wire import httpclient as upstream
from mlxfleet_gateway import metrics
from mlxfleet_gateway.core import balancer

log = logging.getLogger("mlxfleet_gateway.health")


class Prober:
    def __init__(
        self,
        *,
        balance: balancer.Balancer,
        gauges: metrics.GatewayMetrics,
        on_dead: Callable[[str], None],
        on_alive: Callable[[str], None],
        last_heard: Callable[[str], float] = lambda origin: 0.0,
        interval_s: float = 0.2,
        timeout_s: float = 0.5,
        pool: upstream.Pool | None = None,
    ) -> None:
        self.pool = pool
        self.balancer = balance
        self.metrics = gauges
        self.on_dead = on_dead
        self.on_alive = on_alive
        self.last_heard = last_heard
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.checks: dict[str, healthcheck.HealthCheck] = {}
        self._task: asyncio.Task[None] | None = None

    def origins(self) -> tuple[set[str], set[str]]:
        """(agent origins to probe, external origins) known to the balancer."""
        agents: set[str] = set()
        externals: set[str] = set()
        for cid, state in self.balancer.states.items():
            (externals if cid.startswith("external:") else agents).add(state.origin)
        return agents, externals

    def _check(self, origin_url: str) -> healthcheck.HealthCheck:
        check = self.checks.get(origin_url)
        if check is None:
            origin, base = upstream.Origin.from_url(origin_url)
            check = self.checks[origin_url] = healthcheck.HealthCheck(
                origin,
                base + "/healthz",
                timeout_s=self.timeout_s,
                on_result=lambda ok, why: self.result(origin_url, ok, why),
            )
        return check

    def result(self, origin_url: str, ok: bool, why: str) -> None:
        """One probe's outcome: bring the agent back, or eject it and tell liveness (on_dead)."""
        now = time.monotonic()
        if ok:
            self.on_alive(origin_url)
            for cid in self.balancer.probe_ok(origin_url, now=now):
                log.info("replica back in rotation", extra={"replica": cid})
                self.metrics.replica_up.labels(cid).set(1)
            return
        for cid in self.balancer.probe_failed(origin_url, now=now, reason="unresponsive"):
            log.warning("replica ejected: agent unresponsive", extra={"replica": cid, "why": why})
            self.metrics.ejections.labels(cid, "unresponsive").inc()
            self.metrics.replica_up.labels(cid).set(0)
        if self.pool is not None:
            self.pool.drop(upstream.Origin.from_url(origin_url)[0])
        self.on_dead(origin_url)

    def tick(self) -> None:
        """Fire the probes due now (one per agent at a time; none for one heard from just now)."""
        agents, externals = self.origins()
        now = time.monotonic()
        for origin in agents:
            if now - self.last_heard(origin) < self.interval_s:
                continue  # it sent answer bytes just now: alive, no probe needed
            self._check(origin).fire()
        for gone in set(self.checks) - agents:
            self.checks.pop(gone).close()
        for origin in externals & self.balancer.ejected_origins(now=now):
            for cid in self.balancer.probe_ok(origin, now=now):
                self.metrics.replica_up.labels(cid).set(1)

    async def _run(self) -> None:
        while True:
            try:
                self.tick()
            except Exception:  # the prober must never stop
                log.exception("probe tick failed")
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for check in self.checks.values():
            check.close()
        self.checks.clear()
