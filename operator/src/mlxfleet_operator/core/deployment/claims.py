"""Agent slot names claimed by ModelDeployments: the slot name is derived from namespace and
name (`core.naming.slot_name`), and two long names that start alike can share one. The oldest
deployment keeps the slot; any other is refused (`SlotNameConflict`) and never touches it.

May import: the standard library, `core.kit.naming`. Called by: the kopf index of
ModelDeployments, and the ModelDeployment and SwapPlan handlers before any agent call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mlxfleet_operator.core.kit import naming


@dataclass(frozen=True, order=True)
class SlotClaim:
    """A ModelDeployment whose agent slot name is `slot`, ordered oldest first."""

    created: str  # creationTimestamp (ISO 8601, UTC: sorts as text)
    namespace: str
    name: str
    uid: str = field(compare=False)


def slot_owner(claims: Sequence[SlotClaim]) -> SlotClaim | None:
    """Of the deployments whose slot names are equal (a hash collision), the one that keeps the
    slot: the oldest (then by namespace and name, so every operator replica agrees)."""
    return min(claims) if claims else None


def slot_conflict(
    claims: Sequence[SlotClaim], *, namespace: str, name: str, uid: str
) -> str | None:
    """Why this deployment may not use its slot name: another one (in `claims`, every
    deployment whose slot name is this one's) had it first."""
    slot = naming.slot_name(namespace, name)
    owner = slot_owner(claims)
    if owner is None or owner.uid == uid:
        return None
    return (
        f"agent slot name {slot} is already used by ModelDeployment {owner.namespace}/{owner.name} "
        "(long names that start alike can share one): rename this ModelDeployment"
    )
