"""Simulated backends for the real slot code (as kubemark runs the real kubelet).

A hollow node's slots are the agent's own `slots.slot.Slot`, driven by the agent's own
convergence loop and swap protocol (`slots.convergence`, `slots.swap`): cold start, in-place
updates, surge / hold / auto swaps, rollback, backoff, drain and delete are the code users run.
Only what lies below the slot's seam (`slots.deps.Deps`) is simulated here, without a process,
a socket or a thread:
- `Catalog`: the node's model cache (a download takes `timing.download_s`; estimates come from
  the fleet's model table or a `file://` model's own files), pins per backend label;
- `Launcher` / `Backend`: a backend "process" that takes `timing.load_s` to start and
  `timing.warm_s` to answer its warm-up (or fails it: an injected fault), is never watched
  over HTTP (it only ends when stopped) and takes `timing.stop_s` to stop;
- `Telemetry`: nothing is recorded (no request ever reaches a hollow slot).
Each slot runs one asyncio task (its convergence loop) and each ready backend one idle watcher
task, as in the real agent; 500 nodes share one event loop (hollow.server).
May import: the standard library, `mlxfleet_agent` (contract, backends, engines.plugin, models,
runtime.settings, slots). Called by: hollow.node.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Protocol

from mlxfleet_agent import contract
from mlxfleet_agent.backends import process, ranks, readiness
from mlxfleet_agent.engines import plugin
from mlxfleet_agent.models import source, store
from mlxfleet_agent.runtime import settings
from mlxfleet_agent.slots import convergence, deps
from mlxfleet_agent.slots.slot import Slot

_DEFAULTS = settings.Settings.model_fields  # the agent's own defaults
QUEUE_LIMIT: int = _DEFAULTS["queue_limit"].default
BACKOFF_MAX_S: float = _DEFAULTS["restart_backoff_max_s"].default
_ports = itertools.count(41000)
_SIMULATED = Path("/nonexistent/hollow-models")  # no files: the slot reads no tokenizer


class Host(Protocol):
    """What the simulated backends need from their hollow node."""

    async def step(self, seconds: float) -> None: ...

    async def ensure(self, spec: contract.SlotSpec, *, holder: str) -> contract.CachedModel: ...

    def release(self, holder: str) -> None: ...

    def estimate(self, spec: contract.SlotSpec, cached: contract.CachedModel) -> int: ...

    def file_dir(self, source: str) -> Path: ...

    def load_fault(self, spec: contract.SlotSpec) -> str | None: ...

    @property
    def timing_load_s(self) -> float: ...

    @property
    def timing_warm_s(self) -> float: ...

    @property
    def timing_stop_s(self) -> float: ...


class Catalog:
    """The node's simulated model cache (`slots.deps.Catalog`)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._models: dict[Path, contract.CachedModel] = {}

    async def ensure(
        self,
        src: source.Source,
        *,
        holder: str,
        progress: store.ProgressCallback | None = None,
    ) -> Path:
        spec = contract.SlotSpec(source=src.text, revision=src.revision, served_name="x")
        cached = await self.host.ensure(spec, holder=holder)
        if src.text.startswith("file://"):
            model_dir = self.host.file_dir(src.text)
        else:
            model_dir = _SIMULATED / cached.id
        self._models[model_dir] = cached
        return model_dir

    def release(self, holder: str) -> None:
        self.host.release(holder)

    def estimate(self, spec: contract.SlotSpec, model_dir: Path) -> int:
        return self.host.estimate(spec, self._models[model_dir])


class Backend(process.Backend):
    """A simulated backend "process": no process, no port bound, no log file."""

    def __init__(
        self, launch: plugin.Launch, *, spec: contract.SlotSpec, label: str, host: Host
    ) -> None:
        self.spec = spec
        self.label = label  # no super().__init__: it would bind a port for a process
        self.port = next(_ports)
        self.launch = launch
        self.log_path = Path("/dev/null")
        self.stop_signal = launch.stop_signal
        self.proc = None
        self.stopping = False
        self._stop_logged = False
        self.host = host
        self.running = False
        self.exited = asyncio.Event()

    def alive(self) -> bool:
        return self.running and not self.exited.is_set()

    async def start(self) -> None:
        await self.host.step(self.host.timing_load_s)
        self.running = True

    async def wait_exit(self) -> int:
        await self.exited.wait()
        return 0

    async def stop(self, *, grace_s: float) -> None:
        if self.stopping and self.exited.is_set():
            return
        self.stopping = True
        if self.running:
            await self.host.step(self.host.timing_stop_s)
        self.exited.set()

    def kill(self, why: str) -> None:
        self.exited.set()

    def log_tail(self, lines: int = 20) -> str:
        return "(hollow backend: no log)"


class Launcher:
    """Starts, warms and stops simulated backends (`slots.deps.Launcher`)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.load_timeout_s = 600.0

    def check(self, engine: contract.EngineSpec) -> None:
        """A hollow Mac runs every engine it is asked to (it runs none)."""

    def rank_refused(self, shard: contract.RankSpec | None) -> str | None:
        return None if shard is None else ranks.check_address(shard, "127.0.0.1")

    def backend(
        self, *, model_dir: Path, spec: contract.SlotSpec, label: str
    ) -> tuple[process.Backend, Sequence[plugin.Probe]]:
        launch = plugin.Launch(argv=("hollow",), upstream_model=str(model_dir))
        return Backend(launch, spec=spec, label=label, host=self.host), ()

    def guard_accept(self, backend: process.Backend, shard: contract.RankSpec) -> Awaitable[None]:
        return asyncio.sleep(0)

    async def warm_up(
        self, backend: process.Backend, probes: Sequence[plugin.Probe]
    ) -> readiness.Warm:
        await self.host.step(self.host.timing_warm_s)
        assert isinstance(backend, Backend)
        fault = self.host.load_fault(backend.spec)
        if fault is not None:
            raise readiness.NotReady(fault)
        return readiness.Warm(seconds=self.host.timing_warm_s, fingerprint=None)

    async def watch(self, backend: process.Backend, shard: contract.RankSpec | None) -> str:
        code = await backend.wait_exit()
        return f"backend exited with code {code}"

    async def stop(self, backend: process.Backend, *, grace_s: float | None = None) -> None:
        await backend.stop(grace_s=0.0)


class Telemetry:
    """Records nothing (`slots.deps.Telemetry`): no request reaches a hollow slot."""

    def backend_restarted(self, slot: str) -> None:
        pass

    def swap_finished(
        self, *, slot: str, outcome: str, record: contract.SwapRecord | None = None
    ) -> None:
        pass

    def observe_slot(
        self, slot: str, *, model: str, source: str | None = None, namespace: str | None = None
    ) -> None:
        pass

    def forget_slot(self, slot: str) -> None:
        pass


def new_slot(name: str, spec: contract.SlotSpec, *, shared: deps.Deps) -> Slot:
    """A real slot on simulated backends, its real convergence loop started."""
    slot = Slot(name, spec, source.of(spec), deps=shared, queue_limit=QUEUE_LIMIT)
    slot.start(convergence.run)
    return slot
