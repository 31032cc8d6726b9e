"""Selectorless Services and their EndpointSlices: how agents outside the cluster get addresses
inside it. Each ModelDeployment publishes its agents' data planes (its address for clients,
`of_deployment`); each InferenceNode publishes its agent's metrics endpoint as a scrape target
for an in-cluster Prometheus (`of_agent`, a headless Service in the operator's namespace that the
chart's ServiceMonitor selects). A `Publication` says what one owner publishes; everything below
is the same for both.

`Publisher.publish` writes a Service without selector and one EndpointSlice per (address type,
port) holding the owner's endpoints, and removes stale slices. Only objects the owner owns are
written (`ownership.owns`); anything else with the name raises `ServiceConflict` and is left
exactly as it is. Where this says "deployment", read "owner".
`publish` skips endpoints it already published for the deployment (no GET, LIST or apply) until
the key's resync period (`resync_after`: `PUBLISH_RESYNC_S`, shortened by up to
`PUBLISH_RESYNC_JITTER` by a stable hash of the key, so deployments published within one minute
fall due over a minute, not as one burst of reads), so a quiet fleet does not write at all.
When the endpoints did change, objects this process wrote (their uids) are applied again
without being read first, the Service is not touched and the stale-slice LIST is skipped while
no slice it wrote dropped out: one apply instead of five calls (the full path runs again after
the resync period, or at once when a fast apply fails: someone else changed the object). The
full path reads each object and applies it only when it is not already as we would write it
(`ownership.covers`): the resync of a quiet fleet reads, it does not write.
A slice is first written once one of its endpoints is ready, then follows them (`publish_slices`).
A deployment not published yet (no `status.endpoint`, no name found taken in this process) has
its objects created with a POST straight away: a taken name fails (409), and only then is the
object read and decided on as above, so nothing of someone else's is ever written. A slice this
process already wrote with exactly the body it would write now is not applied again.
May import: the standard library, `kube`, `ownership`, `api`, `core.kit.naming`.
Called by: `runtime` (builds it), handlers (through `runtime.Runtime.publisher`).
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from mlxfleet_operator.adapters import kube, ownership
from mlxfleet_operator.api import resources
from mlxfleet_operator.core.kit import naming

SERVICE_PORT_NAME = "http"
SERVICE_PORT = 80
# Unchanged endpoints are read again (and applied where edited) at most this long after they were
# published, at least (1 - PUBLISH_RESYNC_JITTER) times it: each key's own period (`resync_after`)
# so that owners published together do not all fall due together.
PUBLISH_RESYNC_S = 300.0
PUBLISH_RESYNC_JITTER = 0.2
# An agent's metrics scrape target: its control API's /metrics, one port name per scheme so a
# ServiceMonitor scrapes each with the right scheme (and TLS settings for https).
AGENT_METRICS_PORT_NAMES = {"http": "http-metrics", "https": "https-metrics"}
AGENT_METRICS_COMPONENT = "agent-metrics"
NODE_ANNOTATION = f"{resources.GROUP}/node"  # the InferenceNode's whole name


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
    """The objects this process wrote for one owner (its uid) and their uids."""

    deployment: str  # the owner's uid
    at: float
    service: str | None = None
    slices: dict[str, str] = field(default_factory=dict)  # name -> uid
    bodies: dict[str, int] = field(default_factory=dict)  # name -> hash of the body it holds
    fresh: bool = False  # a deployment not published before: its objects are POSTed first
    listed: bool = False  # its stale slices were LISTed (and removed) since the full path


def resync_after(key: tuple[str, str], resync: float) -> float:
    """How long after its last publish the key (namespace, Service name) is published again
    with unchanged endpoints: `resync` shortened by up to `PUBLISH_RESYNC_JITTER` of it, by a
    hash of the key that is the same in every process (not the salted `hash()`)."""
    digest = hashlib.blake2b("/".join(key).encode(), digest_size=8).digest()
    fraction = int.from_bytes(digest, "big") / 2**64  # in [0, 1)
    return resync * (1.0 - PUBLISH_RESYNC_JITTER * fraction)


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


@dataclass(frozen=True)
class Publication:
    """What one owner publishes: where, under which Service name, with which labels, the
    Service's port, and whether it is headless (a scrape target needs no virtual IP)."""

    owner: Mapping[str, Any]  # the owning object (apiVersion, kind, metadata name and uid)
    namespace: str
    service: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    port_name: str = SERVICE_PORT_NAME
    service_port: int = SERVICE_PORT
    headless: bool = False
    new: bool = False  # nothing was published for it yet, as far as it says (POST first)

    @property
    def key(self) -> tuple[str, str]:
        """What the publisher remembers it by: (namespace, Service name)."""
        return self.namespace, self.service

    @property
    def uid(self) -> str:
        return str(self.owner["metadata"]["uid"])

    def owner_references(self) -> list[kube.JsonDict]:
        return [ownership.owner_reference(self.owner)]


def of_deployment(deployment: Mapping[str, Any]) -> Publication:
    """A ModelDeployment's address: a Service named after it in its namespace, port 80."""
    meta = deployment["metadata"]
    name = meta["name"]
    status = deployment.get("status") or {}
    return Publication(
        owner=deployment,
        namespace=meta["namespace"],
        service=naming.service_name(name),
        labels={
            "app.kubernetes.io/managed-by": ownership.MANAGED_BY,
            **naming.deployment_labels(name),
        },
        annotations={resources.DEPLOYMENT_ANNOTATION: name},
        new=not status.get("endpoint"),
    )


def of_agent(node: Mapping[str, Any], *, namespace: str, scheme: str, port: int) -> Publication:
    """An InferenceNode's agent as a scrape target: a headless Service in `namespace` (the
    operator's), labelled for the chart's ServiceMonitor, its port named by `scheme`."""
    name = node["metadata"]["name"]
    return Publication(
        owner=node,
        namespace=namespace,
        service=naming.agent_metrics_service(name),
        labels={
            "app.kubernetes.io/managed-by": ownership.MANAGED_BY,
            "app.kubernetes.io/name": "mlxfleet-agent",
            "app.kubernetes.io/component": AGENT_METRICS_COMPONENT,
            NODE_ANNOTATION: naming.label_value(name),
        },
        annotations={NODE_ANNOTATION: name},
        port_name=AGENT_METRICS_PORT_NAMES[scheme],
        service_port=port,
        headless=True,
    )


def _publication(target: Mapping[str, Any] | Publication) -> Publication:
    """A body alone is a ModelDeployment (the callers of before publications)."""
    return target if isinstance(target, Publication) else of_deployment(target)


class Publisher:
    """Publishes each owner's Service and EndpointSlices through `kube` and remembers what it
    published and wrote (one instance per operator)."""

    def __init__(
        self,
        kube_: kube.Kube,
        *,
        resync: float = PUBLISH_RESYNC_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube_
        # (namespace, service) -> (what was last published, when): publish skips an unchanged one
        self._published: dict[tuple[str, str], tuple[object, float]] = {}
        # (namespace, service) -> what this process wrote for it (see `_publish`)
        self._written: dict[tuple[str, str], _Written] = {}
        # (namespace, service): a POST of theirs found the name taken; read first from then on
        self._taken: set[tuple[str, str]] = set()
        self._resync = resync
        self._clock = clock

    async def publish(
        self, target: Mapping[str, Any] | Publication, endpoints: Sequence[Endpoint]
    ) -> None:
        """`_publish`, skipped (no read, list or write) when this process already published the
        same endpoints for the same owner less than its resync period (`resync_after`) ago.
        `target`: a `Publication`, or a ModelDeployment body."""
        pub = _publication(target)
        want = (pub.uid, pub.port_name, pub.service_port, tuple(endpoints))
        last = self._published.get(pub.key)
        if last is not None and last[0] == want and not self._expired(pub.key, last[1]):
            return
        self._published.pop(pub.key, None)
        await self._publish(pub, endpoints)
        self._published[pub.key] = (want, self._clock())

    async def _publish(self, pub: Publication, endpoints: Sequence[Endpoint]) -> None:
        """Service without selector + one EndpointSlice per (address type, port); stale ones go.

        Only objects this owner owns are written (`ownership.owns`): a new one is created
        (POST, which fails if someone made it meanwhile), an existing one of ours is server-side
        applied with its uid as a precondition. Anything else with the name raises
        `ServiceConflict` and is left exactly as it is; no EndpointSlice is written for a Service
        that is not ours."""
        key = pub.key
        written = self._written.pop(key, None)
        if written is None or written.deployment != pub.uid or self._expired(key, written.at):
            first = written is None or written.deployment != pub.uid  # not the resync
            written = _Written(pub.uid, self._clock(), fresh=first and self._new(pub))
        spec: kube.JsonDict = {
            "ports": [{"name": pub.port_name, "port": pub.service_port, "protocol": "TCP"}]
        }
        if pub.headless:
            # A headless Service without selector defaults to RequireDualStack, and Prometheus's
            # EndpointSlice discovery then drops every slice whose address type is not the
            # first IP family (an FQDN slice, an IPv6 Mac in an IPv4 cluster): none of a
            # scrape target's addresses must be dropped, so one stack, whatever the agent's.
            spec["clusterIP"] = "None"
            spec["ipFamilyPolicy"] = "SingleStack"
        svc_body: kube.JsonDict = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": pub.service,
                "namespace": pub.namespace,
                "labels": dict(pub.labels),
                "annotations": dict(pub.annotations),
                "ownerReferences": pub.owner_references(),
            },
            "spec": spec,
        }
        if written.service is None:  # not written by this process since the last full path
            written.service = await self._own(
                self.kube.services, pub, svc_body, create_first=written.fresh
            )
        before = set(written.slices)
        self._written[key] = written  # `publish_slices` reads and fills it
        try:
            wanted = await self.publish_slices(pub, endpoints)
            if not written.listed or not before <= wanted:  # one of ours may be stale
                await self._delete_slices(pub, keep=wanted)
                written.listed = True
        except BaseException:
            self._written.pop(key, None)  # the next publish takes the full path
            raise
        for gone in before - wanted:
            written.slices.pop(gone, None)
            written.bodies.pop(gone, None)

    def _new(self, pub: Publication) -> bool:
        """Nothing was published for the owner yet, as far as it and this process know: it
        says so (a deployment's status names no endpoint: set once its Service is published)
        and no POST of its objects found the name taken. A guess that only decides the order
        (POST first, or GET first)."""
        return pub.new and pub.key not in self._taken

    def _record(self, pub: Publication) -> _Written | None:
        """What this process wrote for this owner (not a predecessor of its name)."""
        written = self._written.get(pub.key)
        return written if written is not None and written.deployment == pub.uid else None

    def _expired(self, key: tuple[str, str], at: float) -> bool:
        """The key's resync period has passed since `at`."""
        return self._clock() - at >= resync_after(key, self._resync)

    async def publish_slices(
        self, target: Mapping[str, Any] | Publication, endpoints: Sequence[Endpoint]
    ) -> set[str]:
        """Only the EndpointSlices of `publish` (no Service write, no pruning of stale slices):
        the fast path of a sharded group's withdrawal, only after `publish` succeeded (the
        Service is ours). Returns the slices' names. What `publish` last wrote is forgotten: the
        next `publish` writes again. A slice is created once an endpoint of it is ready (500 x
        1,000: 1,819 applies fewer), then follows its endpoints, ready or not."""
        pub = _publication(target)
        self._published.pop(pub.key, None)
        slice_labels = {
            **pub.labels,
            "kubernetes.io/service-name": pub.service,
            "endpointslice.kubernetes.io/managed-by": f"{ownership.MANAGED_BY}-operator",
        }
        groups: dict[tuple[str, int], list[tuple[str, Endpoint]]] = {}
        for ep in endpoints:
            kind, address = slice_address(await resolve_host(ep.host))
            groups.setdefault((kind, ep.port), []).append((address, ep))
        wanted: set[str] = set()
        known = written.slices if (written := self._record(pub)) is not None else {}
        for (kind, port), members in sorted(groups.items()):
            slice_name = f"{naming.endpoint_slice_name(pub.service, port)}-{kind.lower()}"
            if slice_name not in known and not any(ep.ready for _, ep in members):
                continue  # nothing to route to yet: written once one of its endpoints is ready
            wanted.add(slice_name)
            body: kube.JsonDict = {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": slice_name,
                    "namespace": pub.namespace,
                    "ownerReferences": pub.owner_references(),
                    "annotations": dict(pub.annotations),
                    "labels": slice_labels,
                },
                "addressType": kind,
                "ports": [{"name": pub.port_name, "port": port, "protocol": "TCP"}],
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
            await self._own_slice(pub, body)
        return wanted

    async def _own_slice(self, pub: Publication, body: kube.JsonDict) -> None:
        """`_own` for a slice; one this process wrote is applied by uid (no read), not at all
        when it holds this very body, and read and decided on again if that apply fails."""
        meta = body["metadata"]
        written = self._record(pub)
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
        uid = await self._own(self.kube.slices, pub, body, create_first=fresh)
        if written is not None:
            written.slices[meta["name"]] = uid
            written.bodies[meta["name"]] = digest

    async def unpublish(self, target: Mapping[str, Any] | Publication) -> None:
        """Remove the owner's own Service and EndpointSlices (ownerReferences do this too
        where garbage collection runs); a Service with that name that is not its own stays."""
        pub = _publication(target)
        self._published.pop(pub.key, None)
        self._written.pop(pub.key, None)
        self._taken.discard(pub.key)
        await self._delete_slices(pub, keep=set())
        found = await self.kube.read(self.kube.services, pub.service, pub.namespace)
        if found is not None and ownership.owns(pub.owner, found):
            await self.kube.delete(self.kube.services, found)

    async def _own(
        self,
        kind: kube.Kind,
        pub: Publication,
        body: kube.JsonDict,
        *,
        create_first: bool = False,
    ) -> str:
        """Create `body`, or apply it over the existing object if (and only if) it is ours.
        Returns the object's uid. `create_first`: POST without reading first (a new
        owner's objects are not there yet); a name found taken (409) is read and decided
        on like any existing object."""
        meta = body["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        if create_first:
            try:
                made = await self.kube.create(kind, namespace, body)
                return str(made["metadata"]["uid"])
            except kube.AlreadyExists:
                self._taken.add(pub.key)
        found = await self.kube.read(kind, name, namespace)
        if found is None:
            made = await self.kube.create(kind, namespace, body)
            return str(made["metadata"]["uid"])
        if not ownership.owns(pub.owner, found):
            raise ServiceConflict(ownership.conflict_message(kind.name, found, pub.owner))
        uid = found["metadata"]["uid"]  # precondition: never applied to a replacement
        if ownership.inherited(pub.owner, found):  # a predecessor's: now this owner's
            await self.kube.replace_owners(kind, found, meta["ownerReferences"])
        if ownership.covers(found, body):  # already as we would write it (a resync): not written
            return str(uid)
        await self.kube.apply(kind, name, namespace, {**body, "metadata": {**meta, "uid": uid}})
        return str(uid)

    async def _delete_slices(self, pub: Publication, *, keep: set[str]) -> None:
        listed = await self.kube.select(
            self.kube.slices,
            pub.namespace,
            labels=f"kubernetes.io/service-name={pub.service},app.kubernetes.io/managed-by={ownership.MANAGED_BY}",
        )
        for item in listed:
            if item["metadata"]["name"] not in keep and ownership.owns(pub.owner, item):
                await self.kube.delete(self.kube.slices, item)
