"""The converge-skip decision (core.deployment.skip.reads): what a timer reconcile depends on,
or that it must run, from typed readings of one deployment."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mlxfleet_operator.core.deployment import skip

# a settled deployment: two replicas placed, no plan open, every node Ready
BASE = skip.Readings(
    sharded=False,
    plans_finished=True,
    settles_at=2,
    placed=("n1", "n2"),
    listed=("n1", "n2"),
    not_ready=(),
    known=("n1", "n2", "n3"),
    preempting=False,
    preemption_in_status=False,
    waiting=False,
)


def with_(**changes: Any) -> skip.Readings:
    return dataclasses.replace(BASE, **changes)


@pytest.mark.parametrize(
    ("readings", "expected"),
    [
        pytest.param(BASE, skip.Reads.PLACED, id="settled-reads-its-nodes-only"),
        pytest.param(
            with_(not_ready=("n2",)), skip.Reads.ALWAYS, id="a-placed-node-not-ready-never-skips"
        ),
        pytest.param(
            with_(placed=("n1",), listed=("n1", "n2"), not_ready=("n2",)),
            skip.Reads.ALWAYS,
            id="a-node-its-status-names-not-ready-never-skips",
        ),
        pytest.param(
            with_(not_ready=("gone",)),
            skip.Reads.PLACED,
            id="a-not-ready-node-elsewhere-does-not-count",
        ),
        pytest.param(
            with_(placed=("n1", "gone"), not_ready=("gone",)),
            skip.Reads.PLACED,
            id="a-deleted-node-is-not-timed",
        ),
        pytest.param(with_(preempting=True), skip.Reads.ALWAYS, id="preemption-under-way"),
        pytest.param(
            with_(preemption_in_status=True),
            skip.Reads.PLACED,
            id="settled-with-a-preemption-in-status-still-skips",
        ),
        pytest.param(
            with_(placed=("n1",), preemption_in_status=True),
            skip.Reads.ALWAYS,
            id="unsettled-with-a-preemption-to-resume",
        ),
        pytest.param(with_(plans_finished=False), skip.Reads.FLEET, id="a-plan-open-reads-fleet"),
        pytest.param(with_(placed=("n1",)), skip.Reads.FLEET, id="a-replica-missing-reads-fleet"),
        pytest.param(
            with_(placed=("n1",), waiting=True), skip.Reads.ROOM, id="waiting-for-room-reads-room"
        ),
        pytest.param(
            with_(sharded=True, waiting=True), skip.Reads.FLEET, id="sharded-never-waits-for-room"
        ),
        pytest.param(
            with_(sharded=True, not_ready=("n3",)),
            skip.Reads.ALWAYS,
            id="sharded-with-any-known-node-not-ready",
        ),
        pytest.param(
            with_(sharded=True, not_ready=("gone",)),
            skip.Reads.FLEET,
            id="sharded-ignores-a-deleted-node",
        ),
        pytest.param(
            with_(settles_at=0, placed=()), skip.Reads.PLACED, id="nothing-wanted-nothing-placed"
        ),
    ],
)
def test_what_a_reconcile_reads(readings: skip.Readings, expected: skip.Reads) -> None:
    assert skip.reads(readings) is expected


def test_settled_needs_every_replica_no_open_plan_and_no_sharding() -> None:
    assert skip.settled(BASE)
    assert not skip.settled(with_(settles_at=3))
    assert not skip.settled(with_(plans_finished=False))
    assert not skip.settled(with_(sharded=True))


def test_stall_is_due_once_ready_has_been_false_for_the_stall_time() -> None:
    """A deployment waiting for room keys its skip on this: it decides again to turn Stalled."""
    from datetime import UTC, datetime, timedelta

    since, after = datetime(2026, 1, 1, tzinfo=UTC), timedelta(seconds=300)
    assert not skip.stall_due(None, now=since + after, after=after)  # Ready is not False
    assert not skip.stall_due(since, now=since + after - timedelta(seconds=1), after=after)
    assert skip.stall_due(since, now=since + after, after=after)
