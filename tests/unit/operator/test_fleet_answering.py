"""The fleet view's notion of an agent that answers: a failed request after the last state makes
the node not fresh for sharded groups (no group re-forms on it) until it answers again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.adapters import agent, fleet, fleetview
from tests.unit.operator import builders

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def state() -> contract.AgentState:
    return builders.state()  # the fleet keeps what it leaves for a new replica too


def answering(entry: fleetview.Entry) -> bool:
    """`entry.answering` read afresh: `record` changes it, which mypy's narrowing cannot see."""
    return entry.answering


def test_a_failed_request_after_the_last_state_is_not_answering() -> None:
    view = fleet.Fleet(None)  # type: ignore[arg-type]  # no Kubernetes needed here
    creds = agent.Credentials(url="http://127.0.0.1:1", token="t")
    view.entries["n"] = fleetview.Entry(client=agent.AgentClient(creds))
    entry = view.entries["n"]
    assert not answering(entry)  # never polled
    view.record("n", state(), now=T0)
    assert answering(entry)
    view.record("n", None, now=T0 + timedelta(seconds=1))
    assert not answering(entry)
    assert entry.state is not None  # the last answer is kept, only its freshness changes
    view.record("n", state(), now=T0 + timedelta(seconds=2))
    assert answering(entry)
