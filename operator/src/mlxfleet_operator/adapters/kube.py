"""Kubernetes objects the operator reads or owns: Secrets, SwapPlans, the Service and
EndpointSlices of each ModelDeployment.

The `kubernetes` client is synchronous, so every call goes through `asyncio.to_thread`: the kopf
event loop never blocks. Owned objects are written with server-side apply (field manager
`mlxfleet-operator`), so a repeated call is a no-op and nobody else's fields are touched.
Status of the object a handler is working on is written by kopf's own patch, not here;
`write_status` does not hand kopf the same status again while kopf's body has not caught up
with the last one (`STATUS_RESEND_S`), nor conditions whose only change is a
transition time stamped because the body lags (`_kept_transitions`).
`publish` remembers what it last published per deployment and skips an unchanged one (no GET,
LIST or apply) until `PUBLISH_RESYNC_S` passes, so a quiet fleet does not write at all. When the
endpoints did change, objects this process wrote (their uids) are applied again without being
read first, the Service is not touched and the stale-slice LIST is skipped while the set of
slice names is the same: one apply instead of five calls (the full path runs again after
`PUBLISH_RESYNC_S`, or at once when a fast apply fails: someone else changed the object). The
full path reads each object and applies it only when it is not already as we would write it
(`covers`): the resync of a quiet fleet reads, it does not write (at 1,000 deployments an
apply of the Service and each slice every 5 minutes is over 2,000 write requests each time).
May import: kubernetes, the standard library, `api`, `core.naming`. Called by: handlers.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

import kubernetes
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel

from mlxfleet_operator.api import resources
from mlxfleet_operator.core import naming

FIELD_MANAGER = "mlxfleet-operator"
APPLY = "application/apply-patch+yaml"
MANAGED_BY = "mlxfleet.io"
SERVICE_PORT_NAME = "http"
SERVICE_PORT = 80
PUBLISH_RESYNC_S = 300.0  # unchanged endpoints are applied again this often (repairs edits)
JsonDict = dict[str, Any]


class KubeError(Exception):
    """A Kubernetes call that failed for a reason other than not-found / already-exists."""


class ServiceConflict(Exception):
    """A Service or EndpointSlice has the name the deployment needs but is not its own."""


class SecretMissing(KubeError):
    """The referenced Secret or key does not exist (or the operator may not read it)."""


class SecretNotAllowed(KubeError):
    """The referenced Secret is not labelled as agent credentials: the operator will not use it."""


@dataclass(frozen=True)
class Endpoint:
    """One agent data plane serving a ModelDeployment replica."""

    node: str
    host: str
    port: int
    ready: bool

    @classmethod
    def from_url(cls, node: str, url: str, *, ready: bool) -> Endpoint:
        parts = urlsplit(url)
        return cls(node, parts.hostname or "", parts.port or 80, ready)


def client_from(kubeconfig: str | None) -> kubernetes.client.ApiClient:
    """API client from a kubeconfig file, else the in-cluster ServiceAccount."""
    if kubeconfig:
        client = kubernetes.config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        return cast(kubernetes.client.ApiClient, client)
    kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    return kubernetes.client.ApiClient()


def status_patch(status: BaseModel, current: Mapping[str, Any] | None = None) -> JsonDict | None:
    """The merge patch that makes `.status` equal `status`: nested nulls left out (the API server
    drops them, and lists are replaced whole), top-level fields that became unset set to null.
    None when nothing would change (no write, no watch event)."""
    body = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    for name, info in type(status).model_fields.items():
        key = info.alias or name
        if key not in body and current is not None and key in current:
            body[key] = None
    if current is not None and {k: v for k, v in body.items() if v is not None} == dict(current):
        return None
    return body


STATUS_RESEND_S = 30.0  # the same status against the same body version: sent again after this
_SENT: dict[str, tuple[object, JsonDict, float]] = {}  # uid -> (resourceVersion, patch, when)


def write_status(
    patch: MutableMapping[str, Any],
    status: BaseModel,
    body: Mapping[str, Any],
    *,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Put the status into kopf's patch of the object being handled (if anything changed).

    Not when this process already sent exactly this status against the very same version of
    the object, less than `STATUS_RESEND_S` ago: kopf's body lags our own writes when the
    operator is busy, so every run would compare against the old status and send the same
    patch again (at 500 x 1,000: 47 InferenceNode and 54 ModelDeployment status PATCHes a
    second with nothing changing, each one a write and a watch event to process)."""
    shown = body.get("status") or {}
    meta = body.get("metadata") or {}
    uid, version, now = str(meta.get("uid") or ""), meta.get("resourceVersion"), clock()
    last = _SENT.get(uid)
    found = status_patch(status, shown)
    if found is not None and last is not None:
        found = _kept_transitions(found, last[1], shown)
        if {k: v for k, v in found.items() if v is not None} == dict(shown):
            return
    if found is None:
        return
    if (
        uid
        and last is not None
        and last[:2] == (version, found)
        and now - last[2] < STATUS_RESEND_S
    ):
        return
    patch["status"] = found
    if uid:
        if len(_SENT) > 100_000:  # objects come and go: forget them all now and then
            _SENT.clear()
        _SENT[uid] = (version, found, now)


def _kept_transitions(found: JsonDict, sent: JsonDict, shown: Mapping[str, Any]) -> JsonDict:
    """`found` with each condition's lastTransitionTime as this process last sent it, where the
    condition has the status it was sent with and only kopf's lagging body (`shown`: that type
    missing or with another status) made it look like a transition. Else a run on a body from
    before our last write stamps `now` on every condition again: at 500 x 1,000, 55 status
    PATCHes a second that changed nothing but the times of Ready, Reconciling and Stalled."""
    new, before = found.get("conditions"), sent.get("conditions")
    if not isinstance(new, list) or not isinstance(before, list):
        return found
    was = {c.get("type"): c for c in before if isinstance(c, dict)}
    body = {c.get("type"): c for c in shown.get("conditions") or [] if isinstance(c, dict)}
    kept = []
    for c in new:
        prior, seen = was.get(c.get("type")), body.get(c.get("type"))
        lagging = seen is None or seen.get("status") != c.get("status")
        if prior is not None and prior.get("status") == c.get("status") and lagging:
            c = {**c, "lastTransitionTime": prior.get("lastTransitionTime")}
        kept.append(c)
    return {**found, "conditions": kept}


@dataclass
class _Written:
    """The objects this process wrote for one deployment (uid) and their uids."""

    deployment: str
    at: float
    service: str | None = None
    slices: dict[str, str] = field(default_factory=dict)  # name -> uid


@dataclass(frozen=True)
class _Kind:
    """The client calls for one kind of object the operator owns."""

    name: str
    read: Any
    create: Any
    patch: Any
    delete: Any


def covers(found: Any, wanted: Any) -> bool:
    """`found` (an object as the API server returns it) already holds every field of `wanted`
    with the same value: mappings key by key, with more keys allowed in `found` (the server's
    defaults, other managers' fields); lists of the same length, item by item."""
    if isinstance(wanted, Mapping):
        return isinstance(found, Mapping) and all(
            key in found and covers(found[key], value) for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(found, list)
            and len(found) == len(wanted)
            and all(covers(f, w) for f, w in zip(found, wanted, strict=True))
        )
    return bool(found == wanted)


def owns(deployment: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """The operator made `obj` for this deployment: our managed-by label and a controller
    ownerReference to this ModelDeployment (its uid, or its name: a deployment deleted and
    created again under the same name takes its predecessor's objects back)."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") != MANAGED_BY:
        return False
    mine = deployment["metadata"]
    for ref in meta.get("ownerReferences") or []:
        ours = (
            ref.get("controller") is True
            and ref.get("kind") == resources.MODEL_DEPLOYMENT.kind
            and str(ref.get("apiVersion", "")).split("/")[0] == resources.GROUP
        )
        if ours and (ref.get("uid") == mine["uid"] or ref.get("name") == mine["name"]):
            return True
    return False


def conflict_message(kind: str, obj: Mapping[str, Any]) -> str:
    """Why an object with our name is not ours, and what a person can do."""
    meta = obj.get("metadata") or {}
    where = f"{kind} {meta.get('namespace')}/{meta.get('name')}"
    owners = [
        f"{r.get('kind')} {r.get('name')}"
        for r in meta.get("ownerReferences") or []
        if r.get("controller")
    ]
    why = f"it belongs to {', '.join(owners)}" if owners else "it was not created by mlxfleet"
    return (
        f"{where} already exists and {why}; the operator leaves it alone. Delete or rename it, "
        "or give the ModelDeployment another name (docs/operator.md: names)"
    )


def owner_reference(body: Mapping[str, Any]) -> JsonDict:
    meta = body["metadata"]
    return {
        "apiVersion": body.get("apiVersion", resources.API_VERSION),
        "kind": body.get("kind", resources.MODEL_DEPLOYMENT.kind),
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


def slice_address(host: str) -> tuple[str, str]:
    """(addressType, address) for an agent host. The API server refuses loopback IPs in
    EndpointSlices and FQDNs need two labels: an agent on loopback (a development machine) is
    published as FQDN `loopback.localhost` (RFC 6761: *.localhost names the loopback host)."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return "FQDN", host
    if ip.is_loopback:
        return "FQDN", "loopback.localhost"
    return ("IPv4" if ip.version == 4 else "IPv6"), str(ip)


async def resolve_host(host: str) -> str:
    """An agent's host as an IP address for its EndpointSlice (kube-proxy ignores FQDN
    endpoints): a name is looked up on every publish, so a changed address is picked up at the
    next reconcile. IPv4 first; the name itself when it does not resolve."""
    bare = host.strip("[]")
    try:
        ipaddress.ip_address(bare)
        return bare
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(bare, None, type=socket.SOCK_STREAM)
    except OSError:
        return host
    found = sorted({str(info[4][0]) for info in infos}, key=lambda a: (":" in a, a))
    return found[0] if found else host


def service_url(namespace: str, deployment: str) -> str:
    return f"http://{naming.service_name(deployment)}.{namespace}.svc:{SERVICE_PORT}"


class Kube:
    """Thin async facade over the synchronous client (one instance per operator)."""

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        *,
        publish_resync: float = PUBLISH_RESYNC_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        # (namespace, name) -> (what was last published, when): publish skips an unchanged one
        self._published: dict[tuple[str, str], tuple[object, float]] = {}
        # (namespace, name) -> what this process wrote for it (see `_publish`)
        self._written: dict[tuple[str, str], _Written] = {}
        self._resync = publish_resync
        self._clock = clock
        self.core = kubernetes.client.CoreV1Api(api)
        self.discovery = kubernetes.client.DiscoveryV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    def _plain(self, obj: object) -> JsonDict:
        """A client model as the JSON the API server sent (camelCase keys)."""
        return cast(JsonDict, self.api.sanitize_for_serialization(obj))  # type: ignore[no-untyped-call]

    # ------------------------------------------------------------------------------ secrets

    async def agent_credential(self, *, namespace: str, name: str, key: str) -> str:
        """One key of a Secret labelled as agent credentials (`AGENT_CREDENTIALS_LABEL=true`).

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
        return base64.b64decode(data[key]).decode().strip()

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

    # -------------------------------------------------------------- Service + EndpointSlices

    async def publish(self, deployment: Mapping[str, Any], endpoints: Sequence[Endpoint]) -> None:
        """`_publish`, skipped (no read, list or write) when this process already published the
        same endpoints for the same deployment less than `publish_resync` seconds ago."""
        meta = deployment["metadata"]
        key, want = (meta["namespace"], meta["name"]), (meta["uid"], tuple(endpoints))
        last = self._published.get(key)
        if last is not None and last[0] == want and self._clock() - last[1] < self._resync:
            return
        self._published.pop(key, None)
        await self._publish(deployment, endpoints)
        self._published[key] = (want, self._clock())

    async def _publish(self, deployment: Mapping[str, Any], endpoints: Sequence[Endpoint]) -> None:
        """Service without selector + one EndpointSlice per (address type, port); stale ones go.

        Only objects this deployment owns are written (`owns`): a new one is created (POST, which
        fails if someone made it meanwhile), an existing one of ours is server-side applied with
        its uid as a precondition. Anything else with the name raises `ServiceConflict` and is
        left exactly as it is; no EndpointSlice is written for a Service that is not ours."""
        meta = deployment["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        key = (namespace, name)
        written = self._written.pop(key, None)
        if written is None or written.deployment != meta["uid"] or self._expired(written.at):
            written = _Written(meta["uid"], self._clock())
        service = naming.service_name(name)
        owner = [owner_reference(deployment)]
        labels = {"app.kubernetes.io/managed-by": MANAGED_BY, **naming.deployment_labels(name)}
        annotations = {resources.DEPLOYMENT_ANNOTATION: name}
        svc_body: JsonDict = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": service,
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": owner,
            },
            "spec": {
                "ports": [{"name": SERVICE_PORT_NAME, "port": SERVICE_PORT, "protocol": "TCP"}]
            },
        }
        if written.service is None:  # not written by this process since the last full path
            written.service = await self._own(self._services, deployment, svc_body)
        before = set(written.slices)
        self._written[key] = written  # `publish_slices` reads and fills it
        try:
            wanted = await self.publish_slices(deployment, endpoints)
            if wanted != before or not before:
                await self._delete_slices(deployment, service, keep=wanted)
        except BaseException:
            self._written.pop(key, None)  # the next publish takes the full path
            raise
        for gone in before - wanted:
            written.slices.pop(gone, None)

    def _expired(self, at: float) -> bool:
        return self._clock() - at >= self._resync

    async def publish_slices(
        self, deployment: Mapping[str, Any], endpoints: Sequence[Endpoint]
    ) -> set[str]:
        """Only the EndpointSlices of `publish` (no Service write, no pruning of stale slices):
        the fast path of a sharded group's withdrawal, only after `publish` succeeded (the
        Service is ours). Returns the slices' names. What `publish` last wrote is forgotten: the
        next `publish` writes again, even the same endpoints."""
        meta = deployment["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        self._published.pop((namespace, name), None)
        service = naming.service_name(name)
        owner = [owner_reference(deployment)]
        labels = {"app.kubernetes.io/managed-by": MANAGED_BY, **naming.deployment_labels(name)}
        annotations = {resources.DEPLOYMENT_ANNOTATION: name}
        groups: dict[tuple[str, int], list[tuple[str, Endpoint]]] = {}
        for ep in endpoints:
            kind, address = slice_address(await resolve_host(ep.host))
            groups.setdefault((kind, ep.port), []).append((address, ep))
        wanted: set[str] = set()
        for (kind, port), members in sorted(groups.items()):
            slice_name = f"{naming.endpoint_slice_name(service, port)}-{kind.lower()}"
            wanted.add(slice_name)
            body: JsonDict = {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": slice_name,
                    "namespace": namespace,
                    "ownerReferences": owner,
                    "annotations": annotations,
                    "labels": {
                        **labels,
                        "kubernetes.io/service-name": service,
                        "endpointslice.kubernetes.io/managed-by": f"{MANAGED_BY}-operator",
                    },
                },
                "addressType": kind,
                "ports": [{"name": SERVICE_PORT_NAME, "port": port, "protocol": "TCP"}],
                "endpoints": [
                    {
                        "addresses": [address],
                        "conditions": {
                            "ready": ep.ready,
                            "serving": ep.ready,
                            "terminating": False,
                        },
                        "hostname": naming.service_name(ep.node),
                    }
                    for address, ep in sorted(members, key=lambda m: m[1].node)
                ],
            }
            await self._own_slice(deployment, body)
        return wanted

    async def _own_slice(self, deployment: Mapping[str, Any], body: JsonDict) -> None:
        """`_own` for an EndpointSlice; one this process wrote for the deployment is applied
        with its known uid (no read); if that fails it is read and decided on again."""
        meta, dmeta = body["metadata"], deployment["metadata"]
        written = self._written.get((dmeta["namespace"], dmeta["name"]))
        if written is not None and written.deployment != dmeta["uid"]:
            written = None
        uid = written.slices.get(meta["name"]) if written is not None else None
        if uid is not None:
            try:
                await self._apply(
                    self._slices.patch,
                    meta["name"],
                    meta["namespace"],
                    {**body, "metadata": {**meta, "uid": uid}},
                )
                return
            except KubeError:
                pass  # changed or gone meanwhile: the careful way below
        uid = await self._own(self._slices, deployment, body)
        if written is not None:
            written.slices[meta["name"]] = uid

    async def unpublish(self, deployment: Mapping[str, Any]) -> None:
        """Remove the deployment's own Service and EndpointSlices (ownerReferences do this too
        where garbage collection runs); a Service with that name that is not its own stays."""
        meta = deployment["metadata"]
        namespace, service = meta["namespace"], naming.service_name(meta["name"])
        self._published.pop((namespace, meta["name"]), None)
        self._written.pop((namespace, meta["name"]), None)
        await self._delete_slices(deployment, service, keep=set())
        found = await self._read(self._services, service, namespace)
        if found is not None and owns(deployment, found):
            await self._delete(self._services, found)

    @property
    def _services(self) -> _Kind:
        return _Kind(
            "Service",
            self.core.read_namespaced_service,
            self.core.create_namespaced_service,
            self.core.patch_namespaced_service,
            self.core.delete_namespaced_service,
        )

    @property
    def _slices(self) -> _Kind:
        return _Kind(
            "EndpointSlice",
            self.discovery.read_namespaced_endpoint_slice,
            self.discovery.create_namespaced_endpoint_slice,
            self.discovery.patch_namespaced_endpoint_slice,
            self.discovery.delete_namespaced_endpoint_slice,
        )

    async def _own(self, kind: _Kind, deployment: Mapping[str, Any], body: JsonDict) -> str:
        """Create `body`, or apply it over the existing object if (and only if) it is ours.
        Returns the object's uid."""
        meta = body["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        found = await self._read(kind, name, namespace)
        if found is None:
            try:
                made = await asyncio.to_thread(
                    kind.create, namespace, body, field_manager=FIELD_MANAGER
                )
            except ApiException as exc:  # 409: made meanwhile; the next reconcile looks again
                raise KubeError(
                    f"create {kind.name} {namespace}/{name}: {exc.status} {exc.reason}"
                ) from exc
            return str(self._plain(made)["metadata"]["uid"])
        if not owns(deployment, found):
            raise ServiceConflict(conflict_message(kind.name, found))
        uid = found["metadata"]["uid"]  # precondition: never applied to a replacement
        if covers(found, body):  # already as we would write it (a resync): read, not written
            return str(uid)
        await self._apply(kind.patch, name, namespace, {**body, "metadata": {**meta, "uid": uid}})
        return str(uid)

    async def _read(self, kind: _Kind, name: str, namespace: str) -> JsonDict | None:
        try:
            found = await asyncio.to_thread(kind.read, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise KubeError(
                f"get {kind.name} {namespace}/{name}: {exc.status} {exc.reason}"
            ) from exc
        return self._plain(found)

    async def _delete(self, kind: _Kind, found: Mapping[str, Any]) -> None:
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

    async def _delete_slices(
        self, deployment: Mapping[str, Any], service: str, *, keep: set[str]
    ) -> None:
        namespace = deployment["metadata"]["namespace"]
        try:
            listed = await asyncio.to_thread(
                self.discovery.list_namespaced_endpoint_slice,
                namespace,
                label_selector=f"kubernetes.io/service-name={service},app.kubernetes.io/managed-by={MANAGED_BY}",
            )
        except ApiException as exc:
            raise KubeError(
                f"EndpointSlices of {namespace}/{service}: {exc.status} {exc.reason}"
            ) from exc
        for item in self._plain(listed).get("items", []):
            if item["metadata"]["name"] not in keep and owns(deployment, item):
                await self._delete(self._slices, item)

    async def _apply(self, method: Any, name: str, namespace: str, body: JsonDict) -> None:
        try:
            await asyncio.to_thread(
                method,
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
