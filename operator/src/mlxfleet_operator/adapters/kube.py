"""The operator's Kubernetes client: the calls it makes and their errors, Secrets, custom objects.

Every call goes through the operator's one asynchronous client (`kubeapi.Client`, one connection
pool shared by all handlers), JSON in and out. Objects the operator owns are written with
server-side apply (field manager `mlxfleet-operator`), so a repeated call is a no-op and nobody
else's fields are touched; `read`, `select`, `create`, `apply` and `delete` take the `Kind` of the
object (where it lives); `read` answers None for a missing object, `delete` lets one already gone
be, any other failure (the connection's too) is a `KubeError`. Which objects are owned, and what
they hold, is decided in `ownership` and `publishing`; status is written through kopf's patch
(`statuspatch`), not here.
May import: the standard library, `kubeapi`, `api`, `core.modelroute.status` (the value it answers).
Called by: `runtime` (builds it), `fleet` (agent credentials), `publishing` (the Service and
EndpointSlices), handlers (SwapPlans and ModelDeployments, through `runtime.Runtime.kube`; the
ModelRoute handler's look at provider-key Secrets, asked for as a table row, so their data never
reaches the operator).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from mlxfleet_operator.adapters import kubeapi
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.api import resources
from mlxfleet_operator.core.modelroute import status as routestatus

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
"""A GET answered as a server-side table row: columns (a Secret's type among them) and the
object's metadata only, never a Secret's data."""

FIELD_MANAGER = "mlxfleet-operator"
APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
JsonDict = dict[str, Any]


@dataclass(frozen=True)
class AgentSecret:
    """One key of an agent-credentials Secret, and when the Secret says it expires."""

    value: str
    expires_at: datetime | None = None


def _instant(text: str | None) -> datetime | None:
    """An RFC 3339 time with a zone (`2027-01-31T00:00:00Z`); None for anything else."""
    if not text:
        return None
    try:
        found = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo is not None else None


class KubeError(Exception):
    """A Kubernetes call that failed for a reason other than not-found / already-exists."""


class AlreadyExists(KubeError):
    """A create (POST) found an object with that name already there (409)."""


class SecretMissing(KubeError):
    """The referenced Secret or key does not exist (or the operator may not read it)."""


class SecretNotAllowed(KubeError):
    """The referenced Secret is not labelled as agent credentials: the operator will not use it."""


@dataclass(frozen=True)
class Kind:
    """One kind of object the operator reads or owns: where its objects live on the API server."""

    name: str
    api: str  # "/api/v1", "/apis/discovery.k8s.io/v1"
    plural: str

    def collection(self, namespace: str) -> str:
        return f"{self.api}/namespaces/{quote(namespace)}/{self.plural}"

    def path(self, name: str, namespace: str) -> str:
        return f"{self.collection(namespace)}/{quote(name)}"


SECRETS = Kind("Secret", "/api/v1", "secrets")
SERVICES = Kind("Service", "/api/v1", "services")
SLICES = Kind("EndpointSlice", "/apis/discovery.k8s.io/v1", "endpointslices")


def _custom(resource: resources.Resource, namespace: str, name: str | None = None) -> str:
    """The path of our kind `resource` in `namespace` (its collection when `name` is None)."""
    where = f"/apis/{resources.GROUP}/{resources.VERSION}/namespaces/{quote(namespace)}"
    where += f"/{resource.plural}"
    return where if name is None else f"{where}/{quote(name)}"


class Kube:
    """The operator's Kubernetes calls, on the one shared client (one instance per operator)."""

    def __init__(self, client: kubeapi.Client) -> None:
        self.client = client

    async def aclose(self) -> None:
        await self.client.aclose()

    # ------------------------------------------------------------------------------ secrets

    async def agent_credential(self, *, namespace: str, name: str, key: str) -> AgentSecret:
        """One key of a Secret labelled as agent credentials (`AGENT_CREDENTIALS_LABEL=true`),
        with the expiry its `EXPIRES_AT_ANNOTATION` declares (None: none, or not a time).

        Whoever writes an InferenceNode chooses both the Secret and the URL it is sent to, so an
        unlabelled Secret is refused before its data is looked at: only Secrets an admin marked
        for agents can leave the cluster (docs/operator.md, "Trust model")."""
        try:
            secret = await self.client.call("GET", SECRETS.path(name, namespace))
        except kubeapi.ApiError as exc:
            if exc.status in (403, 404):
                raise SecretMissing(f"Secret {namespace}/{name}: {exc.reason}") from exc
            raise KubeError(f"read Secret {namespace}/{name}: {exc.status} {exc.reason}") from exc
        label = resources.AGENT_CREDENTIALS_LABEL
        metadata = secret.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if labels.get(label) != "true":
            raise SecretNotAllowed(
                f"Secret {namespace}/{name} is not labelled {label}=true: the operator uses only "
                f"Secrets labelled as agent credentials (kubectl label secret -n {namespace} "
                f"{name} {label}=true, if it holds this agent's credentials)"
            )
        data = secret.get("data") or {}
        if key not in data:
            raise SecretMissing(f"Secret {namespace}/{name} has no key {key!r}")
        notes = metadata.get("annotations") or {}
        return AgentSecret(
            base64.b64decode(data[key]).decode().strip(),
            expires_at=_instant(notes.get(resources.EXPIRES_AT_ANNOTATION)),
        )

    async def provider_key_seen(self, *, namespace: str, name: str) -> routestatus.KeySeen | None:
        """A provider-key Secret's type and annotations, never its data (a table row: the
        operator checks that a route's key exists and allows its namespace without holding
        the key); None when it does not exist, `error` set when it cannot be looked at."""
        where = f"get Secret {namespace}/{name}"
        try:
            table = await self.client.call("GET", SECRETS.path(name, namespace), accept=TABLE)
        except kubeapi.ApiError as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:  # resourceNames: only the provider keys the admin listed
                return routestatus.KeySeen(
                    error=f"{where}: 403 Forbidden (the operator may look only at the "
                    "provider-key Secrets listed in chart value operator.providerKeySecrets)"
                )
            return routestatus.KeySeen(error=f"{where}: {exc.status} {exc.reason}")
        try:
            return _table_row(table)
        except (ValueError, TypeError, AttributeError, IndexError) as exc:
            return routestatus.KeySeen(error=f"{where}: unexpected answer ({exc})")

    # ------------------------------------------------------------------------- custom objects

    async def get_swap_plan(self, namespace: str, name: str) -> JsonDict | None:
        return await self._get_custom(resources.SWAP_PLAN, namespace, name)

    async def get_deployment(self, namespace: str, name: str) -> JsonDict | None:
        return await self._get_custom(resources.MODEL_DEPLOYMENT, namespace, name)

    async def _get_custom(
        self, resource: resources.Resource, namespace: str, name: str
    ) -> JsonDict | None:
        """One namespaced object of our kinds, or None when it does not exist."""
        try:
            return await self.client.call("GET", _custom(resource, namespace, name))
        except kubeapi.ApiError as exc:
            if exc.status == 404:
                return None
            raise KubeError(
                f"get {resource.kind} {namespace}/{name}: {exc.status} {exc.reason}"
            ) from exc

    async def annotate_deployment(
        self, namespace: str, name: str, annotations: Mapping[str, str]
    ) -> None:
        """Set annotations on a ModelDeployment (a merge patch of its metadata only: the one
        write the operator makes to an object people own, besides kopf's own annotations and
        finalizer); a deployment gone meanwhile is fine."""
        body = {"metadata": {"annotations": dict(annotations)}}
        path = _custom(resources.MODEL_DEPLOYMENT, namespace, name)
        try:
            await self.client.call("PATCH", path, body=body, content_type=MERGE_PATCH)
        except kubeapi.ApiError as exc:
            if exc.status != 404:
                raise KubeError(
                    f"annotate ModelDeployment {namespace}/{name}: {exc.status} {exc.reason}"
                ) from exc

    async def create_swap_plan(self, namespace: str, body: JsonDict) -> bool:
        """Create; False when it already exists (the name is deterministic, 409 = done before)."""
        try:
            await self.client.call("POST", _custom(resources.SWAP_PLAN, namespace), body=body)
        except kubeapi.ApiError as exc:
            if exc.status == 409:
                return False
            raise KubeError(f"create SwapPlan {namespace}: {exc.status} {exc.body}") from exc
        return True

    # ------------------------------------------------------------ objects the operator owns

    @property
    def services(self) -> Kind:
        return SERVICES

    @property
    def slices(self) -> Kind:
        return SLICES

    async def read(self, kind: Kind, name: str, namespace: str) -> JsonDict | None:
        try:
            return await self.client.call("GET", kind.path(name, namespace))
        except kubeapi.ApiError as exc:
            if exc.status == 404:
                return None
            raise KubeError(
                f"get {kind.name} {namespace}/{name}: {exc.status} {exc.reason}"
            ) from exc

    async def select(self, kind: Kind, namespace: str, *, labels: str) -> list[JsonDict]:
        """The objects of `kind` in `namespace` that the label selector `labels` matches."""
        try:
            found = await self.client.call(
                "GET", kind.collection(namespace), query=[("labelSelector", labels)]
            )
        except kubeapi.ApiError as exc:
            raise KubeError(
                f"list {kind.name} {namespace} ({labels}): {exc.status} {exc.reason}"
            ) from exc
        return list(found.get("items") or [])

    async def create(self, kind: Kind, namespace: str, body: JsonDict) -> JsonDict:
        """Create `body` (POST: fails if the name is taken, `AlreadyExists`); the object as
        created."""
        try:
            return await self.client.call(
                "POST",
                kind.collection(namespace),
                query=[("fieldManager", FIELD_MANAGER)],
                body=body,
            )
        except kubeapi.ApiError as exc:  # 409: made meanwhile (`AlreadyExists`)
            error = AlreadyExists if exc.status == 409 else KubeError
            raise error(
                f"create {kind.name} {namespace}/{body['metadata']['name']}: "
                f"{exc.status} {exc.reason}"
            ) from exc

    async def apply(self, kind: Kind, name: str, namespace: str, body: JsonDict) -> None:
        """Server-side apply `body` (a `metadata.uid` in it is a precondition)."""
        try:
            await self.client.call(
                "PATCH",
                kind.path(name, namespace),
                query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
                body=body,
                content_type=APPLY,
            )
        except kubeapi.ApiError as exc:
            raise KubeError(
                f"apply {body['kind']} {namespace}/{name}: {exc.status} {exc.body}"
            ) from exc

    async def replace_owners(
        self, kind: Kind, found: Mapping[str, Any], owners: list[JsonDict]
    ) -> None:
        """Set the ownerReferences of exactly the object that was read (uid test) to `owners`.

        Server-side apply merges ownerReferences by uid and cannot drop one it did not set (a
        POST sets them), so taking a predecessor's object over replaces them first."""
        meta = found["metadata"]
        ops = [
            {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
            {"op": "replace", "path": "/metadata/ownerReferences", "value": owners},
        ]
        path = kind.path(meta["name"], meta["namespace"])
        try:
            await self.client.call("PATCH", path, body=ops, content_type=JSON_PATCH)
        except kubeapi.ApiError as exc:
            raise KubeError(
                f"take over {kind.name} {meta['namespace']}/{meta['name']}: "
                f"{exc.status} {exc.reason}"
            ) from exc

    async def delete(self, kind: Kind, found: Mapping[str, Any]) -> None:
        """Delete exactly the object that was read (uid precondition); gone already is fine."""
        meta = found["metadata"]
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": meta["uid"]},
        }
        path = kind.path(meta["name"], meta["namespace"])
        try:
            await self.client.call("DELETE", path, body=options)
        except kubeapi.ApiError as exc:
            if exc.status not in (404, 409):  # 409: replaced by another object since: not ours
                raise KubeError(
                    f"delete {kind.name} {meta['namespace']}/{meta['name']}: "
                    f"{exc.status} {exc.reason}"
                ) from exc


def _table_row(table: JsonDict) -> routestatus.KeySeen:
    """The type (its column) and the allowed-namespaces and allowed-urls annotations (the row's
    metadata) of a one-row Secret table. Only those annotations are kept: a client-side
    `kubectl apply` copies the whole Secret, key included, into last-applied-configuration."""
    columns = [str(c.get("name", "")).lower() for c in table.get("columnDefinitions") or []]
    row = (table.get("rows") or [])[0]
    cells = row.get("cells") or []
    kind = str(cells[columns.index("type")]) if "type" in columns else ""
    meta = (row.get("object") or {}).get("metadata") or {}
    wanted = (mroute.PROVIDER_KEY_NAMESPACES, mroute.PROVIDER_KEY_URLS)
    annotations = {k: str(v) for k, v in (meta.get("annotations") or {}).items() if k in wanted}
    return routestatus.KeySeen(type=kind, annotations=annotations)
