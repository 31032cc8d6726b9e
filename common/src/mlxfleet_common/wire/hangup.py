"""Hearing a client hang up before its answer is complete, without a task per request.

Both proxies must stop an answer whose client has left (the gateway cuts its attempt upstream,
the agent drops its backend's connection, which stops generation). ASGI says so only through a
`receive()` that returns `http.disconnect`, so each request used to run a task waiting on it.
The product's ports (`connlimits`) put `GONE` in each request's scope instead: a function that
takes the callback the connection calls (once, from the event loop) in its `connection_lost`,
when uvicorn would have told a waiting `receive()`; `watch_disconnect` uses it, and falls back
to the task under another server.
May import: the standard library, openai_proxy. Called by: connlimits, the agent's
dataplane.relay, the gateway's proxy.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from mlxfleet_common.wire.openai_proxy import Receive, Scope, until_disconnect

# scope key of the product's ports (`connlimits`): a function that takes the callback to call
# when the client hangs up before this request's answer is complete (None: no longer); each
# request's own, so stopping one request's watch never stops another's on the connection
GONE = "mlxfleet.gone"


def watch_disconnect(
    scope: Scope, receive: Receive, gone: Callable[[], None]
) -> Callable[[], None]:
    """Call `gone` (once, from the event loop) when the client hangs up before its answer is
    complete; return what stops the watch (call it once the answer is done). On the product's
    ports the connection says so itself (`scope[GONE]`: nothing runs per request); under another
    server a task waits on `receive()` (`until_disconnect`)."""
    hook = scope.get(GONE)
    if hook is not None:
        hook(gone)
        return functools.partial(hook, None)
    task = asyncio.get_running_loop().create_task(_until_gone(receive, gone))

    def stop() -> None:
        task.cancel()

    return stop


async def _until_gone(receive: Receive, gone: Callable[[], None]) -> None:
    await until_disconnect(receive)
    gone()
