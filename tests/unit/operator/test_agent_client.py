"""The operator's agent client: answers classified by HTTP status (never by text), a 404 where
nothing is there is not an error, and every call is counted by operation and result."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx
import pytest

from mlxfleet_operator.adapters import agent, metrics

T = TypeVar("T")
CREDS = agent.Credentials(url="http://agent.test:8470", token="t")


def calls(op: str, result: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "mlxfleet_operator_agent_calls_total", {"op": op, "result": result}
    )
    return value or 0.0


def answering(status: int, body: dict[str, object] | None = None) -> agent.AgentClient:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer t"
        return httpx.Response(status, json=body if body is not None else {})

    return agent.AgentClient(CREDS, transport=httpx.MockTransport(handler))


def run(call: Callable[[agent.AgentClient], Awaitable[T]], client: agent.AgentClient) -> T:
    async def go() -> T:
        try:
            return await call(client)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_deleting_a_slot_that_is_not_there_is_fine_and_counted_ok() -> None:
    before = calls("delete_slot", "ok")
    run(lambda c: c.delete_slot("s"), answering(404, {"error": {"message": "no such slot"}}))
    assert calls("delete_slot", "ok") == before + 1


def test_no_swaps_for_a_slot_that_is_not_there() -> None:
    assert run(lambda c: c.swaps("s"), answering(404)) == []


@pytest.mark.parametrize(
    ("status", "kind", "result"),
    [
        pytest.param(409, agent.AgentRefused, "refused", id="409-refused"),
        pytest.param(507, agent.AgentRefused, "refused", id="507-no-room"),
        pytest.param(502, agent.AgentUnreachable, "unreachable", id="502-not-now"),
    ],
)
def test_errors_are_classified_by_status_and_name_the_field(
    status: int, kind: type[agent.AgentError], result: str
) -> None:
    before = calls("delete_slot", result)
    body = {"error": {"field": "servedName", "message": "taken"}}
    with pytest.raises(kind) as raised:
        run(lambda c: c.delete_slot("s"), answering(status, body))
    assert (raised.value.status, raised.value.field) == (status, "servedName")
    assert calls("delete_slot", result) == before + 1


def test_no_answer_is_unreachable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = agent.AgentClient(CREDS, transport=httpx.MockTransport(handler))
    before = calls("state", "unreachable")
    with pytest.raises(agent.AgentUnreachable) as raised:
        run(lambda c: c.state(), client)
    assert raised.value.status is None
    assert calls("state", "unreachable") == before + 1
