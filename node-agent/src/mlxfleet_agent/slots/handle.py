"""A ready backend of a slot (`Handle`), and weights made ready for one (`Prepared`).

Requests hold a handle from admission to their last byte (`in_flight`); the ones sent to its
backend are kept in the order sent, with those still waiting for a first token (`sent`,
`waiting`: what "busy" and "a hung-up request holds the backend" are judged from). A retired
handle drains (`drained` is set once its last request ended) and is then stopped by its slot.
May import: the standard library, contract, backends.process, engines.tokencount, models.source,
slots.lease.
Called by: slots (slot, handles, gate, swap).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from mlxfleet_agent import contract
from mlxfleet_agent.backends import process
from mlxfleet_agent.engines import tokencount
from mlxfleet_agent.models import source
from mlxfleet_agent.slots import lease


@dataclass(frozen=True, slots=True)
class Prepared:
    """Weights on disk for `spec`, pinned for `label` (the backend's label) until released,
    and what they need in memory."""

    spec: contract.SlotSpec
    source: source.Source
    model_dir: Path
    estimate: int
    label: str


@dataclass(eq=False)
class Handle:
    """A ready backend and the requests that hold it. Retired handles drain, then stop."""

    backend: process.Backend
    spec: contract.SlotSpec
    source: source.Source
    model_dir: Path
    estimate: int
    in_flight: int = 0
    retired: bool = False
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    watcher: asyncio.Task[None] | None = None
    fingerprint: str | None = None  # the backend's system_fingerprint (from its warm-up)
    vocab_size: int | None = None  # token ids a request may name are below it (config.json)
    # the model's prompt tokens (its tokenizer, loaded with the backend; a byte bound until then)
    counter: lease.PromptCounter = field(default_factory=tokencount.ByteBound)
    # requests sent to the backend and not finished, in the order sent (key -> when), and those
    # of them still waiting for their first token: how long the backend has been busy
    sent: dict[int, float] = field(default_factory=dict)
    waiting: dict[int, float] = field(default_factory=dict)

    @property
    def pinned(self) -> str:
        """The `model` value sent to the backend: what its engine answers to (mlx_lm: its own
        --model path, so it never loads another; servers started with a served name: that)."""
        return self.backend.launch.upstream_model or str(self.model_dir)

    @property
    def port(self) -> int:
        return self.backend.port

    def waited_longest(self, now: float) -> float:
        """Seconds the oldest request still waiting for its first token has waited (0: none)."""
        oldest = next(iter(self.waiting.values()), None)
        return 0.0 if oldest is None else now - oldest

    def release(self) -> None:
        self.in_flight -= 1
        if self.retired and self.in_flight <= 0:
            self.drained.set()

    def retire(self) -> None:
        self.retired = True
        if self.in_flight <= 0:
            self.drained.set()
