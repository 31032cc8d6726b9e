"""The slots as the data plane sees them: which slot serves model X, and a lease on its backend.

The narrow view the data plane is written against (it imports nothing else of `slots`):
`Routes.route(served_name)` gives a `Route` (a slot), `Route.lease(timeout_s=...)` a `Lease` on
its active backend (`Upstream`: the port, the pinned model path, the spec it serves), held until
the request's last byte and given back with `Lease.release(ok=...)`. A lease is refused with
`QueueFull`, `QueueTimeout` or `SlotUnavailable`. The registry and `slot.Slot` implement these
protocols.
May import: contract, the standard library. Called by: dataplane, slots (slot, gate, registry).
"""

from __future__ import annotations

from typing import Protocol

from mlxfleet_agent import contract


class QueueFull(RuntimeError):
    """The slot's wait queue is at its bound."""


class QueueTimeout(RuntimeError):
    """A queued request waited longer than the queue timeout."""


class SlotUnavailable(RuntimeError):
    """The slot failed (no backend, retrying) or was deleted while the request waited."""


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


class Lease(Protocol):
    """What a request holds from admission to its last byte."""

    @property
    def upstream(self) -> Upstream: ...

    @property
    def waited_s(self) -> float: ...

    def release(self, *, ok: bool) -> None:
        """The request ended (ok=False: it failed); its place goes to the next one."""
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
