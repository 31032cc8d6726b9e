"""The Service and EndpointSlices of each ModelDeployment: its address inside the cluster.

`Publisher.publish` writes a Service without selector and one EndpointSlice per (address type,
port) holding the deployment's agent data planes, and removes stale slices. Only objects the
deployment owns are written (`ownership.owns`); anything else with the name raises
`ServiceConflict` and is left exactly as it is.
`publish` remembers what it last published per deployment and skips an unchanged one (no GET,
LIST or apply) until `PUBLISH_RESYNC_S` passes, so a quiet fleet does not write at all. When the
endpoints did change, objects this process wrote (their uids) are applied again without being
read first, the Service is not touched and the stale-slice LIST is skipped while the set of
slice names is the same: one apply instead of five calls (the full path runs again after
`PUBLISH_RESYNC_S`, or at once when a fast apply fails: someone else changed the object). The
full path reads each object and applies it only when it is not already as we would write it
(`ownership.covers`): the resync of a quiet fleet reads, it does not write (at 1,000
deployments an apply of the Service and each slice every 5 minutes is over 2,000 write
requests each time).
A deployment the operator has not published yet (no `status.endpoint`, no name found taken in
this process) has its objects created with a POST straight away: the POST fails on a name that
is taken (409), and only then is the object read and decided on as above, so nothing of someone
else's is ever written, and a new deployment costs one request per object instead of two. A
slice this process already wrote with exactly the body it would write now is not applied again
(a deployment's other slices when one endpoint turned ready); the resync reads it.
May import: kubernetes, the standard library, `kube`, `ownership`, `api`, `core.naming`.
Called by: `runtime` (builds it), handlers (through `runtime.Runtime.publisher`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kubernetes.client.exceptions import ApiException

from mlxfleet_operator.adapters import kube, ownership
from mlxfleet_operator.api import resources
from mlxfleet_operator.core import naming

SERVICE_PORT_NAME = "http"
SERVICE_PORT = 80
PUBLISH_RESYNC_S = 300.0  # unchanged endpoints are applied again this often (repairs edits)


class ServiceConflict(Exception):
    """A Service or EndpointSlice has the name the deployment needs but is not its own."""


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


@dataclass
class _Written:
    """The objects this process wrote for one deployment (uid) and their uids."""

    deployment: str
    at: float
    service: str | None = None
    slices: dict[str, str] = field(default_factory=dict)  # name -> uid
    bodies: dict[str, int] = field(default_factory=dict)  # name -> hash of the body it holds
    fresh: bool = False  # a deployment not published before: its objects are POSTed first


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


def _marks(
    deployment: Mapping[str, Any],
) -> tuple[list[kube.JsonDict], dict[str, str], dict[str, str]]:
    """The ownerReferences, labels and annotations of every object published for `deployment`."""
    name = deployment["metadata"]["name"]
    labels = {
        "app.kubernetes.io/managed-by": ownership.MANAGED_BY,
        **naming.deployment_labels(name),
    }
    annotations = {resources.DEPLOYMENT_ANNOTATION: name}
    return [ownership.owner_reference(deployment)], labels, annotations


class Publisher:
    """Publishes each ModelDeployment's Service and EndpointSlices through `kube` and remembers
    what it published and wrote (one instance per operator)."""

    def __init__(
        self,
        kube_: kube.Kube,
        *,
        resync: float = PUBLISH_RESYNC_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube_
        # (namespace, name) -> (what was last published, when): publish skips an unchanged one
        self._published: dict[tuple[str, str], tuple[object, float]] = {}
        # (namespace, name) -> what this process wrote for it (see `_publish`)
        self._written: dict[tuple[str, str], _Written] = {}
        # (namespace, name): a POST of theirs found the name taken; read first from then on
        self._taken: set[tuple[str, str]] = set()
        self._resync = resync
        self._clock = clock

    async def publish(self, deployment: Mapping[str, Any], endpoints: Sequence[Endpoint]) -> None:
        """`_publish`, skipped (no read, list or write) when this process already published the
        same endpoints for the same deployment less than `resync` seconds ago."""
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

        Only objects this deployment owns are written (`ownership.owns`): a new one is created
        (POST, which fails if someone made it meanwhile), an existing one of ours is server-side
        applied with its uid as a precondition. Anything else with the name raises
        `ServiceConflict` and is left exactly as it is; no EndpointSlice is written for a Service
        that is not ours."""
        meta = deployment["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        key = (namespace, name)
        written = self._written.pop(key, None)
        if written is None or written.deployment != meta["uid"] or self._expired(written.at):
            first = written is None or written.deployment != meta["uid"]  # not the resync
            written = _Written(meta["uid"], self._clock(), fresh=first and self._new(deployment))
        service = naming.service_name(name)
        owner, labels, annotations = _marks(deployment)
        svc_body: kube.JsonDict = {
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
            written.service = await self._own(
                self.kube.services, deployment, svc_body, create_first=written.fresh
            )
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
            written.bodies.pop(gone, None)

    def _new(self, deployment: Mapping[str, Any]) -> bool:
        """Nothing was published for `deployment` yet, as far as it and this process know: its
        status names no endpoint (set once its Service is published) and no POST of its objects
        found the name taken. A guess that only decides the order (POST first, or GET first)."""
        meta = deployment["metadata"]
        status = deployment.get("status") or {}
        return not status.get("endpoint") and (meta["namespace"], meta["name"]) not in self._taken

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
        owner, labels, annotations = _marks(deployment)
        slice_labels = {
            **labels,
            "kubernetes.io/service-name": service,
            "endpointslice.kubernetes.io/managed-by": f"{ownership.MANAGED_BY}-operator",
        }
        groups: dict[tuple[str, int], list[tuple[str, Endpoint]]] = {}
        for ep in endpoints:
            kind, address = slice_address(await resolve_host(ep.host))
            groups.setdefault((kind, ep.port), []).append((address, ep))
        wanted: set[str] = set()
        for (kind, port), members in sorted(groups.items()):
            slice_name = f"{naming.endpoint_slice_name(service, port)}-{kind.lower()}"
            wanted.add(slice_name)
            body: kube.JsonDict = {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": slice_name,
                    "namespace": namespace,
                    "ownerReferences": owner,
                    "annotations": annotations,
                    "labels": slice_labels,
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

    async def _own_slice(self, deployment: Mapping[str, Any], body: kube.JsonDict) -> None:
        """`_own` for an EndpointSlice; one this process wrote for the deployment is applied
        with its known uid (no read), and not at all when it wrote this very body; if the apply
        fails it is read and decided on again."""
        meta, dmeta = body["metadata"], deployment["metadata"]
        written = self._written.get((dmeta["namespace"], dmeta["name"]))
        if written is not None and written.deployment != dmeta["uid"]:
            written = None
        digest = hash(json.dumps(body, sort_keys=True))
        uid = written.slices.get(meta["name"]) if written is not None else None
        if written is not None and uid is not None:
            if written.bodies.get(meta["name"]) == digest:
                return  # written as it is now since the last full path: the resync reads it
            try:
                await self.kube.apply(
                    self.kube.slices,
                    meta["name"],
                    meta["namespace"],
                    {**body, "metadata": {**meta, "uid": uid}},
                )
                written.bodies[meta["name"]] = digest
                return
            except kube.KubeError:
                pass  # changed or gone meanwhile: the careful way below
        fresh = written is not None and written.fresh
        uid = await self._own(self.kube.slices, deployment, body, create_first=fresh)
        if written is not None:
            written.slices[meta["name"]] = uid
            written.bodies[meta["name"]] = digest

    async def unpublish(self, deployment: Mapping[str, Any]) -> None:
        """Remove the deployment's own Service and EndpointSlices (ownerReferences do this too
        where garbage collection runs); a Service with that name that is not its own stays."""
        meta = deployment["metadata"]
        namespace, service = meta["namespace"], naming.service_name(meta["name"])
        self._published.pop((namespace, meta["name"]), None)
        self._written.pop((namespace, meta["name"]), None)
        self._taken.discard((namespace, meta["name"]))
        await self._delete_slices(deployment, service, keep=set())
        found = await self.kube.read(self.kube.services, service, namespace)
        if found is not None and ownership.owns(deployment, found):
            await self.kube.delete(self.kube.services, found)

    async def _own(
        self,
        kind: kube.Kind,
        deployment: Mapping[str, Any],
        body: kube.JsonDict,
        *,
        create_first: bool = False,
    ) -> str:
        """Create `body`, or apply it over the existing object if (and only if) it is ours.
        Returns the object's uid. `create_first`: POST without reading first (a new
        deployment's objects are not there yet); a name found taken (409) is read and decided
        on like any existing object."""
        meta = body["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        if create_first:
            try:
                made = await self.kube.create(kind, namespace, body)
                return str(made["metadata"]["uid"])
            except kube.AlreadyExists:
                dmeta = deployment["metadata"]
                self._taken.add((dmeta["namespace"], dmeta["name"]))
        found = await self.kube.read(kind, name, namespace)
        if found is None:
            made = await self.kube.create(kind, namespace, body)
            return str(made["metadata"]["uid"])
        if not ownership.owns(deployment, found):
            raise ServiceConflict(ownership.conflict_message(kind.name, found))
        uid = found["metadata"]["uid"]  # precondition: never applied to a replacement
        if ownership.inherited(deployment, found):  # a predecessor's: now this deployment's
            await self.kube.replace_owners(kind, found, meta["ownerReferences"])
        if ownership.covers(found, body):  # already as we would write it (a resync): not written
            return str(uid)
        await self.kube.apply(kind, name, namespace, {**body, "metadata": {**meta, "uid": uid}})
        return str(uid)

    async def _delete_slices(
        self, deployment: Mapping[str, Any], service: str, *, keep: set[str]
    ) -> None:
        namespace = deployment["metadata"]["namespace"]
        try:
            listed = await asyncio.to_thread(
                self.kube.discovery.list_namespaced_endpoint_slice,
                namespace,
                label_selector=f"kubernetes.io/service-name={service},app.kubernetes.io/managed-by={ownership.MANAGED_BY}",
            )
        except ApiException as exc:
            raise kube.KubeError(
                f"EndpointSlices of {namespace}/{service}: {exc.status} {exc.reason}"
            ) from exc
        for item in self.kube.plain(listed).get("items", []):
            if item["metadata"]["name"] not in keep and ownership.owns(deployment, item):
                await self.kube.delete(self.kube.slices, item)
