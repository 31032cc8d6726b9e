"""All slots of this agent: admission of a desired slot, its persistence, routing by served name.

`Registry.apply` validates a desired slot (served name unique, the source parsed and a file://
path under an allowed root, memory fit: 507), persists it atomically and only then hands it to
the slot's convergence loop: a spec that fails any check, or a state file that cannot be
written, changes nothing (never a half-applied slot); identical specs are no-ops (declarative,
idempotent). Refusals are `refusals.Rejected` / `refusals.NoFit`, mapped to HTTP by the control
API. The registry is the slots' `Owner` (memory budget, backend records, persistence) and the
data plane's `lease.Routes`.
May import: the standard library, contract, sizing, refusals, host.platform, backends
(launcher, orphans), engines.plugin (EngineRefused), models (catalog, errors, source),
telemetry.recorder, slots (deps, slot, convergence, statefile). Called by: runtime (builds it),
controlapi (slot routes, state).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from mlxfleet_agent import contract, refusals, sizing
from mlxfleet_agent.backends import launcher, orphans
from mlxfleet_agent.engines import plugin
from mlxfleet_agent.host import platform
from mlxfleet_agent.models import catalog, errors, source
from mlxfleet_agent.slots import convergence, deps, statefile
from mlxfleet_agent.slots.slot import Slot
from mlxfleet_agent.telemetry import recorder

log = logging.getLogger(__name__)


class Registry:
    """The slots of one agent (see the module docstring)."""

    def __init__(
        self,
        *,
        state_dir: Path,
        catalog: catalog.Catalog,
        launcher: launcher.Launcher,
        telemetry: recorder.Telemetry,
        queue_limit: int,
        memory_budget: int | None,
        restart_backoff_max_s: float,
        busy_after_s: float = 60.0,
    ) -> None:
        self.state_dir = state_dir
        self.catalog = catalog
        self.queue_limit = queue_limit
        self.memory_budget = memory_budget
        self.slots: dict[str, Slot] = {}
        self._deps = deps.Deps(
            catalog=catalog,
            launcher=launcher,
            telemetry=telemetry,
            owner=self,
            restart_backoff_max_s=restart_backoff_max_s,
            busy_after_s=busy_after_s,
        )

    # ---- lifecycle ----------------------------------------------------------------------------

    def restore(self) -> list[str]:
        """Bring back the persisted slots (after a crash or reboot); returns their names."""
        for name, spec in statefile.load(self.state_dir).items():
            try:
                src = source.of(spec)
            except errors.StoreError as exc:
                log.error("persisted slot not restored", extra={"slot": name, "error": str(exc)})
                continue
            self._create(name, spec, src)
        return sorted(self.slots)

    def begin_shutdown(self) -> None:
        """Queued requests are answered 503 now; in-flight ones go on (the data plane drains)."""
        for slot in self.slots.values():
            slot.begin_shutdown()

    async def close(self) -> None:
        """Stop every slot's loop and backend (after the data plane and control API stopped)."""
        await asyncio.gather(*(s.close() for s in self.slots.values()))
        self.backends_changed()

    # ---- routing (lease.Routes) -----------------------------------------------------------------

    def route(self, served_name: str) -> Slot | None:
        for slot in self.slots.values():
            follower = slot.desired.shard is not None and not slot.desired.shard.leader
            if slot.desired.served_name == served_name and not slot.deleted and not follower:
                return slot
        return None

    def slot_route(self, slot: str) -> Slot | None:
        found = self.slots.get(slot)
        return found if found is not None and not found.deleted else None

    def served_names(self) -> list[str]:
        return [s.desired.served_name for s in self.slots.values() if not s.deleted]

    def serving(self) -> bool:
        return any(
            s.active is not None and s.refusal() is None and s is self.route(s.desired.served_name)
            for s in self.slots.values()
        )

    # ---- desired state ------------------------------------------------------------------------

    def get(self, name: str) -> Slot:
        slot = self.slots.get(name)
        if slot is None:
            raise refusals.Rejected(404, f"no slot named {name}", field="name")
        return slot

    def apply(
        self, name: str, spec: contract.SlotSpec, *, request_id: str | None = None
    ) -> tuple[contract.SlotStatus, bool]:
        """Set the desired spec of slot `name`; returns (status, changed). `request_id`: the
        caller's id for the swap this may start (its record echoes it); given again with the same
        spec before that swap began, it replaces the id the swap will carry."""
        existing = self.slots.get(name)
        if existing is not None and existing.deleted:
            raise refusals.Rejected(
                503, f"slot {name} is being deleted; retry when it is gone", field="name"
            )
        for other in self.slots.values():
            if (
                other.name != name
                and not other.deleted
                and other.desired.served_name == spec.served_name
            ):
                raise refusals.Rejected(
                    409,
                    # never the other slot's name: it may be another tenant's
                    f"servedName {spec.served_name!r} is already served by another slot here",
                    field="servedName",
                )
        if existing is not None and existing.desired == spec:
            if request_id is not None:
                existing.request_id = request_id
            return existing.status(), False
        try:
            self._deps.launcher.check(spec.engine)
        except plugin.EngineRefused as exc:
            raise refusals.Rejected(422, str(exc), field="engine") from exc
        refused = self._deps.launcher.rank_refused(spec.shard)
        if refused is not None:
            raise refusals.Rejected(422, refused, field="shard.hosts")
        src = self.catalog.admit(spec)
        self._check_fit(name, spec, src)
        self._save({**self._desired(), name: spec})  # first: if it fails, nothing changed
        if existing is None:
            slot = self._create(name, spec, src)
        else:
            existing.want(spec, src, request_id=request_id)
            slot = existing
        return slot.status(), True

    def delete(self, name: str) -> contract.SlotStatus:
        slot = self.get(name)
        if not slot.deleted:
            self._save({n: s for n, s in self._desired().items() if n != name})
            slot.delete()
            asyncio.get_running_loop().create_task(self._forget(slot))
        return slot.status()

    async def _forget(self, slot: Slot) -> None:
        await slot.wait_stopped()
        if self.slots.get(slot.name) is slot:
            del self.slots[slot.name]
        self.backends_changed()

    def _create(self, name: str, spec: contract.SlotSpec, src: source.Source) -> Slot:
        slot = Slot(name, spec, src, deps=self._deps, queue_limit=self.queue_limit)
        self.slots[name] = slot
        slot.start(convergence.run)
        return slot

    def _desired(self) -> dict[str, contract.SlotSpec]:
        return {n: s.desired for n, s in self.slots.items() if not s.deleted}

    def _save(self, specs: dict[str, contract.SlotSpec]) -> None:
        """Write the desired state it is about to adopt; 503 (and no change) if it cannot."""
        try:
            statefile.save(self.state_dir, specs)
        except (OSError, ValueError) as exc:
            raise refusals.Rejected(
                503, f"cannot save the desired state in {self.state_dir}: {exc}; nothing changed"
            ) from exc

    # ---- slot.Owner -----------------------------------------------------------------------------

    def persist(self) -> None:
        statefile.save(self.state_dir, self._desired())

    def backends_changed(self) -> None:
        pids = [pid for s in self.slots.values() for pid in s.backend_pids()]
        orphans.record(self.state_dir, pids)

    def budget(self) -> int:
        if self.memory_budget is not None:
            return self.memory_budget
        return sizing.budget_bytes(platform.memory().total_bytes)

    def others_estimate(self, name: str) -> int:
        return sum(s.estimate() for n, s in self.slots.items() if n != name)

    def estimate(self) -> int:
        """Memory every slot's backends hold now."""
        return sum(s.estimate() for s in self.slots.values())

    def _check_fit(self, name: str, spec: contract.SlotSpec, src: source.Source) -> None:
        estimate = spec.memory_bytes or self.catalog.local_estimate(spec, src)
        if estimate is None:
            return  # not on disk yet: checked again after the download
        budget = self.budget()
        free = max(0, budget - self.others_estimate(name))
        if estimate > free:
            raise refusals.NoFit(estimate=estimate, budget=budget, free=free)

    def statuses(self) -> list[contract.SlotStatus]:
        return [s.status() for s in sorted(self.slots.values(), key=lambda s: s.name)]
