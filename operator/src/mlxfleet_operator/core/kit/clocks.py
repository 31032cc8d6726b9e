"""Two clocks: an agent's wall clock against the operator's.

An agent reports its `now` in `GET /v1/state`; `offset` is how far its clock is ahead of the
operator's (the operator's time at the middle of the round trip), and `to_operator` puts a time
the agent wrote (a swap record's) on the operator's clock.
May import: the standard library only (pure). Called by: the agent adapter (`fleet.observe`)
and `core.swapplan` (`steps`, `rollback`).
"""

from __future__ import annotations

from datetime import datetime, timedelta


def offset(agent_now: datetime | None, sent: datetime, round_trip: timedelta) -> timedelta | None:
    """The agent's clock minus the operator's: its `now` against the operator's clock halfway
    through the request (sent at `sent`, answered after `round_trip`); the error is at most half
    the round trip. None: an agent too old to report its clock."""
    if agent_now is None:
        return None
    return agent_now - (sent + round_trip / 2)


def to_operator(
    when: datetime,
    offset: timedelta | None,
    *,
    floor: datetime | None = None,
    ceiling: datetime | None = None,
) -> datetime:
    """An agent's time on the operator's clock (offset None: taken as is). `floor`/`ceiling`
    bound it (the step's start, the operator's now), so that an error of the offset estimate
    never puts an agent event before the operator asked for it or in the future. Monotone:
    times in order stay in order."""
    local = when - offset if offset is not None else when
    if floor is not None:
        local = max(local, floor)
    if ceiling is not None:
        local = min(local, ceiling)
    return local
