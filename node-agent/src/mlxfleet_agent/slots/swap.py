"""The zero-drop swap protocol of one slot: surge, hold, auto, rollback; and its SwapRecord.

Written over the slot's public operations only (`slot.Slot`):
- surge: start B beside A, warm B, switch the route atomically (`switch`), drain A's in-flight
  requests (bounded by drainTimeoutSeconds), stop A.
- hold: shut the gate (new requests queue), drain and stop A, load and warm B, switch (the queue
  is released to B).
- auto: surge when the other slots + A + B fit the memory budget, else hold (`choose`, pure).
- rollback: B fails to become ready: A keeps serving (surge) or is restarted (hold); the desired
  spec reverts to A's and the record says RolledBack with the reason. If A cannot come back
  either, the outcome is Failed and the slot retries with backoff.
- renew: A holds work it cannot stop (a prompt whose client left, which mlx-lm processes to the
  end): new requests queue, a fresh backend of the same spec loads (beside A when both fit, and
  then A's other requests may finish, bounded by drainTimeoutSeconds; else A is stopped first
  and its requests fail), the queue goes to it. Not a swap: no record, the slot's lastError
  and restart count say it.
B's weights are fetched, pinned and sized once per swap (`prepare`), before A is touched.
A rank of a sharded group whose model changes swaps the same way (`rank_swap`; the operator's
SwapPlan sends every rank of the group Surge or Hold, decided for the group; Auto means Hold for
a rank, since one node cannot decide for its group). Rank 0 drains and stops its old rank like any
slot; a follower has no requests of its own: its old rank keeps running until it exits on its own
(its old rank 0 stopped, so the ring lost a peer), bounded by the drain timeout plus the load
timeout, so the old group serves until the new one has taken over.
May import: the standard library, contract, backends.process, models.source, slots (slot,
handle). Called by: slots.convergence.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from mlxfleet_agent import contract
from mlxfleet_agent.backends import process
from mlxfleet_agent.models import source
from mlxfleet_agent.slots.handle import Handle, Prepared
from mlxfleet_agent.slots.slot import Slot

log = logging.getLogger(__name__)
Strategy = contract.SwapStrategy


class DoesNotFit(RuntimeError):
    """The new model does not fit the memory budget even on its own (hold)."""


def same_runtime(a: contract.SlotSpec, b: contract.SlotSpec) -> bool:
    """True when two specs need the same backend process (only names/policies differ): no swap."""
    exclude: dict[str, Any] = {
        "served_name": True,
        "swap": True,
        "memory_bytes": True,
        "server": {"allowed_image_urls": True},  # data-plane policy only
    }
    return a.model_dump(exclude=exclude) == b.model_dump(exclude=exclude)


def rank_swap(a: contract.SlotSpec, b: contract.SlotSpec) -> bool:
    """Both specs are ranks of a sharded group and the model changes: a swap of the group, not
    a re-formation on the same model (which restarts the rank)."""
    if a.shard is None or b.shard is None:
        return False
    return (a.source, a.revision) != (b.source, b.revision)


def choose(
    requested: Strategy, *, others: int, old: int, new: int, budget: int, rank: bool = False
) -> Strategy:
    """What `auto` means here and now (pure): surge if A and B fit side by side, else hold; for
    a rank (`rank`), hold: its group decides, not one node."""
    if requested is not Strategy.AUTO:
        return requested
    if rank:
        return Strategy.HOLD
    return Strategy.SURGE if others + old + new <= budget else Strategy.HOLD


def fits_alone(*, others: int, new: int, budget: int) -> bool:
    return others + new <= budget


def _now() -> datetime:
    return datetime.now(UTC)


def new_record(
    slot_name: str,
    *,
    old: contract.SlotSpec,
    new: contract.SlotSpec,
    request_id: str | None = None,
) -> contract.SwapRecord:
    return contract.SwapRecord(
        id=uuid.uuid4().hex[:12],
        slot=slot_name,
        request_id=request_id,
        requested_strategy=new.swap.strategy,
        strategy=new.swap.strategy,
        from_source=old.source,
        from_revision=old.revision,
        to_source=new.source,
        to_revision=new.revision,
        started_at=_now(),
    )


async def run(
    slot: Slot, target: contract.SlotSpec, src: source.Source, *, request_id: str | None = None
) -> contract.SwapRecord:
    """Swap `slot` from its active backend to `target`; never raises for a failed B. The record
    echoes `request_id`, the caller's id for this swap (PUT ...?requestId=)."""
    old = slot.active
    assert old is not None, "swap needs a serving backend; cold start otherwise"
    record = new_record(slot.name, old=old.spec, new=target, request_id=request_id)
    slot.begin_swap(record)
    try:
        prepared = await slot.prepare(target, src)
        try:
            record.strategy = _strategy(slot, old, prepared)
        except BaseException:
            slot.unprepare(prepared)
            raise
        log.info(
            "swap started",
            extra={"slot": slot.name, "swap": record.id, "strategy": str(record.strategy)},
        )
        drain_s = float(target.swap.drain_timeout_seconds)
        if record.strategy is Strategy.SURGE:
            await _bring_up(slot, prepared, record)
            await _retire(slot, old, record, drain_s=drain_s)
        else:
            slot.take_offline(old)
            try:
                await _retire(slot, old, record, drain_s=drain_s)
            except BaseException:
                slot.unprepare(prepared)
                raise
            await _bring_up(slot, prepared, record)
        record.outcome = contract.SwapOutcome.COMPLETED
        slot.last_error = None
    except Exception as exc:
        await _roll_back(slot, old, target, record, reason=f"{type(exc).__name__}: {exc}")
    finally:
        record.finished_at = _now()
        slot.end_swap()
        slot.deps.telemetry.swap_finished(
            slot=slot.name, outcome=str(record.outcome), record=record
        )
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


def _strategy(slot: Slot, old: Handle, prepared: Prepared) -> Strategy:
    """Surge or hold, for B as prepared; DoesNotFit when B does not fit even alone."""
    owner = slot.deps.owner
    others, budget = owner.others_estimate(slot.name), owner.budget()
    if not fits_alone(others=others, new=prepared.estimate, budget=budget):
        raise DoesNotFit(
            f"estimate {prepared.estimate} bytes + other slots {others} exceed the budget {budget}"
        )
    return choose(
        prepared.spec.swap.strategy,
        others=others,
        old=old.estimate,
        new=prepared.estimate,
        budget=budget,
        rank=prepared.spec.shard is not None,
    )


async def renew(slot: Slot, old: Handle, *, reason: str) -> None:
    """Replace the stuck backend `old` with a fresh one of its spec (see the module docstring);
    raises when the fresh one fails (the convergence loop then retries with backoff)."""
    slot.restarts += 1
    slot.last_error = f"backend restarted: {reason}"
    slot.close_gate()
    prepared = await slot.prepare(old.spec, old.source)
    owner = slot.deps.owner
    beside = owner.others_estimate(slot.name) + old.estimate + prepared.estimate <= owner.budget()
    log.warning(
        "backend restarting",
        extra={"slot": slot.name, "reason": reason, "beside_old": beside, "pid": old.backend.pid},
    )
    if not beside:
        slot.take_offline(old)
        await slot.stop_retired(old)
    try:
        new = await slot.load(prepared)
    except BaseException:
        if beside and slot.active is old:
            slot.open_gate()  # the stuck one is all there is: serve with it meanwhile
        raise
    slot.switch(new)
    if beside:
        await slot.drain(old, timeout_s=float(old.spec.swap.drain_timeout_seconds))
        await slot.stop_retired(old)
    log.info("backend restarted", extra={"slot": slot.name, "pid": new.backend.pid})


async def _bring_up(slot: Slot, prepared: Prepared, record: contract.SwapRecord) -> None:
    """Load and warm B, switch the route to it (both strategies end with this)."""
    new = await slot.load(prepared)
    record.new_ready_at = _now()
    slot.switch(new)
    slot.phase = contract.SlotPhase.SWAPPING
    record.switched_at = _now()


async def _retire(slot: Slot, old: Handle, record: contract.SwapRecord, *, drain_s: float) -> None:
    """Let A finish its in-flight requests (bounded), then stop it. A follower rank has none: it
    outlives the switch until its old group ends (see the module docstring)."""
    shard = old.spec.shard
    if shard is not None and not shard.leader:
        await slot.outlive(old, timeout_s=drain_s + slot.deps.launcher.load_timeout_s)
    else:
        await slot.drain(old, timeout_s=drain_s)
    record.old_drained_at = _now()
    await slot.stop_retired(old)
    record.old_stopped_at = _now()


async def _roll_back(
    slot: Slot,
    old: Handle,
    target: contract.SlotSpec,
    record: contract.SwapRecord,
    *,
    reason: str,
) -> None:
    log.warning("swap rolling back", extra={"slot": slot.name, "swap": record.id, "reason": reason})
    record.reason = reason
    slot.last_error = f"swap to {record.to_source} rolled back: {reason}"
    slot.revert(target, to=old)  # a newer PUT during the swap wins; it runs next
    if slot.active is old and not old.retired:
        record.outcome = contract.SwapOutcome.ROLLED_BACK
        slot.open_gate()
        return
    if slot.active is not None and slot.active is not old:
        record.outcome = contract.SwapOutcome.ROLLED_BACK
        return
    try:  # hold: A was stopped (or A crashed meanwhile); bring it back
        handle = await slot.load(await slot.prepare(old.spec, old.source))
    except Exception as exc:
        record.outcome = contract.SwapOutcome.FAILED
        record.reason = f"{reason}; restoring the previous model failed too: {exc}"
        slot.last_error = record.reason
        raise process.BackendFailed(record.reason) from exc
    slot.switch(handle)
    record.outcome = contract.SwapOutcome.ROLLED_BACK
