"""The operator's Kubernetes client: the calls it makes and their errors, Secrets, custom objects.

The `kubernetes` client is synchronous, so every call goes through `asyncio.to_thread`: the kopf
event loop never blocks. Objects the operator owns are written with server-side apply (field
manager `mlxfleet-operator`), so a repeated call is a no-op and nobody else's fields are touched;
`read`, `create`, `apply` and `delete` take the `Kind` of the object (its client calls); `read`
answers None for a missing object, `delete` lets one already gone be, any other failure is a
`KubeError`. Which objects are owned, and what they hold, is decided in `ownership` and
`publishing`; status is written through kopf's patch (`statuspatch`), not here.
May import: kubernetes, the standard library, `api`, `core.modelroute` (the value it answers).
Called by: `runtime` (builds it), `fleet` (agent credentials), `publishing` (the Service and
EndpointSlices), handlers (SwapPlans and ModelDeployments, through `runtime.Runtime.kube`; the
ModelRoute handler's look at provider-key Secrets, asked for as a table row, so their data never
reaches the operator).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import kubernetes
from kubernetes.client.exceptions import ApiException

from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.api import resources
from mlxfleet_operator.core import modelroute

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
    """The client calls for one kind of object the operator owns."""

    name: str
    read: Any
    create: Any
    patch: Any
    delete: Any


def client_from(kubeconfig: str | None) -> kubernetes.client.ApiClient:
    """API client from a kubeconfig file, else the in-cluster ServiceAccount."""
    if kubeconfig:
        client = kubernetes.config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        return cast(kubernetes.client.ApiClient, client)
    kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    return kubernetes.client.ApiClient()


class Kube:
    """Thin async facade over the synchronous client (one instance per operator)."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.api = api
        self.core = kubernetes.client.CoreV1Api(api)
        self.discovery = kubernetes.client.DiscoveryV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    def plain(self, obj: object) -> JsonDict:
        """A client model as the JSON the API server sent (camelCase keys)."""
        return cast(JsonDict, self.api.sanitize_for_serialization(obj))  # type: ignore[no-untyped-call]

    # ------------------------------------------------------------------------------ secrets

    async def agent_credential(self, *, namespace: str, name: str, key: str) -> AgentSecret:
        """One key of a Secret labelled as agent credentials (`AGENT_CREDENTIALS_LABEL=true`),
        with the expiry its `EXPIRES_AT_ANNOTATION` declares (None: none, or not a time).

        Whoever writes an InferenceNode chooses both the Secret and the URL it is sent to, so an
        unlabelled Secret is refused before its data is looked at: only Secrets an admin marked
        for agents can leave the cluster (docs/operator.md, "Trust model")."""
        try:
            secret = await asyncio.to_thread(self.core.read_namespaced_secret, name, namespace)
        except ApiException as exc:
            if exc.status in (403, 404):
                raise SecretMissing(f"Secret {namespace}/{name}: {exc.reason}") from exc
            raise KubeError(f"read Secret {namespace}/{name}: {exc.status} {exc.reason}") from exc
        label = resources.AGENT_CREDENTIALS_LABEL
        labels = (secret.metadata.labels if secret.metadata is not None else None) or {}
        if labels.get(label) != "true":
            raise SecretNotAllowed(
                f"Secret {namespace}/{name} is not labelled {label}=true: the operator uses only "
                f"Secrets labelled as agent credentials (kubectl label secret -n {namespace} "
                f"{name} {label}=true, if it holds this agent's credentials)"
            )
        data = secret.data or {}
        if key not in data:
            raise SecretMissing(f"Secret {namespace}/{name} has no key {key!r}")
        notes = (secret.metadata.annotations if secret.metadata is not None else None) or {}
        return AgentSecret(
            base64.b64decode(data[key]).decode().strip(),
            expires_at=_instant(notes.get(resources.EXPIRES_AT_ANNOTATION)),
        )

    async def provider_key_seen(self, *, namespace: str, name: str) -> modelroute.KeySeen | None:
        """A provider-key Secret's type and annotations, never its data (a table row: the
        operator checks that a route's key exists and allows its namespace without holding
        the key); None when it does not exist, `error` set when it cannot be looked at."""
        where = f"get Secret {namespace}/{name}"
        try:
            answer = await asyncio.to_thread(
                self.core.read_namespaced_secret,
                name,
                namespace,
                _preload_content=False,  # the raw table, not a V1Secret
                _headers={"Accept": TABLE},
            )
            body: bytes = cast(Any, answer).data  # the raw response, not the V1Secret typed
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:  # resourceNames: only the provider keys the admin listed
                return modelroute.KeySeen(
                    error=f"{where}: 403 Forbidden (the operator may look only at the "
                    "provider-key Secrets listed in chart value operator.providerKeySecrets)"
                )
            return modelroute.KeySeen(error=f"{where}: {exc.status} {exc.reason}")
        except OSError as exc:
            return modelroute.KeySeen(error=f"{where}: {exc}")
        try:
            return _table_row(json.loads(body))
        except (ValueError, TypeError, AttributeError, IndexError) as exc:
            return modelroute.KeySeen(error=f"{where}: unexpected answer ({exc})")

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
            found = await asyncio.to_thread(
                self.custom.get_namespaced_custom_object,
                resources.GROUP,
                resources.VERSION,
                namespace,
                resource.plural,
                name,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise KubeError(
                f"get {resource.kind} {namespace}/{name}: {exc.status} {exc.reason}"
            ) from exc
        return cast(JsonDict, found)

    async def annotate_deployment(
        self, namespace: str, name: str, annotations: Mapping[str, str]
    ) -> None:
        """Set annotations on a ModelDeployment (a merge patch of its metadata only: the one
        write the operator makes to an object people own, besides kopf's own annotations and
        finalizer); a deployment gone meanwhile is fine."""
        body = {"metadata": {"annotations": dict(annotations)}}
        try:
            await asyncio.to_thread(
                self.custom.patch_namespaced_custom_object,
                resources.GROUP,
                resources.VERSION,
                namespace,
                resources.MODEL_DEPLOYMENT.plural,
                name,
                body,
                _content_type=MERGE_PATCH,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise KubeError(
                    f"annotate ModelDeployment {namespace}/{name}: {exc.status} {exc.reason}"
                ) from exc

    async def create_swap_plan(self, namespace: str, body: JsonDict) -> bool:
        """Create; False when it already exists (the name is deterministic, 409 = done before)."""
        try:
            await asyncio.to_thread(
                self.custom.create_namespaced_custom_object,
                resources.GROUP,
                resources.VERSION,
                namespace,
                resources.SWAP_PLAN.plural,
                body,
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise KubeError(f"create SwapPlan {namespace}: {exc.status} {exc.body}") from exc
        return True

    # ------------------------------------------------------------ objects the operator owns

    @property
    def services(self) -> Kind:
        return Kind(
            "Service",
            self.core.read_namespaced_service,
            self.core.create_namespaced_service,
            self.core.patch_namespaced_service,
            self.core.delete_namespaced_service,
        )

    @property
    def slices(self) -> Kind:
        return Kind(
            "EndpointSlice",
            self.discovery.read_namespaced_endpoint_slice,
            self.discovery.create_namespaced_endpoint_slice,
            self.discovery.patch_namespaced_endpoint_slice,
            self.discovery.delete_namespaced_endpoint_slice,
        )

    async def read(self, kind: Kind, name: str, namespace: str) -> JsonDict | None:
        try:
            found = await asyncio.to_thread(kind.read, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise KubeError(
                f"get {kind.name} {namespace}/{name}: {exc.status} {exc.reason}"
            ) from exc
        return self.plain(found)

    async def create(self, kind: Kind, namespace: str, body: JsonDict) -> JsonDict:
        """Create `body` (POST: fails if the name is taken, `AlreadyExists`); the object as
        created."""
        try:
            made = await asyncio.to_thread(
                kind.create, namespace, body, field_manager=FIELD_MANAGER
            )
        except ApiException as exc:  # 409: made meanwhile (`AlreadyExists`)
            error = AlreadyExists if exc.status == 409 else KubeError
            raise error(
                f"create {kind.name} {namespace}/{body['metadata']['name']}: "
                f"{exc.status} {exc.reason}"
            ) from exc
        return self.plain(made)

    async def apply(self, kind: Kind, name: str, namespace: str, body: JsonDict) -> None:
        """Server-side apply `body` (a `metadata.uid` in it is a precondition)."""
        try:
            await asyncio.to_thread(
                kind.patch,
                name,
                namespace,
                body,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type=APPLY,
            )
        except ApiException as exc:
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
        try:
            await asyncio.to_thread(
                kind.patch, meta["name"], meta["namespace"], ops, _content_type=JSON_PATCH
            )
        except ApiException as exc:
            raise KubeError(
                f"take over {kind.name} {meta['namespace']}/{meta['name']}: "
                f"{exc.status} {exc.reason}"
            ) from exc

    async def delete(self, kind: Kind, found: Mapping[str, Any]) -> None:
        """Delete exactly the object that was read (uid precondition); gone already is fine."""
        meta = found["metadata"]
        options = kubernetes.client.V1DeleteOptions(
            preconditions=kubernetes.client.V1Preconditions(uid=meta["uid"])
        )
        try:
            await asyncio.to_thread(kind.delete, meta["name"], meta["namespace"], body=options)
        except ApiException as exc:
            if exc.status not in (404, 409):  # 409: replaced by another object since: not ours
                raise KubeError(
                    f"delete {kind.name} {meta['namespace']}/{meta['name']}: "
                    f"{exc.status} {exc.reason}"
                ) from exc


def _table_row(table: JsonDict) -> modelroute.KeySeen:
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
    return modelroute.KeySeen(type=kind, annotations=annotations)
