"""A node's heat (pure): the InferenceNode's ThermalPressure condition and `status.thermal` from
what the agent reports, and how warm placement sees the node.

ThermalPressure is True at serious or critical (placement then gives the node no new replica,
`core.fleet.nodeviews.PRESSURES`; its replicas stay); fair is False but placement prefers
cooler nodes (`warmth`). Like MemoryPressure, the message is written when the level changes and
kept while it stays; the figures in `status.thermal` are refreshed with the heartbeat (or when
the level changes), not on every poll.
May import: the standard library, `api`, the agent `contract`, `core.kit.conditions`.
Called by: `core.node.status`, `core.fleet.nodeviews` (`warmth`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.core.kit import conditions

HOT = ("serious", "critical")
REASONS = {
    "nominal": cond.Reason.THERMAL_NOMINAL,
    "fair": cond.Reason.THERMAL_FAIR,
    "serious": cond.Reason.THERMAL_SERIOUS,
    "critical": cond.Reason.THERMAL_CRITICAL,
}


def condition(
    current: Sequence[cond.Condition],
    thermal: contract.ThermalInfo | None,
    *,
    generation: int | None,
    now: datetime,
) -> list[cond.Condition]:
    """ThermalPressure from the agent's level. An agent that has not sampled its host yet (it
    just started) or predates heat reports no `thermal`: the condition written stays, so a hot
    node's restarted agent does not open it to new replicas for a poll. An agent that sampled
    and has no source that gives a level: the condition is removed, never guessed."""
    if thermal is None:
        return list(current)
    if thermal.level is None:
        return conditions.drop_condition(current, cond.ConditionType.THERMAL_PRESSURE)
    level = thermal.level
    said = f": {thermal.level_reason}" if thermal.level_reason else ""
    then = (
        "; no new replicas are placed here until it cools down"
        if level in HOT
        else "; placement prefers cooler nodes"
        if level == "fair"
        else ""
    )
    return conditions.set_reading(
        current,
        kind=cond.ConditionType.THERMAL_PRESSURE,
        status=level in HOT,
        reason=REASONS[level],
        message=f"agent reports thermal pressure {level}{said}{then}",
        generation=generation,
        now=now,
    )


def status(
    old: inode.ThermalStatus | None, thermal: contract.ThermalInfo | None, *, refresh: bool
) -> inode.ThermalStatus | None:
    """`status.thermal`: the agent's figures (rounded) when `refresh` (the heartbeat is written
    now), when the level changed or when nothing was written yet; else the ones written (also
    while the agent has not sampled yet). None when the agent's host gives no figure at all."""
    if thermal is None:
        return old
    if thermal == contract.ThermalInfo():
        return None
    fresh = inode.ThermalStatus(
        level=thermal.level,
        source=thermal.level_reason[:300] if thermal.level_reason else None,
        gpu_utilization_percent=_rounded(
            thermal.gpu_utilization * 100 if thermal.gpu_utilization is not None else None,
            0,
            100,
        ),
        gpu_temperature_celsius=_rounded(thermal.gpu_temperature_celsius, -50, 200),
        cpu_temperature_celsius=_rounded(thermal.cpu_temperature_celsius, -50, 200),
        power_watts=round(thermal.power_watts, 1) if thermal.power_watts is not None else None,
        power_source=thermal.power_source,
    )
    if old is None or refresh or old.level != fresh.level:
        return fresh
    return old


def _rounded(value: float | None, low: int, high: int) -> int | None:
    """Whole units within the status schema's bounds (an agent's odd sensor value never fails
    the status write)."""
    return min(high, max(low, round(value))) if value is not None else None


def warmth(node_conditions: Sequence[cond.Condition]) -> int:
    """How warm placement sees the node among those that may take a replica: 1 at thermal
    pressure fair, else 0 (serious and critical keep new replicas off altogether)."""
    found = cond.find(list(node_conditions), cond.ConditionType.THERMAL_PRESSURE)
    return 1 if found is not None and found.reason == cond.Reason.THERMAL_FAIR else 0
