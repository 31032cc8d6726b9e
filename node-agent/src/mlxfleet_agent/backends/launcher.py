"""What every backend of one agent shares: the interpreter, the log folder, the load and stop
timeouts and the HTTP client of warm-ups. The slots ask it for backends.

`backend(...)` makes a (not yet started) mlx-lm backend for a model directory, `warm_up(...)`
waits until it answers a completion (`readiness`), `stop(...)` stops it within the grace period.
The engine specifics come from `mlxlm` (one place to plug another engine in).
May import: httpx, the standard library, contract, backends (mlxlm, process, readiness).
Called by: slots (the slot's primitives), runtime (builds and closes it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from mlxfleet_agent import contract
from mlxfleet_agent.backends import mlxlm, process, readiness


class Launcher:
    """Starts, warms and stops the backends of one agent."""

    def __init__(
        self,
        *,
        log_dir: Path,
        python: str | None = None,
        load_timeout_s: float,
        stop_grace_s: float,
    ) -> None:
        self.log_dir = log_dir
        self.python = python or sys.executable
        self.load_timeout_s = load_timeout_s
        self.stop_grace_s = stop_grace_s
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=60.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            trust_env=False,
        )

    def backend(
        self,
        *,
        model_dir: Path,
        options: contract.ServerOptions,
        max_concurrency: int,
        label: str,
    ) -> process.Backend:
        """A backend process for `model_dir`, not started yet."""
        launch = mlxlm.LaunchSpec(
            model_dir=model_dir,
            options=options,
            max_concurrency=max_concurrency,
            python=self.python,
        )
        return process.Backend(
            lambda port: mlxlm.command(launch, port=port),
            label=label,
            log_dir=self.log_dir,
            stop_signal=mlxlm.STOP_SIGNAL,
        )

    async def warm_up(self, backend: process.Backend) -> readiness.Warm:
        """Wait until the started backend answers a completion (NotReady otherwise)."""
        return await readiness.warm_up(
            self._client,
            backend.base_url + mlxlm.WARMUP_PATH,
            body=mlxlm.WARMUP_BODY,
            alive=backend.alive,
            timeout_s=self.load_timeout_s,
        )

    async def stop(self, backend: process.Backend, *, grace_s: float | None = None) -> None:
        await backend.stop(grace_s=self.stop_grace_s if grace_s is None else grace_s)

    async def aclose(self) -> None:
        await self._client.aclose()
