"""Run the operator as an elected leader: campaign, act while the Lease is ours, hand it over.

The elector runs on a thread with its own event loop (`Candidate`): kopf's loop may be blocked
for seconds by synchronous work (startup builds the Kubernetes client), and renewals must not
wait for it. Fencing does not depend on either loop: a `leader.Watchdog` thread exits the process
when the renew deadline passes. Order on SIGTERM: kopf stops (no handler runs), the worker
threads' last Kubernetes calls finish, the watchdog stops, the Lease is released.

May import: `adapters.leader`, `adapters.lease`, the standard library.
Called by: `mlxfleet_operator.main`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit

from mlxfleet_operator.adapters import leader, lease

log = logging.getLogger("mlxfleet.leader")
T = TypeVar("T")
# Kubernetes calls of worker threads still running when kopf stopped get this long to finish
# (the lease is renewed meanwhile) before the leader exits without handing the lease over.
DRAIN_SECONDS = 10.0


class Candidate:
    """An `Elector` on its own thread and event loop; its coroutines are awaited from any loop."""

    def __init__(self, settings: leader.ElectionSettings, *, kubeconfig: str | None) -> None:
        self.settings = settings
        self._kubeconfig = kubeconfig
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="leader-election", daemon=True
        )
        self._elector: leader.Elector | None = None
        self._holding: asyncio.Task[None] | None = None  # in the election loop

    @property
    def elector(self) -> leader.Elector:
        if self._elector is None:
            raise RuntimeError("candidate not started")
        return self._elector

    def _submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _setup(self) -> leader.Elector:
        store = lease.LeaseStore(
            lease.connect(self._kubeconfig),
            namespace=self.settings.namespace,
            name=self.settings.lease_name,
            default_duration=self.settings.lease_duration,
        )
        return leader.Elector(store, identity=self.settings.identity, timing=self.settings.timing)

    async def start(self) -> None:
        self._thread.start()
        self._elector = await self._submit(self._setup())

    async def campaign(self) -> None:
        await self._submit(self.elector.campaign())

    async def _hold(self) -> None:
        self._holding = asyncio.current_task()
        await self.elector.hold()

    def hold(self) -> asyncio.Future[None]:
        """Renewing; done when leadership is lost."""
        return self._submit(self._hold())

    async def _release(self) -> bool:
        if self._holding is not None:  # no renew may land after the release
            self._holding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._holding
        return await self.elector.release()

    async def release(self) -> bool:
        """Stop renewing and hand the Lease over (call once this replica stopped acting)."""
        return await self._submit(self._release())

    async def close(self) -> None:
        if self._elector is not None:
            with contextlib.suppress(Exception):
                await self._submit(self._elector.store.aclose())
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)  # at exit; the default executor may be shut down
        if not self._thread.is_alive():
            self._loop.close()


async def _answer_probe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
        async with asyncio.timeout(5):
            await reader.readuntil(b"\r\n\r\n")
        body = b'{"role": "standby"}'
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def standby_probe(endpoint: str | None) -> AsyncIterator[None]:
    """Answer the liveness endpoint (200 to anything) while standing by; kopf takes the port
    over once this replica leads."""
    if not endpoint:
        yield
        return
    parts = urlsplit(endpoint)
    server = await asyncio.start_server(
        _answer_probe, host=parts.hostname or "0.0.0.0", port=parts.port or 80
    )
    try:
        yield
    finally:
        server.close()
        await server.wait_closed()


async def until_leader(candidate: Candidate, stop: asyncio.Event) -> bool:
    """Campaign until leading (True), or until `stop` is set (False: nothing is held)."""
    campaign = asyncio.ensure_future(candidate.campaign())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({campaign, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if campaign.done():
            campaign.result()  # its error, if any
            if not stop.is_set():
                return True
        campaign.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await campaign
        await candidate.release()  # in case our claim landed while we were stopping
        return False
    finally:
        stopped.cancel()


async def run(
    settings: leader.ElectionSettings,
    *,
    kubeconfig: str | None,
    liveness: str | None,
    operate: Callable[[asyncio.Event], Awaitable[None]],
) -> None:
    """Stand by until elected, then `operate(stop)` (kopf, stopping when `stop` is set) while the
    Lease is ours. Returns after SIGTERM/SIGINT with the Lease released; exits the process
    (`leader.fence`) when the Lease is lost."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()  # set by SIGTERM/SIGINT until kopf installs its own handlers
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    candidate = Candidate(settings, kubeconfig=kubeconfig)
    await candidate.start()
    try:
        log.info(
            "campaigning for lease %s/%s as %s",
            settings.namespace,
            settings.lease_name,
            settings.identity,
        )
        async with standby_probe(liveness):
            if not await until_leader(candidate, stop):
                log.info("stopped while standing by")
                return
        watchdog = leader.Watchdog(candidate.elector)
        watchdog.start()
        leader.lead_with(candidate.elector)
        holding = candidate.hold()
        operating = asyncio.ensure_future(operate(stop))
        await asyncio.wait({holding, operating}, return_when=asyncio.FIRST_COMPLETED)
        if holding.done():
            leader.fence("the lease could not be renewed in time or was taken over")
        try:  # kopf stopped; its handlers' Kubernetes calls run in worker threads: let them end
            async with asyncio.timeout(DRAIN_SECONDS):
                await loop.shutdown_default_executor()
        except TimeoutError:
            leader.fence(f"Kubernetes calls still running {DRAIN_SECONDS:.0f}s after stopping")
        leader.lead_with(None)
        watchdog.stop()
        await candidate.release()
        operating.result()  # kopf's own error, if it stopped on one
    finally:
        await candidate.close()
