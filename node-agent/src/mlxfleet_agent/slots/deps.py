"""What every slot of one agent shares (`Deps`), and what a slot asks of its owner (`Owner`).

The seam between a slot and the rest of the agent: the model catalog (weights on disk, pinned
per backend), the launcher (backend processes), telemetry, and the registry as `Owner` (memory
budget, the record of live backends, persistence of the desired state). Built once by the registry.
May import: the standard library, backends.launcher, models.catalog, telemetry.recorder.
Called by: slots (registry builds it; slot, handles and swap use it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mlxfleet_agent.backends import launcher
from mlxfleet_agent.models import catalog
from mlxfleet_agent.telemetry import recorder


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

    catalog: catalog.Catalog
    launcher: launcher.Launcher
    telemetry: recorder.Telemetry
    owner: Owner
    restart_backoff_max_s: float
    busy_after_s: float = 60.0  # a request waiting this long for its first token: busy
