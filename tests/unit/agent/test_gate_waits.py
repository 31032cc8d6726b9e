"""slots.gate: `open` and `dispatch` say how long the requests they let through waited.

A hold swap's switch opens the gate and the swap finishes (its record goes to telemetry) before
the woken requests run, so the gate, not the woken request, must report the wait (CI once saw a
hold swap's record with maxQueueWaitMs 0 after requests had queued for seconds).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

from mlxfleet_agent.slots import gate as gate_


@dataclass
class _Backend:
    """What the gate touches of a handle: its places and its limit."""

    max_concurrency: int
    in_flight: int = 0
    spec: Any = field(init=False)

    def __post_init__(self) -> None:
        self.spec = SimpleNamespace(max_concurrency=self.max_concurrency)

    def release(self) -> None:
        self.in_flight -= 1


@dataclass
class _Serving:
    active: Any = None

    def refusal(self) -> str | None:
        return None


def test_open_reports_the_longest_wait_of_the_requests_it_lets_through() -> None:
    async def scenario() -> tuple[float, float, list[Any]]:
        gate = gate_.Gate(slot="s", limit=8)
        backend = _Backend(max_concurrency=1)
        serving = _Serving()
        waiting = [asyncio.create_task(gate.wait(serving, timeout_s=5)) for _ in range(2)]
        await asyncio.sleep(0.2)  # both queue behind the shut gate
        serving.active = backend
        first = gate.open(cast(Any, backend))  # one place: the oldest gets it
        assert not waiting[1].done()
        backend.release()
        second = gate.dispatch(cast(Any, backend))
        return first, second, list(await asyncio.gather(*waiting))

    first, second, handed = asyncio.run(scenario())
    assert first >= 0.2
    assert second >= 0.2  # the second waited as long, and was let through later
    assert all(h is not None for h in handed)


def test_nothing_handed_out_reports_zero() -> None:
    async def scenario() -> tuple[float, float]:
        gate = gate_.Gate(slot="s", limit=8)
        backend = _Backend(max_concurrency=1)
        shut = gate.dispatch(cast(Any, backend))  # gate shut: nobody passes
        opened = gate.open(cast(Any, backend))  # open, but nobody queued
        return shut, opened

    assert asyncio.run(scenario()) == (0.0, 0.0)


def test_a_request_that_gave_up_is_not_counted() -> None:
    async def scenario() -> float:
        gate = gate_.Gate(slot="s", limit=8)
        backend = _Backend(max_concurrency=1)
        serving = _Serving()
        gone = asyncio.create_task(gate.wait(serving, timeout_s=0.05))
        await asyncio.sleep(0.2)
        assert gone.done()
        assert isinstance(gone.exception(), Exception)
        return gate.open(cast(Any, backend))

    assert asyncio.run(scenario()) == 0.0
