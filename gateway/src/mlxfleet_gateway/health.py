"""Active health: a fast liveness probe of every agent the gateway routes to.

Every `interval_s` each agent origin gets `GET /healthz` on its data plane (answered by the
agent's own event loop, over a pooled keep-alive connection) with a `timeout_s` bound on connect
and answer. A probe that fails ejects every replica on that agent at once and tells the proxy,
which moves requests still waiting for their first byte there to another replica; this is what
catches a frozen (SIGSTOPped, hung, asleep) Mac, whose kernel still accepts connections. An
ejected agent comes back after its minimum ejection when a probe succeeds again. External
backends are not probed (they come back when their ejection ends; the next failure ejects again).
One probe per agent is in flight at a time, so detection takes at most interval + timeout.
May import: the standard library, upstream, core.balancer, metrics. Called by: server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from mlxfleet_gateway import metrics, upstream
from mlxfleet_gateway.core import balancer

log = logging.getLogger("mlxfleet_gateway.health")


class Prober:
    def __init__(
        self,
        *,
        pool: upstream.Pool,
        balance: balancer.Balancer,
        gauges: metrics.GatewayMetrics,
        on_dead: Callable[[str], None],
        on_alive: Callable[[str], None],
        interval_s: float = 0.2,
        timeout_s: float = 0.5,
    ) -> None:
        self.pool = pool
        self.balancer = balance
        self.metrics = gauges
        self.on_dead = on_dead
        self.on_alive = on_alive
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._busy: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._probes: set[asyncio.Task[None]] = set()

    def origins(self) -> tuple[set[str], set[str]]:
        """(agent origins to probe, external origins) known to the balancer."""
        agents: set[str] = set()
        externals: set[str] = set()
        for cid, state in self.balancer.states.items():
            (externals if cid.startswith("external:") else agents).add(state.origin)
        return agents, externals

    async def probe(self, origin_url: str) -> None:
        origin, base = upstream.Origin.from_url(origin_url)
        ok, why = False, ""
        try:
            resp = await self.pool.request(
                origin,
                b"GET",
                (base + "/healthz").encode(),
                connect_timeout_s=self.timeout_s,
                head_timeout_s=self.timeout_s,
            )
            await asyncio.wait_for(resp.read(4096), self.timeout_s)
            ok, why = resp.status == 200, f"healthz answered {resp.status}"
        except (upstream.UpstreamError, TimeoutError) as exc:
            why = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if ok:
            self.on_alive(origin_url)
            for cid in self.balancer.probe_ok(origin_url, now=now):
                log.info("replica back in rotation", extra={"replica": cid})
                self.metrics.replica_up.labels(cid).set(1)
            return
        ejected = self.balancer.probe_failed(origin_url, now=now, reason="unresponsive")
        for cid in ejected:
            log.warning("replica ejected: agent unresponsive", extra={"replica": cid, "why": why})
            self.metrics.ejections.labels(cid, "unresponsive").inc()
            self.metrics.replica_up.labels(cid).set(0)
        self.pool.drop(origin)
        self.on_dead(origin_url)

    async def _one(self, origin: str) -> None:
        try:
            await self.probe(origin)
        except Exception:  # a probe must never take the prober down
            log.exception("probe of %s failed unexpectedly", origin)
        finally:
            self._busy.discard(origin)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            agents, externals = self.origins()
            now = time.monotonic()
            for origin in agents - self._busy:
                self._busy.add(origin)
                task = loop.create_task(self._one(origin))
                self._probes.add(task)
                task.add_done_callback(self._probes.discard)
            for origin in externals & self.balancer.ejected_origins(now=now):
                for cid in self.balancer.probe_ok(origin, now=now):
                    self.metrics.replica_up.labels(cid).set(1)
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        for task in [self._task, *self._probes]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
