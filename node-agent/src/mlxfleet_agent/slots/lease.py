"""The slots as the data plane sees them: which slot serves model X, and a lease on its backend.

The narrow view the data plane is written against (it imports nothing else of `slots`):
`Routes.route(served_name)` gives a `Route` (a slot), `Route.lease(timeout_s=...)` a `Lease` on
its active backend (`Upstream`: the port, the pinned model path, the spec it serves, the counter
of its model's prompt tokens), held until the request's last byte and given back with
`Lease.release(ok=...)`; `Route.serving()` shows that backend without leasing it (the KV budget
is checked before a request queues). A lease is refused with `QueueFull`, `QueueTimeout` or
`SlotUnavailable`. The registry and `slot.Slot` implement these protocols.
May import: contract, the standard library. Called by: dataplane, slots (slot, gate, registry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from mlxfleet_agent import contract


class QueueFull(RuntimeError):
    """The slot's wait queue is at its bound."""


class QueueTimeout(RuntimeError):
    """A queued request waited longer than the queue timeout."""


class SlotUnavailable(RuntimeError):
    """The slot failed (no backend, retrying) or was deleted while the request waited."""


class Count(Protocol):
    @property
    def tokens(self) -> int: ...

    @property
    def exact(self) -> bool:
        """False: at least `tokens` (counting stopped early, or a lower bound stood in)."""
        ...


class PromptCounter(Protocol):
    """A model's prompt tokens, as its engine will count them (`engines.tokencount`)."""

    def count(
        self,
        body: Mapping[str, Any],
        *,
        chat: bool,
        template_args: Mapping[str, Any] | None,
        limit: int,
        enough: int = 0,
    ) -> Count:
        """The prompt's tokens; blocking (the caller runs a big one in a thread), bounded
        work: it stops once the count passes `limit`; a prompt sure to have at most `enough`
        tokens may be answered with that upper bound, untokenised (`exact` False)."""
        ...

    def at_least(self, body: Mapping[str, Any], *, chat: bool) -> int:
        """A lower bound of the prompt's tokens from its characters alone (cheap: no template,
        no tokenising), to refuse a prompt far too long before counting it."""
        ...


class Upstream(Protocol):
    """The backend a lease holds."""

    @property
    def spec(self) -> contract.SlotSpec:
        """The spec the backend serves (served name, source, request policy)."""
        ...

    @property
    def pinned(self) -> str:
        """The `model` value the backend is sent: its own model path (never loads another)."""
        ...

    @property
    def port(self) -> int: ...

    @property
    def fingerprint(self) -> str | None:
        """The backend's own system_fingerprint (learnt at its warm-up), if known."""
        ...

    @property
    def vocab_size(self) -> int | None:
        """The model's vocabulary size (config.json), if known: token ids must be below it."""
        ...

    @property
    def counter(self) -> PromptCounter:
        """Counts a request's prompt tokens with this backend's model's tokenizer."""
        ...


class Lease(Protocol):
    """What a request holds from admission to its last byte."""

    @property
    def upstream(self) -> Upstream: ...

    @property
    def waited_s(self) -> float: ...

    def release(self, *, ok: bool) -> None:
        """The request ended (ok=False: it failed); its place goes to the next one."""
        ...

    def sent(self) -> None:
        """The request goes to the backend now (it waits for its first token from here)."""
        ...

    def answered(self) -> None:
        """Its first token (or its answer) arrived: the backend is not held up by it."""
        ...

    def first_in_line(self) -> bool:
        """No request sent to this backend before it is still in flight."""
        ...

    def stuck(self, reason: str) -> None:
        """The backend holds this request's work and cannot stop it (its client left): the
        slot replaces the backend (in-flight requests on it may finish, where memory allows)."""
        ...


class Route(Protocol):
    """One slot, as a destination of requests."""

    @property
    def name(self) -> str: ...

    @property
    def desired(self) -> contract.SlotSpec:
        """The slot's desired spec (its data-plane policy: allowed image URLs)."""
        ...

    async def lease(self, *, timeout_s: float) -> Lease:
        """Lease the active backend, queueing while it is not ready or busy (see the errors)."""
        ...

    def serving(self) -> Upstream | None:
        """The active backend, not leased (None while none serves): what a lease gets now."""
        ...


class Routes(Protocol):
    """Every slot of the agent, by served name."""

    def route(self, served_name: str) -> Route | None: ...

    def slot_route(self, slot: str) -> Route | None:
        """The slot named `slot` (the gateway addresses slots by name), None when absent."""
        ...

    def served_names(self) -> list[str]: ...

    def serving(self) -> bool:
        """Some slot has a backend that takes requests now (the data plane's `GET /health`)."""
        ...
