"""InferenceNode status (pure): what the agent reported, folded with the heartbeat debounce,
and the Events a poll posts (a Ready flip, an ignored spec field); the status of a node that
joined itself and waits for a person's approval (`awaiting_approval`: it is not polled); the
node's own credentials (`credentials`: derived from the fleet key, sent when the agent's
fingerprint differs).

May import: the standard library, `api`, the agent `contract`, the kit (`conditions`, `events`,
`heartbeat`, `thermal`) and `core.node.doctor` (their conditions), `core.fleet.facts`
(the node's budget).
Called by: the InferenceNode timer handler after each poll of `GET /v1/state`, and the fleet
adapter (which turns a poll's errors into `PollError`s).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import fields, quantity
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.core.fleet import facts
from mlxfleet_operator.core.kit import conditions, events, heartbeat, thermal
from mlxfleet_operator.core.node import doctor


class PollError(StrEnum):
    """Why a poll failed; all but the last need a person (Stalled)."""

    SECRET_MISSING = "SecretNotFound"  # noqa: S105 - a condition reason, not a secret
    SECRET_NOT_ALLOWED = "SecretNotAllowed"  # noqa: S105 - a condition reason, not a secret
    SECRET_INVALID = "SecretInvalid"  # noqa: S105 - a condition reason, not a secret
    UNAUTHORIZED = "Unauthorized"
    UNREACHABLE = "AgentUnreachable"


@dataclass(frozen=True)
class Poll:
    state: contract.AgentState | None
    error: PollError | None = None
    message: str | None = None


def health_from_status(status: inode.InferenceNodeStatus) -> heartbeat.Health:
    """Seed the debounce after an operator restart from what the status said."""
    ready = cond.find(status.conditions, cond.ConditionType.READY)
    known = (
        None
        if ready is None or ready.status is cond.ConditionStatus.UNKNOWN
        else (ready.status is cond.ConditionStatus.TRUE)
    )
    return heartbeat.Health(ready=known, misses=0, last_heartbeat=status.last_heartbeat_time)


def _memory(node: inode.InferenceNode, state: contract.AgentState) -> inode.MemoryStatus:
    fact = facts.NodeFacts(node=node, state=state, endpoint=None)
    hardware = node.spec.hardware.memory if node.spec.hardware is not None else None
    total = quantity.parse_bytes(hardware) if hardware is not None else state.memory.total_bytes
    budget, used = facts.budget(fact), facts.used(state)
    free = max(0, budget - used)
    return inode.MemoryStatus(
        total=quantity.human_bytes(total),
        total_bytes=total,
        allocatable_bytes=budget,
        used_bytes=used,
        free=quantity.human_bytes(free),
        free_bytes=free,
    )


def download_summary(transfers: Sequence[contract.Transfer]) -> str | None:
    """`1.2/4.0 GiB 350 MB/s` (all downloads together; `+1` per further model), None when idle."""
    if not transfers:
        return None
    done = sum(t.done_bytes for t in transfers) / 1024**3
    total = sum(t.total_bytes for t in transfers) / 1024**3
    rate = sum(t.bytes_per_second for t in transfers) / 1e6
    more = f" +{len(transfers) - 1}" if len(transfers) > 1 else ""
    return f"{done:.1f}/{total:.1f} GiB {rate:.0f} MB/s{more}"


DISK_STEP_BYTES = 1024**3  # free disk is rewritten when it moved this much (or 1 %), not per byte


def disk_free(written: int | None, seen: int | None) -> int | None:
    """The free disk figure to write: the one already written while the agent's figure stays
    within `DISK_STEP_BYTES` or 1 % of it (a real Mac's free space moves on every poll: logs,
    caches, swap), so an unchanged node's status is not rewritten on every poll."""
    if written is None or seen is None:
        return seen
    return written if abs(seen - written) < max(DISK_STEP_BYTES, written // 100) else seen


HEARTBEAT_WRITES_PER_S = 0.5  # the whole fleet's heartbeat-only status writes, on average at most


def heartbeat_every(name: str, every: timedelta, *, fleet: int = 1) -> timedelta:
    """The node's own heartbeat write interval: `every`, or longer in a fleet so large that its
    nodes would write their heartbeat alone more than `HEARTBEAT_WRITES_PER_S` times a second
    together (500 nodes every 60-90 s: 6.7 writes a second; issue 27's steady budget for
    everything is 1 a second, so heartbeats alone get half of it), stretched by 0-50 % by a hash
    of its name, so nodes registered together do not all write in the same second. Never
    shorter than `every`; 0 stays 0 (every poll)."""
    if every <= timedelta(0):
        return every
    every = max(every, timedelta(seconds=fleet / HEARTBEAT_WRITES_PER_S))
    spread = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest()) % 1000
    return every * (1 + spread / 2000)


def _heartbeat_time(
    written: datetime | None, seen: datetime | None, every: timedelta
) -> datetime | None:
    """The heartbeat time to write: the one already written while it is younger than `every`."""
    if written is None or seen is None or seen < written or seen - written >= every:
        return seen
    return written


def status(
    node: inode.InferenceNode,
    poll: Poll,
    health: heartbeat.Health,
    *,
    threshold: int,
    now: datetime,
    heartbeat_every: timedelta = timedelta(0),
) -> inode.InferenceNodeStatus:
    """The whole new status (conditions keep their transition times unless they flip).

    `lastHeartbeatTime` moves only when it is `heartbeat_every` old (or was never written), and
    `disk.freeBytes` only when it moved by a step (`disk_free`): a poll that changes nothing
    else then writes nothing (Kubernetes' NodeStatus does the same: written on change or every
    few minutes). Ready flips are conditions: written at once."""
    old = node.status
    gen = node.metadata.generation
    new = old.model_copy(update={"observed_generation": gen})
    state = poll.state
    if state is not None:
        beat = _heartbeat_time(old.last_heartbeat_time, health.last_heartbeat, heartbeat_every)
        chip = (
            node.spec.hardware.chip
            if node.spec.hardware and node.spec.hardware.chip
            else state.chip
        )
        new = new.model_copy(
            update={
                "last_heartbeat_time": beat,
                "agent_version": state.agent_version,
                "chip": chip,
                "memory": _memory(node, state),
                "disk": inode.DiskStatus(
                    free_bytes=disk_free(
                        old.disk.free_bytes if old.disk else None, state.disk.free_bytes
                    )
                ),
                "slots": [
                    inode.SlotStatus(
                        name=s.name,
                        served_name=s.served_name,
                        source=s.source,
                        revision=s.revision,
                        phase=s.phase.value,
                        ready=s.ready,
                        download=fields.DownloadStatus.of(s.download) if s.download else None,
                    )
                    for s in state.slots
                ],
                "cached_models": [
                    inode.CachedModelStatus(
                        source=c.source,
                        revision=c.revision,
                        size_bytes=c.size_bytes,
                        last_used=c.last_used,
                    )
                    for c in state.cached_models
                ],
                "engines": [
                    inode.EngineStatus(name=e.name, available=e.available, reason=e.reason or None)
                    for e in state.engines
                ],
                "transfers": [
                    inode.TransferStatus(
                        source=t.source,
                        done_bytes=t.done_bytes,
                        total_bytes=t.total_bytes,
                        bytes_per_second=t.bytes_per_second,
                        peer_bytes=t.peer_bytes,
                        phase=t.phase,
                    )
                    for t in state.transfers
                ],
                "download": download_summary(state.transfers),
                "thermal": thermal.status(
                    old.thermal, state.thermal, refresh=beat != old.last_heartbeat_time
                ),
            }
        )
    R = cond.Reason
    stalled = poll.error in (
        PollError.SECRET_MISSING,
        PollError.SECRET_NOT_ALLOWED,
        PollError.SECRET_INVALID,
        PollError.UNAUTHORIZED,
    )
    if health.ready:
        verdict = conditions.Verdict(True, R.HEARTBEAT_OK, "agent answers")
    elif stalled:
        verdict = conditions.Verdict(False, str(poll.error), poll.message or "", stalled=True)
    elif health.ready is None:
        verdict = conditions.Verdict(
            False,
            R.AGENT_UNREACHABLE,
            poll.message or "waiting for the first heartbeat",
            reconciling=True,
        )
    else:
        text = f"{health.misses} consecutive polls failed (threshold {threshold})"
        if poll.message:
            text += f": {poll.message}"
        verdict = conditions.Verdict(False, R.HEARTBEAT_MISSED, text)
    out = conditions.apply_verdict(old.conditions, verdict, generation=gen, now=now)
    if state is not None:
        out = memory_pressure(out, state.memory, generation=gen, now=now)
        out = thermal.condition(out, state.thermal, generation=gen, now=now)
        out = doctor.conditions_of(
            out,
            state.doctor,
            disk=state.disk,
            labels=node.metadata.labels,
            generation=gen,
            now=now,
        )
    return new.model_copy(update={"conditions": out})


_PRESSURE_REASONS = {
    "normal": cond.Reason.MEMORY_NORMAL,
    "warn": cond.Reason.MEMORY_WARN,
    "critical": cond.Reason.MEMORY_CRITICAL,
}


def memory_pressure(
    current: Sequence[cond.Condition],
    memory: contract.MemoryInfo,
    *,
    generation: int | None,
    now: datetime,
) -> list[cond.Condition]:
    """The MemoryPressure condition: True at warn or critical (placement then gives the node
    no new replica, `core.fleet.nodeviews.PRESSURES`), with the reading the agent names.
    The message is written when the level changes and kept while it stays (the reading moves
    on every poll: a node under pressure would otherwise rewrite its status on each)."""
    level = memory.pressure
    reason = _PRESSURE_REASONS[level]
    said = f": {memory.pressure_reason}" if memory.pressure_reason else ""
    then = "; no new replicas are placed here until it clears" if level != "normal" else ""
    message = f"agent reports memory pressure {level}{said}{then}"
    return conditions.set_reading(
        current,
        kind=cond.ConditionType.MEMORY_PRESSURE,
        status=level != "normal",
        reason=reason,
        message=message,
        generation=generation,
        now=now,
    )


def approval_message(name: str) -> str:
    return (
        "joined with a bootstrap token: not polled, placed on or given a credential until a "
        f"person approves it (kubectl mlxfleet approve node {name})"
    )


def awaiting_approval(node: inode.InferenceNode, *, now: datetime) -> inode.InferenceNodeStatus:
    """The status of a node no person approved yet: Ready=False (AwaitingApproval), nothing
    from its agent (a status it had before approval was withdrawn is cleared)."""
    gen = node.metadata.generation
    verdict = conditions.Verdict(
        False,
        cond.Reason.AWAITING_APPROVAL,
        approval_message(node.metadata.name or ""),
        reconciling=True,
    )
    kept = [c for c in node.status.conditions if c.type != cond.ConditionType.MEMORY_PRESSURE]
    return inode.InferenceNodeStatus(
        observed_generation=gen,
        conditions=conditions.apply_verdict(kept, verdict, generation=gen, now=now),
    )


def credentials(fleet_keys: Sequence[str], node: inode.InferenceNode) -> contract.NodeCredentials:
    """The node's own keys, derived from the fleet key (`contract.credentials`)."""
    return contract.credentials.for_node(fleet_keys, node.metadata.name or "")


def needs_credentials(state: contract.AgentState, wanted: contract.NodeCredentials) -> bool:
    """The agent does not hold exactly the keys it should (it reports their fingerprint)."""
    return state.credentials != contract.credentials.fingerprint(wanted)


def credentials_refused(error: str) -> events.Event:
    """The warning when the node's agent did not take its keys (its data plane then refuses the
    gateway; an agent older than per-node credentials answers 404)."""
    return events.Event(
        reason="CredentialsNotSent",
        message=f"the agent did not take this node's own keys (retried every poll): {error}",
        warning=True,
    )


def flip_event(seen: heartbeat.Observation, poll: Poll) -> events.Event | None:
    """The Event of a Ready flip (None: Ready did not change)."""
    if not seen.flipped:
        return None
    if seen.health.ready:
        return events.Event(reason="NodeReady", message="agent answers")
    text = f"heartbeat missed: {poll.message}"
    return events.Event(reason="NodeNotReady", message=text, warning=True)


def ignored_fields(node: inode.InferenceNode) -> events.Event | None:
    """A warning about spec fields the operator does not use (posted once per process)."""
    if node.spec.reserved_memory is None:
        return None
    return events.Event(
        reason="ReservedMemoryIgnored",
        message="spec.reservedMemory is not used: placement uses the agent's own memory "
        "budget (status.memory.allocatableBytes); set memory_budget in the agent config",
        warning=True,
    )
