"""What the operator's decisions know about the fleet, as typed facts: each InferenceNode with
its agent's last answer (`NodeFacts`), a slot PUT to send to an agent (`SlotRequest`), and what
an agent answered when asked for a slot (`Outcome`) or to fetch and size a model (`Prefetch`).
Agent answers are classified by their HTTP status and the field their error body names, never by
their text.

Memory as the scheduler sees it (`held_bytes`, `used`, `free`): a slot on its way up counts its
whole footprint, a slot that runs no backend counts nothing.
May import: the standard library, `api`, the agent `contract` and `sizing`. Called by:
`core.deployment`, `core.sharded`, `core.swapplan`, `core.fleet.nodeviews`, `core.node` (the
node's budget), and the adapters that send `SlotRequest`s and turn agent answers into `Outcome`s
and `Prefetch`es.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from urllib.parse import urlsplit

from mlxfleet_agent import contract, sizing
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api.modelref import ModelRef


@dataclass(frozen=True)
class NodeFacts:
    """One InferenceNode as the operator knows it: the object, and the agent's last answer."""

    node: inode.InferenceNode
    state: contract.AgentState | None
    endpoint: str | None  # the agent's data-plane base URL
    # slots reserved on the node (a PUT decided on, not listed by its agent yet) that `state`
    # leaves out: the deciding deployment's own (the fleet adapter's `node_facts`)
    reserved: frozenset[str] = frozenset()
    # memory promised to preemptors on this node (their slot -> bytes, `preemption.claim`)
    # while the replicas they evict leave it: counted as used by every other deployment
    claims: Mapping[str, int] = field(default_factory=dict)

    @cached_property
    def name(self) -> str:  # cached: read for every node by several steps of a reconcile
        return self.node.metadata.name or ""

    @cached_property
    def ready(self) -> bool:  # cached: facts are kept per node between reconciles
        return cond.is_true(self.node.status.conditions, cond.ConditionType.READY)

    @cached_property
    def not_ready_since(self) -> datetime | None:
        found = cond.find(self.node.status.conditions, cond.ConditionType.READY)
        if found is None or found.status is cond.ConditionStatus.TRUE:
            return None
        return found.last_transition_time

    def slot(self, name: str) -> contract.SlotStatus | None:
        return self._slots.get(name)

    @cached_property
    def _slots(self) -> dict[str, contract.SlotStatus]:
        """The answer's slots by name (the first of a name): `slot` is asked of every node by
        several steps of every reconcile (`carrying`, `slots_to_delete`), and a scan of each
        node's slot list there was 9 % of the operator's CPU at 500 x 1,000."""
        out: dict[str, contract.SlotStatus] = {}
        for s in self.state.slots if self.state is not None else ():
            out.setdefault(s.name, s)
        return out

    @cached_property
    def fabric_address(self) -> str | None:
        """Where this node's sharded ranks listen: its agent's `--fabric-address` (None: it runs
        no rank); an agent too old to report one, the host of its agent URL (as before)."""
        if self.state is None:
            return None
        if "fabric_address" not in self.state.model_fields_set:
            return urlsplit(self.node.spec.agent.url).hostname
        return self.state.fabric_address


def budget(fact: NodeFacts) -> int:
    """What placement may fill on the node: the agent's own budget (`memory.budgetBytes` of its
    last answer; before the first answer after a restart, what status last said). The agent
    admits slots against that number (507 above it), so it is the only one: placement never
    promises what the agent would refuse. Set it on the Mac (agent `memory_budget`)."""
    if fact.state is not None:
        return fact.state.memory.budget_bytes
    mem = fact.node.status.memory
    return (mem.allocatable_bytes or 0) if mem is not None else 0


# a slot in these phases is on its way to holding its whole footprint: counted in full
COMING_UP = frozenset(
    {
        contract.SlotPhase.PENDING,
        contract.SlotPhase.DOWNLOADING,
        contract.SlotPhase.LOADING,
        contract.SlotPhase.WARMING,
    }
)


def expected_bytes(
    spec: contract.SlotSpec, cached: Sequence[contract.CachedModel] = ()
) -> int | None:
    """The whole footprint a slot spec will hold once loaded: its memory override, the command
    engine's declared memory, else the shared estimate from the node's cached copy of the model
    (None: not known here yet; a rank of a sharded group holds a share the agent reports)."""
    if spec.shard is not None:
        return spec.memory_bytes
    if spec.memory_bytes is not None:
        return spec.memory_bytes
    if spec.engine.command is not None:
        return spec.engine.command.memory_bytes
    model = ModelRef.of(spec)
    for copy in cached:
        if copy.shape is None or copy.size_bytes <= 0 or ModelRef.of(copy) != model:
            continue
        return sizing.estimate(
            weights_bytes=copy.size_bytes,
            shape=copy.shape,
            context_length=spec.context_length,
            max_concurrency=spec.max_concurrency,
            kv_bits=spec.server.kv_bits,
        ).total_bytes
    return None


def held_bytes(slot: contract.SlotStatus, cached: Sequence[contract.CachedModel] = ()) -> int:
    """Memory the scheduler counts for one slot on a node: what its backends hold now (the
    agent's figure), and for a slot on its way up (pending, downloading, loading, warming) its
    whole footprint, although its backend holds little or nothing yet (a replica that is loading
    holds its memory as far as placement is concerned, or two would be promised the same
    bytes). A slot that runs no backend and is not coming up (a sleeping replica, a failed
    backend waiting to restart) counts what it holds: nothing."""
    reported = slot.estimated_memory_bytes or 0
    if slot.phase not in COMING_UP or slot.spec is None:
        return reported
    return max(reported, expected_bytes(slot.spec, cached) or 0)


def used(state: contract.AgentState, *, leave_out: str | None = None) -> int:
    """What the node's slots hold as the scheduler counts it (`held_bytes`), but `leave_out`."""
    cached = state.cached_models
    return sum(held_bytes(s, cached) for s in state.slots if s.name != leave_out)


def free(fact: NodeFacts) -> int | None:
    """The node's budget less what every slot holds (None: the agent has not answered)."""
    if fact.state is None:
        return None
    return budget(fact) - used(fact.state)


def used_by_others(fact: NodeFacts, slot: str) -> int:
    """What the node's other slots hold, and what it promised other preemptors."""
    if fact.state is None:
        return 0
    promised = sum(b for s, b in fact.claims.items() if s != slot)
    return used(fact.state, leave_out=slot) + promised


@dataclass(frozen=True)
class Room:
    """What a node's agent answer (plus the slots reserved there) leaves for a new replica:
    free memory under its budget, the slots counted, the engines it can run."""

    free: int
    slots: frozenset[str]
    engines: frozenset[str]


def room(
    state: contract.AgentState,
    reserved: Sequence[contract.SlotStatus] = (),
    claims: Mapping[str, int] | None = None,
) -> Room:
    counted = [*state.slots, *reserved]
    held = sum(held_bytes(s, state.cached_models) for s in counted) + sum((claims or {}).values())
    return Room(
        free=state.memory.budget_bytes - held,
        slots=frozenset(s.name for s in counted) | frozenset(claims or ()),
        engines=frozenset(e.name for e in state.engines if e.available),
    )


def roomier(old: Room | None, new: Room) -> bool:
    """The node may now take a replica it could not take before: more free memory, a slot gone
    (its memory and served name), an engine added (the first answer counts as roomier)."""
    return (
        old is None
        or new.free > old.free
        or bool(old.slots - new.slots)
        or bool(new.engines - old.engines)
    )


def unpolled(facts: list[NodeFacts]) -> list[str]:
    """Ready nodes this operator has not heard from yet (after a restart: wait, never guess)."""
    return [f.name for f in facts if f.ready and f.state is None]


# Agent answers that no retry can change (a person must edit the spec): malformed (400),
# outside the allowed roots (403), no such model (404), taken (409), invalid
# field (422). Everything else (507: no room now; 502/503: the source could not be fetched now,
# or the slot is still being deleted, as after a deployment went to sleep; no answer at all) is
# worth retrying.
PERMANENT_STATUSES = frozenset({400, 403, 404, 409, 422})
SOURCE_FIELDS = frozenset({"source", "revision"})


def refusal_is_permanent(status: int | None) -> bool:
    """An agent answer (HTTP status; None: no answer) that retrying cannot change."""
    return status in PERMANENT_STATUSES


@dataclass(frozen=True)
class SlotRequest:
    """PUT this spec into the deployment's slot on `node` (idempotent: the agent converges)."""

    node: str
    spec: contract.SlotSpec
    request_id: str | None = None  # a SwapPlan step's id for the swap (its record echoes it)


@dataclass(frozen=True)
class Outcome:
    """What happened when the operator asked one node's agent for (or to drop) a slot."""

    node: str
    error: str | None = None
    status: int | None = None  # the agent's HTTP status, if it answered with an error
    field: str | None = None  # the field its error body names
    unreachable: bool = False  # no answer, or one saying "not now" (5xx other than 507)

    @property
    def refused(self) -> bool:
        """The request cannot work as is (bad source, invalid field, name taken, ...)."""
        return refusal_is_permanent(self.status)

    @property
    def no_fit(self) -> bool:
        """507: the agent's own memory check refused it (busy node)."""
        return self.status == 507

    @property
    def source_problem(self) -> bool:
        """The refusal is about the model source (else another field of the spec)."""
        return self.field in SOURCE_FIELDS or self.status in (403, 404)


@dataclass(frozen=True)
class Prefetch:
    """One agent's answer to "fetch and size this model": the cached model, or why not."""

    node: str
    cached: contract.CachedModel | None = None
    error: str | None = None
    status: int | None = None  # the agent's HTTP status, if it answered with an error

    @property
    def settled(self) -> bool:
        """No other node needs asking: the model was fetched, or it cannot exist as given."""
        return self.error is None or refusal_is_permanent(self.status)
