"""The convergence loop of one slot: apply its desired spec, one at a time, until deleted.

Each wake-up (a new spec, a retry after a failure, a restart after a crash, a stuck backend to
replace: `swap.renew`) converges the slot: cold start when no backend serves, in-place adoption
when only names or policies changed (`swap.same_runtime`), a restart for a rank of a sharded
group re-formed on the same model (groups re-form as a whole), else a swap (`swap.run`; a rank's
model change too: a SwapPlan swaps the group as a unit, `swap.rank_swap`). A failure without a
serving backend marks the slot Failed and retries with backoff; a deletion drains and stops
every backend and ends the loop. Written over the slot's public operations; the registry starts
it (`slot.start(run)`).
May import: the standard library, contract, models.source, slots (slot, swap).
Called by: slots.registry.
"""

from __future__ import annotations

import asyncio
import logging

from mlxfleet_agent import contract
from mlxfleet_agent.models import source
from mlxfleet_agent.slots import swap
from mlxfleet_agent.slots.slot import Slot

log = logging.getLogger(__name__)


async def run(slot: Slot) -> None:
    """The loop (runs until the slot is deleted and stopped, or cancelled at shutdown)."""
    while True:
        await slot.next_wake()
        if slot.deleted:
            await slot.drain_and_stop()
            return
        try:
            await converge(slot)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("slot convergence failed", extra={"slot": slot.name})
            if slot.fail(f"{type(exc).__name__}: {exc}") and slot.desired.shard is None:
                slot.retry_later()  # a rank waits for the operator to re-form its group


async def converge(slot: Slot) -> None:
    """One step towards the desired spec (a stuck backend is replaced first)."""
    renewal, slot.renewal = slot.renewal, None
    if renewal is not None and renewal[0] is slot.active:
        await swap.renew(slot, renewal[0], reason=renewal[1])
    target, src = slot.desired, slot.desired_source
    handle = slot.active
    if handle is None:
        await cold_start(slot, target, src)
    elif swap.same_runtime(handle.spec, target):
        slot.update_in_place(target)
    elif swap.rank_swap(handle.spec, target):
        await swap.run(slot, target, src, request_id=slot.request_id)
    elif handle.spec.shard is not None or target.shard is not None:
        await slot.restart_rank(target, src)
    else:
        await swap.run(slot, target, src, request_id=slot.request_id)


async def cold_start(slot: Slot, spec: contract.SlotSpec, src: source.Source) -> None:
    """No backend serves: queue requests, load `spec`, open the gate."""
    slot.close_gate()
    handle = await slot.load(await slot.prepare(spec, src))
    slot.switch(handle)
