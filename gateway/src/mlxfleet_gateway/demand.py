"""This gateway replica's ModelDemand: the requests its activator holds, told to the operator.

`Writer.publish(entries)` is called on the loop whenever the held requests change; one task
writes the latest of them: a server-side apply of the whole object (field manager
`mlxfleet-gateway`; it creates the object the first time) when a deployment starts or stops
being waited for, at once; a change of counts only at most every `COUNTS_EVERY_S`; a renewal
every `modeldemand.RENEW_S` while anything is held (the operator ignores an object older than
`STALE_S`); a delete when nothing is held any more, and at shutdown. A failed write is logged and
tried again (backoff 0.2 s to 5 s); requests keep waiting meanwhile (the operator also wakes a
deployment at its next timer tick only if it has seen the demand, so a write that never lands
ends in the activator's deadline). The identity is the gateway's own ServiceAccount: it may
get, create, patch and delete ModelDemands in its namespace, nothing else it writes.
May import: kubernetes, the standard library, core.coldstart, mlxfleet_operator.api.
Called by: server (builds it, hands `publish` to the activator, closes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime

import kubernetes
from kubernetes.client.exceptions import ApiException

from mlxfleet_gateway.core import coldstart
from mlxfleet_operator.api import modeldemand, resources

log = logging.getLogger("mlxfleet_gateway.demand")
FIELD_MANAGER = "mlxfleet-gateway"
APPLY = "application/apply-patch+yaml"
COUNTS_EVERY_S = 1.0


class Writer:
    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        *,
        namespace: str,
        gateway: str,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.namespace = namespace
        self.gateway = gateway
        self.name = coldstart.object_name(gateway)
        self.wall = wall
        self.writes = 0
        self._entries: list[coldstart.Entry] = []
        self._written: frozenset[coldstart.Key] | None = None  # keys of the object as written
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def publish(self, entries: list[coldstart.Entry]) -> None:
        self._entries = entries
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="model-demand")

    async def aclose(self) -> None:
        """Stop writing and delete the object (nothing is held once the gateway has drained)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._written is not None:
            with contextlib.suppress(ApiException, OSError):
                await asyncio.to_thread(self._delete)

    async def _run(self) -> None:
        backoff = 0.2
        loop = asyncio.get_running_loop()
        last = -COUNTS_EVERY_S
        while True:
            held = bool(self._written)
            renew = modeldemand.RENEW_S if held else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), renew)
            self._wake.clear()
            keys = frozenset((e.namespace, e.name) for e in self._entries)
            if keys == self._written and keys and loop.time() - last < COUNTS_EVERY_S:
                await asyncio.sleep(COUNTS_EVERY_S - (loop.time() - last))  # counts only
            try:
                await self._write()
                backoff = 0.2
                last = loop.time()
            except (ApiException, OSError) as exc:
                reason = exc.reason if isinstance(exc, ApiException) else str(exc)
                log.warning("ModelDemand %s/%s not written: %s", self.namespace, self.name, reason)
                await asyncio.sleep(backoff)
                backoff = min(5.0, backoff * 2)
                self._wake.set()

    async def _write(self) -> None:
        entries = self._entries
        body = coldstart.demand(
            entries, gateway=self.gateway, namespace=self.namespace, now=self.wall()
        )
        if body is None:
            if self._written is not None:
                await asyncio.to_thread(self._delete)
                self._written = None
            return
        await asyncio.to_thread(self._apply, body)
        keys = frozenset((e.namespace, e.name) for e in entries)
        if keys != self._written:
            names = sorted(f"{ns}/{name}" for ns, name in keys)
            log.info("ModelDemand written", extra={"deployments": names})
        self._written = keys

    def _apply(self, body: dict[str, object]) -> None:
        self.custom.patch_namespaced_custom_object(
            resources.GROUP,
            resources.VERSION,
            self.namespace,
            resources.MODEL_DEMAND.plural,
            self.name,
            body,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=APPLY,
            _request_timeout=10,
        )
        self.writes += 1

    def _delete(self) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                resources.GROUP,
                resources.VERSION,
                self.namespace,
                resources.MODEL_DEMAND.plural,
                self.name,
                _request_timeout=10,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
        self.writes += 1
