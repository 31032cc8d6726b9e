"""The hang-up hook of the product's ports (`mlxfleet_common.wire.connlimits` + `hangup`) over a
real socket: a real uvicorn (httptools) serving the port's protocol, a raw client pipelining two
requests on one connection and then hanging up while the second is in flight.

uvicorn starts the second request's app from inside the first answer's last `send`, so the
second may watch for the hang-up before the first stops watching. The hook is each request's
own: the first's late stop must not clear the second's, which must still hear its client leave.
tests/unit/common/test_watch_disconnect.py drives the same through the protocol in memory.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
import uvicorn

from mlxfleet_common.wire import connlimits
from tests.support import uvicornport

pytestmark = pytest.mark.timeout(60)
WAIT_S = 10.0


async def _pipelined(*, first_lingers: bool) -> list[int]:
    app = uvicornport.Pipelined(2)
    uvicornport.release(app.watch[0], app.watch[1], app.answer[0])
    if not first_lingers:
        app.done[0].set()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    http = connlimits.protocol(
        max_header_bytes=1024, header_timeout_s=5, body_timeout_s=5, max_connections=4
    )
    config = uvicorn.Config(app, http=http, log_config=None, access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    served = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:  # noqa: ASYNC110 - uvicorn has no event for it
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection(*sock.getsockname())
        writer.write(uvicornport.REQUEST * 2)
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n{}"), WAIT_S)  # the first answer
        await asyncio.wait_for(app.watching[1].wait(), WAIT_S)  # the second is in flight
        app.done[0].set()  # the first stops watching (after the second began, when it lingers)
        await asyncio.sleep(0.05)
        writer.close()  # the client hangs up
        await asyncio.wait_for(app.heard[1].wait(), WAIT_S)
        await asyncio.sleep(0.05)  # (a second, wrong, call would come now)
        return app.gone
    finally:
        uvicornport.release(app.answer[1], app.done[1])
        server.should_exit = True
        await served


@pytest.mark.parametrize(
    "first_lingers",
    [
        pytest.param(False, id="first-stops-watching-at-its-answer"),
        pytest.param(True, id="first-stops-watching-after-the-second-began"),
    ],
)
def test_the_second_pipelined_request_hears_its_client_hang_up(first_lingers: bool) -> None:
    assert asyncio.run(_pipelined(first_lingers=first_lingers)) == [0, 1]
