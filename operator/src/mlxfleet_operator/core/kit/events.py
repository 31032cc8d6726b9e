"""Kubernetes Events as values: decided in core, posted by `adapters.events`.

May import: the standard library. Called by: core decisions (node Ready flips, SwapPlan phase
changes, deployment moves) and the handlers that pass them on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """One Event on the object being handled: `reason` is CamelCase, `message` says why."""

    reason: str
    message: str
    warning: bool = False

    @property
    def type(self) -> str:
        return "Warning" if self.warning else "Normal"
