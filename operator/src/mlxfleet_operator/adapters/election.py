"""Run the operator as an elected leader: campaign, act while the Lease is ours, hand it over.

The elector runs on a thread with its own event loop (`Candidate`): kopf's loop may be blocked
for seconds by synchronous work (startup builds the Kubernetes client), and renewals must not
wait for it. Fencing does not depend on either loop: a `leader.Watchdog` thread exits the process
when the renew deadline passes. On SIGTERM kopf gets `STOP_GRACE` to stop, then what still runs
is cancelled. `alone()` runs `--standalone` (no election), but not beside an
elected leader that renews the Lease. Order on SIGTERM: kopf stops (no handler runs), the worker
threads' last calls finish, the watchdog stops, the Lease is released. The elector's Lease calls
use the operator's Kubernetes client (`kubeapi`), in a pool of its own on the elector's loop (a
pool belongs to one event loop).

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
# calls of worker threads still running when kopf stopped get this long to finish
# (the lease is renewed meanwhile) before the leader exits without handing the lease over.
DRAIN_SECONDS = 10.0
# kopf's own shutdown waits up to 5 s for tasks that do not end by themselves; a leader that
# steps down cancels them after this long (handlers resume from status on the next leader).
STOP_GRACE = 0.5
EXIT_LED = 3  # --standalone refused: an elected leader is alive


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
            await lease.connect(self._kubeconfig),
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
    leader.lead_with(None)  # a standby never acts (`leader.may_act`)
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
        stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())  # before kopf: kopf
        operating: asyncio.Future[Any] = asyncio.ensure_future(operate(stop))  # leaves it be
        await asyncio.wait({holding, operating, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not operating.done() and not holding.done():  # stopping: kopf gets a short grace
            await asyncio.wait(
                {holding, operating}, timeout=STOP_GRACE, return_when=asyncio.FIRST_COMPLETED
            )
        if holding.done():
            leader.fence("the lease could not be renewed in time or was taken over")
        if not operating.done():  # what is still running is cancelled (it resumes from status)
            operating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await operating
        stopping.cancel()
        log.info("kopf stopped; finishing calls in worker threads before releasing the lease")
        try:  # kopf stopped; what its handlers still run in worker threads: let it end
            async with asyncio.timeout(DRAIN_SECONDS):
                await loop.shutdown_default_executor()
        except TimeoutError:
            leader.fence(f"worker threads still running {DRAIN_SECONDS:.0f}s after stopping")
        leader.lead_with(None)
        watchdog.stop()
        await candidate.release()
        if not operating.cancelled():
            operating.result()  # kopf's own error, if it stopped on one
    finally:
        await candidate.close()


async def led_by(settings: leader.ElectionSettings, *, kubeconfig: str | None) -> str | None:
    """The holder of the Lease if it is alive (renewed while we watched), else None. Watches at
    most one lease duration; an unreadable Lease (RBAC, API server down) counts as not led."""
    timing = settings.timing
    store = lease.LeaseStore(
        await lease.connect(kubeconfig),  # on this loop: the operator's pool is not open yet
        namespace=settings.namespace,
        name=settings.lease_name,
        default_duration=settings.lease_duration,
    )
    try:
        async with asyncio.timeout(timing.renew_deadline):
            first = await store.read()
        if first is None or first.record.free:
            return None
        until = loop_time() + first.record.lease_duration + timing.retry_period
        while loop_time() < until:
            await asyncio.sleep(timing.retry_period)
            async with asyncio.timeout(timing.renew_deadline):
                again = await store.read()
            if again is None or again.record.free:
                return None
            if again.record != first.record:
                return again.record.holder
        return None  # not renewed for its whole duration: its holder is gone
    except (lease.LeaseError, TimeoutError) as exc:
        log.warning("cannot read the lease, not checking for an elected leader: %s", exc)
        return None
    finally:
        await store.aclose()


def loop_time() -> float:
    return asyncio.get_running_loop().time()


async def alone(
    settings: leader.ElectionSettings,
    *,
    kubeconfig: str | None,
    operate: Callable[[], Awaitable[None]],
) -> None:
    """`--standalone`: run without election, unless an elected leader is alive (a standalone
    operator beside elected replicas would act at the same time as their leader)."""
    holder = await led_by(settings, kubeconfig=kubeconfig)
    if holder is not None:
        log.error(
            "refusing to run --standalone: %s leads (Lease %s/%s is being renewed); stop the "
            "elected replicas first, or run without --standalone to stand by",
            holder,
            settings.namespace,
            settings.lease_name,
        )
        raise SystemExit(EXIT_LED)
    await operate()
