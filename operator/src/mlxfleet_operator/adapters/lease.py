"""One `coordination.k8s.io/v1` Lease on the API server: read, create, replace with a
resourceVersion precondition (optimistic concurrency). The leader elector's only I/O.

It talks to the API server with its own async httpx client (credentials from the kubeconfig or the
in-cluster ServiceAccount, loaded by the `kubernetes` package) rather than the operator's
synchronous client in worker threads, so that every call has a hard timeout, is cancelled with
its task, and never waits for a thread pool that the rest of the operator may have filled.
May import: httpx, kubernetes (configuration loading only), pydantic, `core.kit.leadership`, the
standard library. Called by: `adapters.leader`.
"""

from __future__ import annotations

import copy
import ssl
from collections.abc import Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlxfleet_operator.core.kit import leadership

API = "/apis/coordination.k8s.io/v1"


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
    own timeout (`connect`) is only a backstop."""

    def __init__(
        self, http: httpx.AsyncClient, *, namespace: str, name: str, default_duration: int
    ) -> None:
        self._http = http
        self.namespace = namespace
        self.name = name
        self._default_duration = default_duration

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def _collection(self) -> str:
        return f"{API}/namespaces/{self.namespace}/leases"

    async def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return await self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise LeaseError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc

    def _check(self, response: httpx.Response, what: str) -> Lease:
        if response.status_code == 409:
            raise Conflict(f"{what}: conflict (someone else wrote the Lease first)")
        if response.status_code >= 300:
            raise LeaseError(f"{what}: HTTP {response.status_code}: {response.text[:300]}")
        return _lease(response.json(), default_duration=self._default_duration)

    async def read(self) -> Lease | None:
        """The Lease, or None when there is none."""
        response = await self._send("GET", f"{self._collection}/{self.name}")
        if response.status_code == 404:
            return None
        return self._check(response, f"read Lease {self.namespace}/{self.name}")

    async def create(self, record: leadership.Record) -> Lease:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": _spec(record),
        }
        response = await self._send("POST", self._collection, json=body)
        return self._check(response, f"create Lease {self.namespace}/{self.name}")

    async def replace(self, lease: Lease, record: leadership.Record) -> Lease:
        """Write `record` over `lease`, only if nobody wrote it since (its resourceVersion)."""
        body = copy.deepcopy(lease.body)
        metadata = body.setdefault("metadata", {})
        metadata.pop("managedFields", None)
        metadata["resourceVersion"] = lease.version
        body["spec"] = {**(body.get("spec") or {}), **_spec(record)}
        response = await self._send("PUT", f"{self._collection}/{self.name}", json=body)
        if response.status_code == 404:
            raise Conflict(f"replace Lease {self.namespace}/{self.name}: it was deleted")
        return self._check(response, f"replace Lease {self.namespace}/{self.name}")


class _Bearer(httpx.Auth):
    """The kubeconfig's (or ServiceAccount's) bearer token, asked for on every request so that
    the `kubernetes` package's refresh hook (rotated ServiceAccount tokens) keeps working."""

    def __init__(self, config: Any) -> None:
        self._config = config

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = self._config.get_api_key_with_prefix("BearerToken")
        if token:
            request.headers["Authorization"] = token
        yield request


def connect(kubeconfig: str | None) -> httpx.AsyncClient:
    """An async client for the API server of `kubeconfig` (None: in-cluster ServiceAccount)."""
    # Imported here: `kubernetes.config` reads $KUBECONFIG when first imported, and `main` sets
    # it (for kopf's own login) after this module is imported.
    import kubernetes

    config = kubernetes.client.Configuration()
    try:
        if kubeconfig:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=config, persist_config=False
            )
        else:
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=config
            )
    except kubernetes.config.ConfigException as exc:
        raise LeaseError(f"cannot load API server credentials: {exc}") from exc
    verify: ssl.SSLContext | bool = bool(config.verify_ssl)
    if config.verify_ssl:
        context = ssl.create_default_context(cafile=config.ssl_ca_cert or None)
        if config.cert_file:
            context.load_cert_chain(config.cert_file, config.key_file)
        verify = context
    return httpx.AsyncClient(
        base_url=str(config.host),
        auth=_Bearer(config),
        verify=verify,
        headers={"Accept": "application/json", "User-Agent": "mlxfleet-operator/leader-election"},
        limits=httpx.Limits(max_connections=4),
        timeout=httpx.Timeout(10.0, connect=3.0),
        trust_env=False,
    )
