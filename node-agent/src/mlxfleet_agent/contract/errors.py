"""Error bodies of the control API (4xx and the 507 of a model that does not fit).

May import: pydantic and the standard library only (pure).
Called by: the agent's control API, the operator's agent client.
"""

from __future__ import annotations

from pydantic import Field

from mlxfleet_agent.contract.base import Wire


class ErrorDetail(Wire):
    field: str | None = Field(default=None, description="dotted path of the offending field")
    message: str
    allowed: str | None = None


class ErrorBody(Wire):
    error: ErrorDetail


class InsufficientMemory(Wire):
    """507 body: the model (plus its KV cache) does not fit the agent's memory budget."""

    error: ErrorDetail
    estimate_bytes: int
    budget_bytes: int
    free_bytes: int
