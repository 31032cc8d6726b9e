"""What every slot of one agent shares (`Deps`), and what a slot asks of its owner (`Owner`).

The seam between a slot and the rest of the agent: the model catalog (weights on disk, pinned
per backend), the launcher (backend processes), telemetry, and the registry as `Owner` (memory
budget, the record of live backends, persistence of the desired state). Built once by the registry.
Each is a protocol of what the slots ask of it, which `models.catalog.Catalog`,
`backends.launcher.Launcher` and `telemetry.recorder.Telemetry` implement, and the hollow agents
of the scale tests implement over simulated backends (tests/support/hollow/slots.py): they run
the real slot code, as kubemark runs the real kubelet.
May import: the standard library, contract, backends (process, readiness), engines.plugin,
models (source, store).
Called by: slots (registry builds it; slot, handles and swap use it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mlxfleet_agent import contract
from mlxfleet_agent.backends import process, readiness
from mlxfleet_agent.engines import plugin
from mlxfleet_agent.models import source, store


class Catalog(Protocol):
    """Weights on disk, pinned per backend label (`models.catalog.Catalog`)."""

    async def ensure(
        self, src: source.Source, *, holder: str, progress: store.ProgressCallback | None = None
    ) -> Path: ...

    def release(self, holder: str) -> None: ...

    def estimate(self, spec: contract.SlotSpec, model_dir: Path) -> int: ...


class Launcher(Protocol):
    """Starts, warms, watches and stops backends (`backends.launcher.Launcher`)."""

    load_timeout_s: float

    def check(self, engine: contract.EngineSpec) -> None: ...

    def rank_refused(self, shard: contract.RankSpec | None) -> str | None: ...

    def guard_accept(
        self, backend: process.Backend, shard: contract.RankSpec
    ) -> Awaitable[None]: ...

    def backend(
        self, *, model_dir: Path, spec: contract.SlotSpec, label: str
    ) -> tuple[process.Backend, Sequence[plugin.Probe]]: ...

    async def warm_up(
        self, backend: process.Backend, probes: Sequence[plugin.Probe]
    ) -> readiness.Warm: ...

    async def watch(self, backend: process.Backend, shard: contract.RankSpec | None) -> str: ...

    async def stop(self, backend: process.Backend, *, grace_s: float | None = None) -> None: ...


class Telemetry(Protocol):
    """What slots record (`telemetry.recorder.Telemetry`)."""

    def backend_restarted(self, slot: str) -> None: ...

    def swap_finished(
        self, *, slot: str, outcome: str, record: contract.SwapRecord | None = None
    ) -> None: ...

    def observe_slot(
        self, slot: str, *, model: str, source: str | None = None, namespace: str | None = None
    ) -> None: ...

    def forget_slot(self, slot: str) -> None: ...


class Owner(Protocol):
    """What a slot asks of the registry that owns it (the registry implements this)."""

    def budget(self) -> int:
        """Bytes all slots together may use."""
        ...

    def others_estimate(self, name: str) -> int:
        """Bytes the other slots' backends hold now."""
        ...

    def backends_changed(self) -> None:
        """A backend process started or stopped (the registry records the live ones)."""
        ...

    def persist(self) -> None:
        """A slot's desired spec changed on its own (rollback): save the desired state."""
        ...


@dataclass(frozen=True, slots=True)
class Deps:
    """What every slot of one agent shares; built once by the registry."""

    catalog: Catalog
    launcher: Launcher
    telemetry: Telemetry
    owner: Owner
    restart_backoff_max_s: float
    busy_after_s: float = 60.0  # a request waiting this long for its first token: busy
