"""The zero-drop swap protocol of one slot: surge, hold, auto, rollback; and its SwapRecord.

- surge: start B beside A, warm B, switch the route atomically (`Slot.switch`), drain A's
  in-flight requests (bounded by drainTimeoutSeconds), stop A.
- hold: shut the gate (new requests queue), drain and stop A, load and warm B, switch (the queue
  is released to B).
- auto: surge when the other slots + A + B fit the memory budget, else hold (`choose`, pure).
- rollback: B fails to become ready: A keeps serving (surge) or is restarted (hold); the desired
  spec reverts to A's and the record says RolledBack with the reason. If A cannot come back
  either, the outcome is Failed and the slot retries with backoff.
May import: contract, slots, supervisor, stdlib. Called by: slots (its convergence loop).
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from mlxfleet_agent import contract, slots, supervisor

log = logging.getLogger(__name__)
Strategy = contract.SwapStrategy


class DoesNotFit(RuntimeError):
    """The new model does not fit the memory budget even on its own (hold)."""


def choose(requested: Strategy, *, others: int, old: int, new: int, budget: int) -> Strategy:
    """What `auto` means here and now (pure): surge if A and B fit side by side, else hold."""
    if requested is not Strategy.AUTO:
        return requested
    return Strategy.SURGE if others + old + new <= budget else Strategy.HOLD


def fits_alone(*, others: int, new: int, budget: int) -> bool:
    return others + new <= budget


def _now() -> datetime:
    return datetime.now(UTC)


def new_record(
    slot_name: str, *, old: contract.SlotSpec, new: contract.SlotSpec
) -> contract.SwapRecord:
    return contract.SwapRecord(
        id=uuid.uuid4().hex[:12],
        slot=slot_name,
        requested_strategy=new.swap.strategy,
        strategy=new.swap.strategy,
        from_source=old.source,
        from_revision=old.revision,
        to_source=new.source,
        to_revision=new.revision,
        started_at=_now(),
    )


async def run(slot: slots.Slot, target: contract.SlotSpec) -> contract.SwapRecord:
    """Swap `slot` from its active backend to `target`; never raises for a failed B."""
    old = slot.active
    assert old is not None, "swap needs a serving backend; cold start otherwise"
    record = new_record(slot.name, old=old.spec, new=target)
    slot.swaps.appendleft(record)
    slot.current_swap = record
    slot.phase = contract.SlotPhase.SWAPPING
    deps = slot.deps
    try:
        model_dir = await deps.models.ensure(target)
        new_est = target.memory_bytes or deps.models.estimate(target, model_dir)
        others, budget = deps.others_estimate(slot.name), deps.budget()
        if not fits_alone(others=others, new=new_est, budget=budget):
            raise DoesNotFit(
                f"estimate {new_est} bytes + other slots {others} exceed the budget {budget}"
            )
        record.strategy = choose(
            target.swap.strategy, others=others, old=old.estimate, new=new_est, budget=budget
        )
        log.info(
            "swap started",
            extra={"slot": slot.name, "swap": record.id, "strategy": str(record.strategy)},
        )
        if record.strategy is Strategy.SURGE:
            await _surge(slot, old, target, record)
        else:
            await _hold(slot, old, target, record)
        record.outcome = contract.SwapOutcome.COMPLETED
        slot.last_error = None
    except Exception as exc:
        await _roll_back(slot, old, target, record, reason=f"{type(exc).__name__}: {exc}")
    finally:
        record.finished_at = _now()
        slot.current_swap = None
        if slot.active is not None and slot.gate.is_set():
            slot.phase = contract.SlotPhase.READY
        deps.telemetry.swap_finished(slot=slot.name, outcome=str(record.outcome), record=record)
        log.info(
            "swap finished",
            extra={
                "slot": slot.name,
                "swap": record.id,
                "outcome": str(record.outcome),
                "served": record.requests_served,
                "failed": record.requests_failed,
                "max_queue_wait_ms": round(record.max_queue_wait_ms, 1),
            },
        )
    return record


async def _surge(
    slot: slots.Slot, old: slots.Handle, target: contract.SlotSpec, record: contract.SwapRecord
) -> None:
    new = await slot.load(target)
    record.new_ready_at = _now()
    slot.switch(new)
    slot.phase = contract.SlotPhase.SWAPPING
    record.switched_at = _now()
    await slot.drain(old, timeout_s=float(target.swap.drain_timeout_seconds))
    record.old_drained_at = _now()
    await slot.stop_retired(old)
    record.old_stopped_at = _now()


async def _hold(
    slot: slots.Slot, old: slots.Handle, target: contract.SlotSpec, record: contract.SwapRecord
) -> None:
    slot.gate.clear()
    if slot.active is old:
        slot.active = None
        slot.retiring.append(old)
    await slot.drain(old, timeout_s=float(target.swap.drain_timeout_seconds))
    record.old_drained_at = _now()
    await slot.stop_retired(old)
    record.old_stopped_at = _now()
    slot.deps.on_backends_changed()
    new = await slot.load(target)
    record.new_ready_at = _now()
    slot.switch(new)
    slot.phase = contract.SlotPhase.SWAPPING
    record.switched_at = _now()


async def _roll_back(
    slot: slots.Slot,
    old: slots.Handle,
    target: contract.SlotSpec,
    record: contract.SwapRecord,
    *,
    reason: str,
) -> None:
    log.warning("swap rolling back", extra={"slot": slot.name, "swap": record.id, "reason": reason})
    record.reason = reason
    slot.last_error = f"swap to {record.to_source} rolled back: {reason}"
    if slot.desired == target:  # a newer PUT during the swap wins; it runs next
        slot.desired = old.spec
        slot.deps.persist()
    if slot.active is old and not old.retired:
        record.outcome = contract.SwapOutcome.ROLLED_BACK
        slot.gate.set()
        return
    if slot.active is not None and slot.active is not old:
        record.outcome = contract.SwapOutcome.ROLLED_BACK
        return
    try:  # hold: A was stopped (or A crashed meanwhile); bring it back
        handle = await slot.load(old.spec)
    except Exception as exc:
        record.outcome = contract.SwapOutcome.FAILED
        record.reason = f"{reason}; restoring the previous model failed too: {exc}"
        slot.last_error = record.reason
        raise supervisor.BackendFailed(record.reason) from exc
    slot.switch(handle)
    record.outcome = contract.SwapOutcome.ROLLED_BACK
