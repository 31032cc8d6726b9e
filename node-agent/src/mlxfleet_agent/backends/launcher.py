"""What every backend of one agent shares: the interpreter, the log folder, the load and stop
timeouts, the health poll interval (each poll a `healthcheck.HealthCheck`) and the HTTP client of
warm-ups. The slots ask it for backends.

`backend(...)` makes a (not yet started) backend of the slot's engine for a model directory,
`warm_up(...)` waits until it answers its engine's probes (`readiness`), `watch(...)` returns
once a serving one stops serving (exit, or its health endpoint says no), `stop(...)` stops it
within the grace period (the engine's own grace when longer, vLLM's 30 s). The engine
specifics come from `engines.registry`; `check` refuses an engine this node cannot run; `engines` is
what discovery found at start (GET /v1/state).
A rank of a sharded group gets mlx.distributed's environment (`ranks`) on top of its engine's.
May import: httpx, the standard library, contract, engines (plugin, registry), backends
(ranks, process, readiness).
Called by: slots (the slot's primitives), runtime (builds and closes it).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Awaitable, Sequence
from pathlib import Path

import httpx

from mlxfleet_agent import contract
from mlxfleet_agent.backends import process, ranks, readiness
from mlxfleet_agent.engines import plugin, registry


class Launcher:
    """Starts, warms and stops the backends of one agent."""

    def __init__(
        self,
        *,
        log_dir: Path,
        python: str | None = None,
        load_timeout_s: float,
        stop_grace_s: float,
        health_interval_s: float = 2.0,
        engines: Sequence[contract.EngineInfo] | None = None,
        command_programs: Sequence[str] = (),
        command_env: frozenset[str] = contract.COMMAND_ENV_NAMES,
        fabric_address: str | None = "127.0.0.1",
        rank_accept_timeout_s: float = 60.0,
    ) -> None:
        self.log_dir = log_dir
        self.fabric_address = fabric_address  # where this agent's ranks listen (None: no ranks)
        self.rank_accept_timeout_s = rank_accept_timeout_s
        self.python = python or sys.executable
        # without discovery (tests, embedders of the launcher): the MLX engines, as before
        self.engines = list(engines) if engines is not None else _mlx_only()
        self.host = plugin.Host(
            python=self.python,
            command_programs=tuple(command_programs),
            command_env=command_env,
            runnable=frozenset(e.name for e in self.engines if e.available),
            reasons=tuple((e.name, e.reason) for e in self.engines if not e.available),
        )
        self.load_timeout_s = load_timeout_s
        self.stop_grace_s = stop_grace_s
        self.health_interval_s = health_interval_s  # each poll is a line in the backend's log
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=60.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            trust_env=False,
        )

    def check(self, engine: contract.EngineSpec) -> None:
        """plugin.EngineRefused unless this node can run `engine`."""
        registry.check(engine, self.host)

    def rank_refused(self, shard: contract.RankSpec | None) -> str | None:
        """Why this agent may not run the rank (None: it may, or the slot is no rank)."""
        return None if shard is None else ranks.check_address(shard, self.fabric_address)

    def guard_accept(self, backend: process.Backend, shard: contract.RankSpec) -> Awaitable[None]:
        """Kill the started rank if it still waits for its ring peers after the timeout."""
        return ranks.guard_accept(
            pid=lambda: backend.pid,
            alive=backend.alive,
            kill=backend.kill,
            spec=shard,
            timeout_s=self.rank_accept_timeout_s,
        )

    def backend(
        self, *, model_dir: Path, spec: contract.SlotSpec, label: str
    ) -> tuple[process.Backend, Sequence[plugin.Probe]]:
        """A backend process of the spec's engine for `model_dir` (not started yet), and the
        probes that say it is ready (`spec.shard`: one rank of a group, started with
        mlx.distributed's environment; see `ranks`)."""
        shard_env = (
            None
            if spec.shard is None
            else ranks.environment(spec.shard, run_dir=self.log_dir / "ranks")
        )

        def launch(port: int) -> plugin.Launch:
            made = registry.launch(spec, model_dir, port, self.host)
            if shard_env is None:
                return made
            return dataclasses.replace(made, env={**made.env, **shard_env})

        backend = process.Backend(
            launch,
            label=label,
            log_dir=self.log_dir,
        )
        return backend, registry.probes(spec, upstream_model=backend.launch.upstream_model)

    async def warm_up(
        self, backend: process.Backend, probes: Sequence[plugin.Probe]
    ) -> readiness.Warm:
        """Wait until the started backend answers its probes (NotReady otherwise)."""
        return await readiness.warm_up(
            self._client,
            backend.base_url,
            probes=probes,
            alive=backend.alive,
            timeout_s=self.load_timeout_s,
        )

    async def watch(self, backend: process.Backend, shard: contract.RankSpec | None) -> str:
        """Return (why) once a serving backend stops serving: its process exits, or its engine's
        health endpoint (`Launch.health_path`) says no (mlx_lm whose generation thread died;
        rank 0 of a group that lost a peer, polled faster, silence counted). A follower rank has
        no HTTP: only its exit is watched."""
        path = backend.launch.health_path
        if path is not None and (shard is None or shard.leader):
            why = await readiness.watch_health(
                backend.base_url + path,
                alive=backend.alive,
                interval_s=self.health_interval_s if shard is None else ranks.HEALTH_INTERVAL_S,
                silent_limit=None if shard is None else ranks.SILENT_LIMIT,
            )
            if why is not None:
                return f"backend {why}" if shard is None else f"rank 0 {why}: a peer rank was lost"
        code = await backend.wait_exit()
        if shard is None:
            return f"backend exited with code {code}"
        return f"rank {shard.rank} exited with code {code}: a peer rank was lost"

    async def stop(self, backend: process.Backend, *, grace_s: float | None = None) -> None:
        if grace_s is None:
            grace_s = max(self.stop_grace_s, backend.launch.stop_grace_s)
        await backend.stop(grace_s=grace_s)

    async def aclose(self) -> None:
        await self._client.aclose()


def _mlx_only() -> list[contract.EngineInfo]:
    names = (
        contract.EngineName.MLX_LM,
        contract.EngineName.MLX_EMBED,
        contract.EngineName.MLX_RERANK,
    )
    return [contract.EngineInfo(name=n.value, available=True, reason="assumed") for n in names]
