"""One `coordination.k8s.io/v1` Lease on the API server: read, create, replace with a
resourceVersion precondition (optimistic concurrency). The leader elector's only I/O.

It talks to the API server with the operator's Kubernetes client (`kubeapi.Client`, on the
elector's own event loop: a pool of its own), so that every call has a hard timeout
(`TIMEOUT`, a backstop: callers bound each call themselves), is cancelled with its task, and
never waits for kopf's event loop or a thread pool that the rest of the operator may have filled.
May import: aiohttp (the timeout), pydantic, `kubeapi`, `core.kit.leadership`, the standard
library. Called by: `adapters.leader`, `adapters.election`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlxfleet_operator.adapters import kubeapi
from mlxfleet_operator.core.kit import leadership

API = "/apis/coordination.k8s.io/v1"
TIMEOUT = aiohttp.ClientTimeout(total=10.0, connect=3.0)


class LeaseError(Exception):
    """The API server did not answer as expected (unreachable, timeout, 5xx, forbidden...)."""


class Conflict(LeaseError):
    """Someone else wrote the Lease first (409, or it vanished under us): read it again."""


class _Spec(BaseModel):
    """The Lease spec fields the election uses (the API server validates their types)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    holder_identity: str | None = Field(default=None, alias="holderIdentity")
    lease_duration_seconds: int | None = Field(default=None, alias="leaseDurationSeconds")
    acquire_time: datetime | None = Field(default=None, alias="acquireTime")
    renew_time: datetime | None = Field(default=None, alias="renewTime")
    lease_transitions: int | None = Field(default=None, alias="leaseTransitions")


@dataclass(frozen=True)
class Lease:
    """A Lease as last read or written: its record, resourceVersion and whole body (a replace
    keeps whatever else is on it, such as labels)."""

    record: leadership.Record
    version: str
    body: dict[str, Any]


def _micro_time(value: datetime | None) -> str | None:
    """Kubernetes MicroTime: RFC 3339 in UTC with microseconds."""
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease(body: dict[str, Any], *, default_duration: int) -> Lease:
    try:
        spec = _Spec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        raise LeaseError(f"unexpected Lease spec: {exc}") from exc
    record = leadership.Record(
        holder=spec.holder_identity or None,
        lease_duration=spec.lease_duration_seconds or default_duration,
        acquire_time=spec.acquire_time,
        renew_time=spec.renew_time,
        transitions=spec.lease_transitions or 0,
    )
    version = str((body.get("metadata") or {}).get("resourceVersion") or "")
    return Lease(record=record, version=version, body=body)


def _spec(record: leadership.Record) -> dict[str, Any]:
    return {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.lease_duration,
        "acquireTime": _micro_time(record.acquire_time),
        "renewTime": _micro_time(record.renew_time),
        "leaseTransitions": record.transitions,
    }


class LeaseStore:
    """The Lease `name` in `namespace`. Callers bound each call (`asyncio.timeout`); the client's
    own timeout (`TIMEOUT`) is only a backstop. `aclose` closes the client."""

    def __init__(
        self, client: kubeapi.Client, *, namespace: str, name: str, default_duration: int
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.name = name
        self._default_duration = default_duration

    async def aclose(self) -> None:
        await self._client.aclose()

    @property
    def _collection(self) -> str:
        return f"{API}/namespaces/{self.namespace}/leases"

    async def _send(self, method: str, path: str, what: str, body: object = None) -> Lease | None:
        """The Lease the API server answered; None for 404; `Conflict` for 409; `LeaseError`
        for anything else that is not 2xx, and when no answer came."""
        try:
            found = await self._client.call(method, path, body=body, budget=TIMEOUT)
        except kubeapi.ApiError as exc:
            if exc.status == 404:
                return None
            if exc.status == 409:
                raise Conflict(f"{what}: conflict (someone else wrote the Lease first)") from exc
            if exc.status == 0:
                raise LeaseError(f"{method} {path}: {exc.reason}") from exc
            raise LeaseError(f"{what}: HTTP {exc.status}: {exc.body[:300]}") from exc
        return _lease(found, default_duration=self._default_duration)

    async def read(self) -> Lease | None:
        """The Lease, or None when there is none."""
        where = f"read Lease {self.namespace}/{self.name}"
        return await self._send("GET", f"{self._collection}/{self.name}", where)

    async def create(self, record: leadership.Record) -> Lease:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": _spec(record),
        }
        where = f"create Lease {self.namespace}/{self.name}"
        made = await self._send("POST", self._collection, where, body)
        if made is None:  # the namespace is missing
            raise LeaseError(f"{where}: HTTP 404 (does namespace {self.namespace} exist?)")
        return made

    async def replace(self, lease: Lease, record: leadership.Record) -> Lease:
        """Write `record` over `lease`, only if nobody wrote it since (its resourceVersion)."""
        body = copy.deepcopy(lease.body)
        metadata = body.setdefault("metadata", {})
        metadata.pop("managedFields", None)
        metadata["resourceVersion"] = lease.version
        body["spec"] = {**(body.get("spec") or {}), **_spec(record)}
        where = f"replace Lease {self.namespace}/{self.name}"
        written = await self._send("PUT", f"{self._collection}/{self.name}", where, body)
        if written is None:
            raise Conflict(f"{where}: it was deleted")
        return written


async def connect(kubeconfig: str | None) -> kubeapi.Client:
    """A client for the API server of `kubeconfig` (None: in-cluster ServiceAccount), its pool
    opened on the loop that first uses it."""
    try:
        return await kubeapi.connect(kubeconfig, user_agent="mlxfleet-operator/leader-election")
    except kubeapi.ConfigError as exc:
        raise LeaseError(f"cannot load API server credentials: {exc}") from exc
