"""What the agent refuses, as domain errors: `Rejected` (an HTTP status, the field at fault and
what is allowed) and `NoFit` (the model does not fit the memory budget: 507).

Raised by the slot registry (admission) and the model catalog (store errors); mapped to HTTP
once, by the control API. May import: the standard library only (pure).
Called by: slots.registry, models.catalog, controlapi.
"""

from __future__ import annotations


class Rejected(Exception):
    """A request the agent refuses; `status` is the HTTP code, `field` names the culprit."""

    def __init__(
        self, status: int, message: str, *, field: str | None = None, allowed: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.allowed = allowed


class NoFit(Exception):
    """The model does not fit the memory budget (507)."""

    def __init__(self, *, estimate: int, budget: int, free: int) -> None:
        super().__init__(
            f"model needs an estimated {estimate} bytes but only {free} of the {budget} byte "
            "budget are free"
        )
        self.estimate = estimate
        self.budget = budget
        self.free = free
