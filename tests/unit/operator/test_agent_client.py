"""The operator's agent client: answers classified by HTTP status (never by text), a 404 where
nothing is there is not an error, and every call is counted by operation and result."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import httpx
import pytest

from mlxfleet_operator.adapters import agent, fleet, fleetview, leader, metrics
from mlxfleet_operator.api.modelref import ModelRef
from mlxfleet_operator.core.fleet import facts

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


class _Answers404(http.server.BaseHTTPRequestHandler):
    """A real agent-like HTTP server (keep-alive) that answers every DELETE at once."""

    protocol_version = "HTTP/1.1"

    def do_DELETE(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def quick_agent() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers404)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def _under_lag(url: str, io: agent.IoLoop | None) -> tuple[int, int]:
    """(answered, failed) of 5 agents x 4 rounds of requests while the caller's event loop is
    busy: every turn of it takes 150 ms (other handlers' work) against a 0.5 s timeout."""

    async def busy() -> None:
        while True:
            time.sleep(0.15)  # noqa: ASYNC251 - the point: a loop that is late on every turn
            await asyncio.sleep(0)

    async def go() -> tuple[int, int]:
        lag = asyncio.create_task(busy())
        clients = [agent.AgentClient(agent.Credentials(url=url, token="t"), io=io) for _ in "12345"]
        answered = failed = 0
        try:
            for _ in range(4):
                got = await asyncio.gather(
                    *(c.delete_slot("s") for c in clients), return_exceptions=True
                )
                failed += sum(isinstance(g, Exception) for g in got)
                answered += sum(not isinstance(g, Exception) for g in got)
        finally:
            lag.cancel()
            for c in clients:
                await c.aclose()
        return answered, failed

    return asyncio.run(go())


def test_a_busy_operator_loop_does_not_make_a_quick_agent_time_out(
    quick_agent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent, "DEFAULT_TIMEOUT", httpx.Timeout(0.5, connect=0.5))
    io = agent.IoLoop()
    try:
        assert _under_lag(quick_agent, io) == (20, 0)  # sent and timed on the agent loop
    finally:
        io.close()
    # the same requests timed on the busy loop itself: the agent answered, yet they time out
    # (what the 100x300 bench showed: healthy Macs declared lost)
    answered, failed = _under_lag(quick_agent, None)
    assert failed > 0, (answered, failed)


class _Counting(http.server.ThreadingHTTPServer):
    """`quick_agent`'s server, counting the connections it accepted."""

    accepted = 0

    def get_request(self) -> tuple[object, object]:
        self.accepted += 1
        return super().get_request()  # type: ignore[return-value]


def test_a_poll_reuses_the_connection_of_the_poll_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polls come every --poll-seconds (5 s): httpx's default keep-alive of 5 s let each poll
    find its connection just expired (a new TCP connection per poll, 100 a second at 500
    nodes). The next request, a poll interval later, goes on the same connection; and the
    client gives it up before the agent's server would (30 s)."""
    import httpcore._async.http11 as http11

    from mlxfleet_agent.runtime import serve
    from mlxfleet_operator import settings as opsettings

    poll = opsettings.OperatorSettings().poll_seconds
    assert poll < agent.KEEPALIVE_S < serve.KEEP_ALIVE_S
    server = _Counting(("127.0.0.1", 0), _Answers404)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    clock = [time.monotonic()]
    monkeypatch.setattr(http11.time, "monotonic", lambda: clock[0])

    async def go() -> None:
        creds = agent.Credentials(url=f"http://127.0.0.1:{server.server_port}", token="t")
        client = agent.AgentClient(creds)
        try:
            await client.delete_slot("s")
            clock[0] += poll + 1  # the next poll
            await client.delete_slot("s")
            assert server.accepted == 1
            clock[0] += agent.KEEPALIVE_S + 1  # idle longer than kept: a new connection
            await client.delete_slot("s")
            assert server.accepted == 2
        finally:
            await client.aclose()

    try:
        asyncio.run(go())
    finally:
        server.shutdown()
        server.server_close()


def test_the_fleet_sends_on_its_own_loop_and_stops_it_on_close(quick_agent: str) -> None:
    view = fleet.Fleet(None)  # type: ignore[arg-type]  # no Kubernetes needed here
    threads = {t.name for t in threading.enumerate()}
    assert "mlxfleet-agent-io" not in threads  # started on first use only

    async def go() -> None:
        creds = agent.Credentials(url=quick_agent, token="t")
        view.entries["n"] = fleetview.Entry(client=agent.AgentClient(creds, io=view.io))
        here = threading.get_ident()
        assert await view.delete_slot("n", "s") == facts.Outcome("n")
        assert "mlxfleet-agent-io" in {t.name for t in threading.enumerate()}
        assert threading.get_ident() == here
        await view.aclose()

    asyncio.run(go())
    assert "mlxfleet-agent-io" not in {t.name for t in threading.enumerate()}


def test_clients_share_one_tls_context_per_trust_root() -> None:
    """Each httpx client that makes its own default context loads the CA bundle again (about
    0.9 MB and 60 ms each: 430 MB of operator RSS for 500 nodes)."""
    one = agent.AgentClient(agent.Credentials(url="http://a:1", token="t"))
    two = agent.AgentClient(agent.Credentials(url="https://b:1", token="u"))
    contexts = {
        id(c._http._transport._pool._ssl_context)  # type: ignore[attr-defined]
        for c in (one, two)
    }
    assert len(contexts) == 1
    assert agent._verify(None) is agent._verify(None)
    asyncio.run(one.aclose())
    asyncio.run(two.aclose())


class _Stale:
    """An elector whose lease is past its renew deadline (e.g. a leader woken from SIGSTOP)."""

    def leading(self) -> bool:
        return False


@pytest.fixture
def not_leading() -> Iterator[None]:
    leader.lead_with(_Stale())  # type: ignore[arg-type]
    try:
        yield
    finally:
        leader.lead_with(leader.ALONE)


def test_a_process_that_may_not_act_changes_no_agent_but_still_reads(not_leading: None) -> None:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.method)
        return httpx.Response(404, json={})

    before = calls("delete_slot", "not_leading")
    for change in (
        lambda c: c.delete_slot("x"),
        lambda c: c.prefetch(ModelRef("file:///m", None)),
    ):
        with pytest.raises(agent.NotLeading):
            run(change, agent.AgentClient(CREDS, transport=httpx.MockTransport(handler)))
    assert sent == []  # fenced before anything reached the agent
    assert calls("delete_slot", "not_leading") == before + 1
    assert (
        run(
            lambda c: c.swaps("x"), agent.AgentClient(CREDS, transport=httpx.MockTransport(handler))
        )
        == []
    )
    assert sent == ["GET"]


def test_standby_then_leader_then_stopped() -> None:
    assert leader.may_act()  # no election in this process: it acts
    leader.lead_with(None)
    try:
        assert not leader.may_act()
    finally:
        leader.lead_with(leader.ALONE)
