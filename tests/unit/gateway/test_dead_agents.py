"""What the proxy does when probes say an agent stopped answering: nothing for a short stall,
then it moves requests that have not answered yet, and cuts streams only much later."""

from __future__ import annotations

from typing import Any

from mlxfleet_common.wire import httpclient as upstream
from mlxfleet_gateway import calls, metrics, proxy, view
from mlxfleet_gateway.core import balancer


class FakeResponse:
    """Stands in for an upstream.Response: records abort() calls (no socket in unit tests)."""

    def __init__(self) -> None:
        self.aborted: list[str] = []
        self.heard = 0.0

    def abort(self, reason: str) -> None:
        self.aborted.append(reason)


def setup() -> tuple[proxy.Proxy, list[float], dict[str, Any]]:
    now = [0.0]
    p = proxy.Proxy(
        state=view.View(balancer.Balancer()),
        pool=upstream.Pool(),
        gauges=metrics.GatewayMetrics(),
        config=proxy.ProxyConfig(move_after_s=1.0, stream_cut_after_s=10.0),
        clock=lambda: now[0],
    )
    waiting, streaming = calls.Exchange("http://a:1"), calls.Exchange("http://a:1")
    streaming.started = True
    for ex in (waiting, streaming):
        ex.response = FakeResponse()  # type: ignore[assignment]
    p.origins.inflight["http://a:1"] = {waiting, streaming}
    return p, now, {"waiting": waiting.response, "streaming": streaming.response}


def test_a_short_stall_moves_nothing() -> None:
    p, now, r = setup()
    p.origins.on_dead("http://a:1")
    now[0] = 0.7
    p.origins.on_dead("http://a:1")
    p.origins.on_alive("http://a:1")  # it answered again: the clock restarts
    now[0] = 1.5
    p.origins.on_dead("http://a:1")
    assert r["waiting"].aborted == []
    assert r["streaming"].aborted == []


def test_a_silent_agent_loses_waiting_requests_then_its_streams() -> None:
    p, now, r = setup()
    p.origins.on_dead("http://a:1")
    now[0] = 1.2
    p.origins.on_dead("http://a:1")
    assert r["waiting"].aborted == ["the agent stopped answering"]
    assert r["streaming"].aborted == []
    now[0] = 10.5
    p.origins.on_dead("http://a:1")
    assert r["streaming"].aborted == ["the agent stopped answering"]


def test_last_heard_is_the_latest_byte_on_the_origin() -> None:
    p, _, r = setup()
    r["waiting"].heard, r["streaming"].heard = 3.0, 5.0
    assert p.origins.last_heard("http://a:1") == 5.0
    assert p.origins.last_heard("http://b:1") == 0.0
