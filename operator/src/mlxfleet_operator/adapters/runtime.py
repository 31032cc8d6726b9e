"""Everything the handlers share in one operator process: settings, the Kubernetes facade, the
fleet view and per-object locks. Lives in kopf's memo (`memo["runtime"]`).

May import: the standard library, sibling adapters, `mlxfleet_operator.settings`.
Called by: `main` (builds it with `start(config)` before kopf runs) and handlers (every one
reads it with `of(memo)`; `lifecycle` closes it).
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import fleet, kube, metrics

KEY = "runtime"


def now() -> datetime:
    """The one clock of the operator (core functions get it as an argument)."""
    return datetime.now(UTC).replace(microsecond=0)


@dataclass
class Runtime:
    config: opsettings.OperatorSettings
    kube: kube.Kube
    fleet: fleet.Fleet
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    announced: dict[str, str] = field(default_factory=dict)

    def lock(self, uid: str) -> asyncio.Lock:
        """One reconcile at a time per object (a timer and an event handler may overlap)."""
        return self.locks.setdefault(uid, asyncio.Lock())

    def first_time(self, uid: str, what: str) -> bool:
        """True once per (object, announcement): handlers may run on a body that predates
        their own last status patch, so status alone cannot tell an Event was already sent."""
        if self.announced.get(uid) == what:
            return False
        self.announced[uid] = what
        return True

    async def aclose(self) -> None:
        await self.fleet.aclose()
        self.kube.close()


def start(config: opsettings.OperatorSettings) -> Runtime:
    api = kube.client_from(config.kubeconfig)
    k = kube.Kube(api)
    if config.metrics_port is not None:
        metrics.serve(config.metrics_host, config.metrics_port)
    return Runtime(config=config, kube=k, fleet=fleet.Fleet(k))


def of(memo: MutableMapping[str, Any]) -> Runtime:
    found = memo.get(KEY)
    if not isinstance(found, Runtime):
        raise RuntimeError("operator runtime missing: run the handlers through mlxfleet-operator")
    return found
