"""`hangup.watch_disconnect`: both proxies hear a client hang up before its answer is
complete. On the product's ports (`connlimits`) the connection calls the app's callback from
`connection_lost` (no task per request); elsewhere a task waits on `receive()`. Driven through
uvicorn's own protocol with an in-memory transport (tests/support/uvicornport.py)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from mlxfleet_common.wire import hangup
from mlxfleet_common.wire import openai_proxy as asgi
from tests.support import uvicornport


class Probe:
    """An app that reads its body, watches for the hang-up, and answers when told to."""

    def __init__(self) -> None:
        self.gone = 0
        self.hooked = False
        self.answer = asyncio.Event()

    def left(self) -> None:
        self.gone += 1

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await asgi.read_body(scope, receive, limit=1024)
        self.hooked = hangup.GONE in scope
        unwatch = hangup.watch_disconnect(scope, receive, self.left)
        try:
            await self.answer.wait()
            await asgi.send_json(send, 200, b"{}")
        finally:
            unwatch()


def run(*, answer_first: bool) -> Probe:
    """One request on the port's protocol; the client leaves while its answer is awaited (or
    once it was answered, `answer_first`)."""
    with uvicornport.event_loop() as loop:
        app = Probe()
        proto, _ = uvicornport.connect(loop, app)
        proto.data_received(uvicornport.REQUEST)
        uvicornport.turns(loop)
        if answer_first:
            app.answer.set()
            uvicornport.turns(loop)
        proto.connection_lost(None)
        uvicornport.turns(loop)
        app.answer.set()
        uvicornport.finish(loop)
        return app


def test_a_client_that_hangs_up_mid_answer_is_heard_once_without_a_task() -> None:
    app = run(answer_first=False)
    assert app.hooked, "the port's scope does not carry the hang-up hook"
    assert app.gone == 1


def test_a_client_that_leaves_after_its_answer_is_not_gone() -> None:
    app = run(answer_first=True)
    assert app.gone == 0


@pytest.mark.parametrize(
    "first_lingers",
    [
        pytest.param(False, id="first-stops-watching-at-its-answer"),
        pytest.param(True, id="first-stops-watching-after-the-second-began"),
    ],
)
def test_the_second_of_two_pipelined_requests_hears_its_client_leave(
    first_lingers: bool,
) -> None:
    """uvicorn starts a pipelined request's app from inside the answer's last `send` of the
    one before, so the second request may watch before the first stops watching. Before: the
    first's late stop cleared the connection's one hook, whoever had set it, and the second
    request streamed on to a client that had left (`first-stops-watching-after-...`)."""
    with uvicornport.event_loop() as loop:
        app = uvicornport.Pipelined(2)
        uvicornport.release(app.watch[0], app.watch[1], app.answer[0])
        if not first_lingers:
            app.done[0].set()
        proto, transport = uvicornport.connect(loop, app)
        proto.data_received(uvicornport.REQUEST * 2)
        uvicornport.turns(loop)
        assert transport.written.count(b"HTTP/1.1 200 OK") == 1  # the first answered
        app.done[0].set()  # the first stops watching: after the second began, when it lingers
        uvicornport.turns(loop)
        proto.connection_lost(None)
        uvicornport.turns(loop)
        uvicornport.release(app.answer[1], app.done[1])
        uvicornport.finish(loop)
    assert app.gone == [0, 1]


def test_a_client_leaving_between_pipelined_requests_leaves_the_answered_one_alone() -> None:
    """The client leaves once the first answer is complete, while the first has not stopped
    watching and the second has not begun to: the first is not gone (its answer is whole;
    before: it was told, as the connection's newest request was unanswered), the second is
    told as soon as it watches."""
    with uvicornport.event_loop() as loop:
        app = uvicornport.Pipelined(2)
        uvicornport.release(app.watch[0], app.answer[0])
        proto, transport = uvicornport.connect(loop, app)
        proto.data_received(uvicornport.REQUEST * 2)
        uvicornport.turns(loop)
        assert transport.written.count(b"HTTP/1.1 200 OK") == 1
        proto.connection_lost(None)
        uvicornport.turns(loop)
        assert app.gone == [0, 0]
        app.watch[1].set()
        uvicornport.turns(loop)
        assert app.gone == [0, 1]
        uvicornport.release(app.done[0], app.answer[1], app.done[1])
        uvicornport.finish(loop)
    assert app.gone == [0, 1]


def test_without_the_hook_a_task_waits_on_receive() -> None:
    """Another server (no `GONE` in the scope): a task hears `http.disconnect`, and the stop
    function cancels it."""
    heard: list[bool] = []

    async def main() -> None:
        leave = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await leave.wait()
            return {"type": "http.disconnect"}

        stop = hangup.watch_disconnect({}, receive, lambda: heard.append(True))
        await asyncio.sleep(0)
        leave.set()
        await asyncio.sleep(0.01)
        assert heard == [True]
        heard.clear()
        stop_early = hangup.watch_disconnect({}, receive, lambda: heard.append(True))
        stop_early()
        await asyncio.sleep(0.01)
        stop()

    asyncio.run(main())
    assert heard == []


def test_answered_requests_leave_no_reference_cycle_behind() -> None:
    """Each request's scope holds its hang-up watch, and the watch holds the request only
    weakly: a strong hold made every request a cycle (scope -> watch -> request -> scope) that
    only the cyclic collector frees, one collection every ~50 requests on a busy port."""
    probe = Probe()
    probe.answer.set()
    with uvicornport.event_loop() as loop:
        proto, transport = uvicornport.connect(loop, probe)
        gc.collect()
        gc.disable()  # cyclic garbage stays visible in gc.get_objects()
        try:
            for _ in range(5):
                proto.data_received(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
                uvicornport.turns(loop)
            cycles = [o for o in gc.get_objects() if type(o).__name__ == "RequestResponseCycle"]
        finally:
            gc.enable()
        assert transport.written.count(b"HTTP/1.1 200") == 5
        assert probe.gone == 0
        assert cycles == [proto.cycle]  # the connection's last request, nothing before it
