"""Leader election for operator replicas: an asyncio elector on one Lease, with fencing.

`Elector.campaign()` returns once this replica holds the Lease (a standby waits there);
`Elector.hold()` renews it every `retry_period` and returns when leadership is lost: renew
deadline passed, or someone else took the Lease. The caller must then stop acting at once
(`fence`: exit the process, the Deployment restarts it as a standby). A `Watchdog` thread fences
too, independently of the event loop, so a leader whose loop is blocked stops as well.
`release()` hands the Lease over (holder cleared) after the leader stopped acting, so a standby
takes over within one retry period instead of a lease duration. `adapters.election` runs it on a
thread of its own and wires it to kopf.

Why not `kubernetes.leaderelection`: it is thread-based with blocking calls that have no request
timeout (a leader cut off from the API server hangs in a renew and never reaches its deadline:
no fencing), measures time on the wall clock, never releases on shutdown, and runs the leader's
work in a daemon thread.

May import: `adapters.lease`, `core.kit.leadership`, `api.resources`, pydantic,
mlxfleet_common.settings (the flags), the standard library.
Called by: `adapters.election` (and the election tests' driver).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mlxfleet_common.settings import Opt
from mlxfleet_operator.adapters import lease
from mlxfleet_operator.api import resources
from mlxfleet_operator.core.kit import leadership

log = logging.getLogger("mlxfleet.leader")

DEFAULT_LEASE_NAME = "mlxfleet-operator"
ELECTION = "leader election (ignored with --standalone)"
# Exit status of a leader that lost its lease: not an error of the program, a restart makes it
# a standby (EX_TEMPFAIL).
EXIT_LOST_LEASE = 75
# writes of a release over a Lease that changed under it (our own renew that landed late)
RELEASE_ATTEMPTS = 3
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_identity(environ: dict[str, str] | None = None) -> str:
    """The pod's name (`POD_NAME`, from the downward API) or the host name, plus a random suffix:
    a restarted container is a new candidate, never mistaken for its previous self."""
    env = os.environ if environ is None else environ
    base = env.get("POD_NAME") or socket.gethostname() or "mlxfleet-operator"
    return f"{base}_{secrets.token_hex(4)}"


def default_namespace(environ: dict[str, str] | None = None) -> str:
    """`POD_NAMESPACE`, else the in-cluster ServiceAccount's namespace, else mlxfleet-system."""
    env = os.environ if environ is None else environ
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    with contextlib.suppress(OSError):
        found = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        if found:
            return found
    return resources.OPERATOR_NAMESPACE


class ElectionSettings(BaseModel):
    """Flags of the election (`mlxfleet-operator --lease-*`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: Annotated[
        str,
        Field(min_length=1, max_length=63),
        Opt(
            "namespace of the Lease (default: $POD_NAMESPACE, the ServiceAccount's namespace "
            "in a pod, else mlxfleet-system)",
            flag="--leader-election-namespace",
            metavar="LEADER_ELECTION_NAMESPACE",
            group=ELECTION,
        ),
    ]
    lease_name: Annotated[
        str, Field(min_length=1, max_length=253), Opt("name of the Lease", group=ELECTION)
    ] = DEFAULT_LEASE_NAME
    identity: Annotated[
        str,
        Field(min_length=1, max_length=253),
        Opt(
            "this replica's name in the Lease (default: $POD_NAME or the host name, plus a "
            "random suffix)",
            group=ELECTION,
        ),
    ]
    lease_duration: Annotated[
        int,
        Field(ge=1, le=3600),
        Opt(
            "seconds a standby waits for an unrenewed lease before taking over (default 3)",
            group=ELECTION,
        ),
    ] = leadership.Timing.lease_duration
    renew_deadline: Annotated[
        float,
        Field(gt=0, le=3600),
        Opt(
            "seconds a leader may go without renewing before it stops (default 2; less than "
            "--lease-duration)",
            group=ELECTION,
        ),
    ] = leadership.Timing.renew_deadline
    retry_period: Annotated[
        float,
        Field(gt=0, le=3600),
        Opt("seconds between renews and between a standby's tries (default 0.5)", group=ELECTION),
    ] = leadership.Timing.retry_period

    @model_validator(mode="after")
    def _ordered(self) -> ElectionSettings:
        self.timing  # noqa: B018 - raises ValueError naming the field when out of order
        return self

    @property
    def timing(self) -> leadership.Timing:
        return leadership.Timing(
            lease_duration=self.lease_duration,
            renew_deadline=self.renew_deadline,
            retry_period=self.retry_period,
        )


def _wall() -> datetime:
    return datetime.now(UTC)


class Elector:
    """One candidate. `renewed_at` (monotonic) is the start of its last successful write of the
    Lease while leading; None while it is a candidate."""

    def __init__(
        self,
        store: lease.LeaseStore,
        *,
        identity: str,
        timing: leadership.Timing,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.identity = identity
        self.timing = timing
        self.clock = clock
        self.renewed_at: float | None = None
        self._seen: leadership.Seen | None = None
        self._lease: lease.Lease | None = None

    def deadline(self) -> float | None:
        """When this leader must have stopped acting (None: not leading)."""
        at = self.renewed_at
        return None if at is None else at + self.timing.renew_deadline

    def leading(self) -> bool:
        """Leader now, with a lease that is still fresh: the check before acting."""
        at = self.renewed_at
        return at is not None and not leadership.must_stop(at, now=self.clock(), timing=self.timing)

    async def _read(self) -> None:
        async with asyncio.timeout(self.timing.renew_deadline):
            found = await self.store.read()
        self._lease = found
        self._seen = leadership.observe(
            self._seen, found.record if found else None, now=self.clock()
        )

    async def _claim(self, verdict: leadership.Verdict) -> bool:
        previous = self._lease.record if self._lease else None
        record = leadership.claimed(previous, me=self.identity, wall=_wall(), timing=self.timing)
        started = self.clock()
        try:
            async with asyncio.timeout(self.timing.renew_deadline):
                if verdict is leadership.Verdict.CREATE or self._lease is None:
                    self._lease = await self.store.create(record)
                else:
                    self._lease = await self.store.replace(self._lease, record)
        except lease.Conflict as exc:
            log.info("another candidate was faster: %s", exc)
            return False
        self.renewed_at = started
        self._seen = leadership.Seen(record=self._lease.record, since=started)
        return True

    async def campaign(self) -> None:
        """Wait (standby) until this candidate holds the Lease."""
        waiting_for: str | None = None
        while True:
            try:
                await self._read()
                verdict = leadership.decide(
                    me=self.identity,
                    seen=self._seen,
                    now=self.clock(),
                    renewed_at=None,
                    timing=self.timing,
                )
                if verdict is leadership.Verdict.WAIT:
                    holder = self._seen.record.holder if self._seen else None
                    if holder != waiting_for:
                        log.info("standing by: %s holds the lease", holder)
                        waiting_for = holder
                elif await self._claim(verdict):
                    assert self._lease is not None
                    log.info(
                        "leading as %s (lease %s/%s, term %d)",
                        self.identity,
                        self.store.namespace,
                        self.store.name,
                        self._lease.record.transitions,
                    )
                    return
            except (lease.LeaseError, TimeoutError) as exc:
                log.warning("cannot read or take the lease: %s", exc or "timed out")
            await asyncio.sleep(self.timing.retry_period)

    async def _renew(self) -> leadership.Verdict:
        """One renew; STEP_DOWN when the lease is lost, RENEW when renewed or worth retrying."""
        assert self._lease is not None
        assert self.renewed_at is not None
        started = self.clock()
        if leadership.must_stop(self.renewed_at, now=started, timing=self.timing):
            return leadership.Verdict.STEP_DOWN
        left = self.renewed_at + self.timing.renew_deadline - started
        try:
            async with asyncio.timeout(left):
                self._lease = await self.store.replace(
                    self._lease, leadership.renewed(self._lease.record, wall=_wall())
                )
            self.renewed_at = started
            log.debug("renewed in %.3fs", self.clock() - started)
            return leadership.Verdict.RENEW
        except lease.Conflict:
            with contextlib.suppress(lease.LeaseError, TimeoutError):
                await self._read()
                return leadership.decide(
                    me=self.identity,
                    seen=self._seen,
                    now=self.clock(),
                    renewed_at=self.renewed_at,
                    timing=self.timing,
                )
        except (lease.LeaseError, TimeoutError) as exc:
            log.warning(
                "renew failed (%.1fs left before stepping down): %s", left, exc or "timed out"
            )
        return leadership.Verdict.RENEW

    async def hold(self) -> None:
        """Renew every retry period; return when leadership is lost (the caller must fence)."""
        while True:
            if await self._renew() is leadership.Verdict.STEP_DOWN:
                self.renewed_at = None
                return
            await asyncio.sleep(self.timing.retry_period)

    async def release(self) -> bool:
        """Hand the Lease over (only if it is still ours): call after this replica stopped
        acting. False when it could not be written (the lease then simply expires).

        A renew cancelled in flight may still have landed on the API server, leaving us with a
        stale resourceVersion: on a conflict the Lease is read again and, while it still names
        us as holder, the release is written over the fresh copy."""
        current = self._lease
        self.renewed_at = None
        try:
            async with asyncio.timeout(self.timing.renew_deadline):
                for _ in range(RELEASE_ATTEMPTS):
                    if current is None or current.record.holder != self.identity:
                        return False
                    try:
                        self._lease = await self.store.replace(
                            current, leadership.released(current.record, wall=_wall())
                        )
                    except lease.Conflict:
                        current = self._lease = await self.store.read()
                        continue
                    log.info("released the lease")
                    return True
                raise lease.Conflict("the Lease kept changing while it was being released")
        except (lease.LeaseError, TimeoutError) as exc:
            log.warning("could not release the lease (it expires by itself): %s", exc)
            return False


class _Alone:
    """No election in this process (`--standalone`, or code run outside `election`): it acts."""

    def leading(self) -> bool:
        return True


ALONE = _Alone()
# who `may_act` asks: the elector of this process while it leads, None while it stands by or
# has stopped, ALONE until an election starts in this process
_acting: Elector | _Alone | None = ALONE


def lead_with(elector: Elector | _Alone | None) -> None:
    """Make `elector` the one `may_act` asks (None: this process stands by or has stopped)."""
    global _acting
    _acting = elector


def may_act() -> bool:
    """The check before an action with effects outside this process (an agent's PUT, DELETE or
    prefetch: `adapters.agent`): True while this process leads with a fresh lease (or runs
    without election). A process that was frozen (SIGSTOP, a VM pause) past its renew deadline
    gets False here even before the watchdog fences it."""
    found = _acting
    return found is not None and found.leading()


def fence(reason: str) -> NoReturn:
    """Stop acting at once: exit the process without running anything else (no handler, no
    cleanup that could still talk to agents). Safe from any thread."""
    with contextlib.suppress(OSError):
        os.write(2, f"mlxfleet-operator: lost leadership ({reason}); exiting now\n".encode())
    os._exit(EXIT_LOST_LEASE)


class Watchdog:
    """A thread that calls `expire` once the elector's renew deadline passes without a renew,
    whatever the event loop is doing."""

    def __init__(
        self,
        elector: Elector,
        *,
        expire: Callable[[], object] = lambda: fence("renew deadline passed"),
    ) -> None:
        self._elector = elector
        self._expire = expire
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            deadline = self._elector.deadline()
            if deadline is None:
                self._expire()
                return
            left = deadline - self._elector.clock()
            if left <= 0:
                self._expire()
                return
            self._stop.wait(left)
