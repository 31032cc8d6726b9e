"""Kubernetes watches: ModelDeployments and ModelRoutes (all namespaces, or the ones given),
InferenceNodes (which are approved), the gateway's own API-key, provider-key and budgets Secrets
(by Secret type, in its namespace), and with the console SwapPlans.

Each kind runs list-then-watch in a thread with the synchronous `kubernetes` client (the event
loop never blocks); every change hands the kind's whole current set to the loop
(`call_soon_threadsafe`). A watch that ends, errs or gets 410 Gone lists again (backoff 0.2 s to
5 s); a bookmark keeps the resourceVersion fresh. The identity is the gateway's own
ServiceAccount (least privilege: list/watch of the three kinds, Secrets in its namespace only).
May import: kubernetes, the standard library, mlxfleet_operator.api, core.budgets.
Called by: server.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import kubernetes
from kubernetes.client.exceptions import ApiException

from mlxfleet_gateway.core import budgets
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.api import resources

log = logging.getLogger("mlxfleet_gateway.watch")
JsonDict = dict[str, Any]
API_KEY_TYPE = "mlxfleet.io/api-key"
SERVER_TIMEOUT_S = 240


def client_from(kubeconfig: str | None) -> kubernetes.client.ApiClient:
    """API client from a kubeconfig file, else the in-cluster ServiceAccount."""
    if kubeconfig:
        client = kubernetes.config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        return cast(kubernetes.client.ApiClient, client)
    kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    return kubernetes.client.ApiClient()


@dataclass(frozen=True)
class Source:
    """One list/watch: what to call and which kind name the view knows it by."""

    kind: str
    list_fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def sources(
    api: kubernetes.client.ApiClient,
    *,
    namespace: str,
    watch_namespaces: tuple[str, ...],
    swapplans: bool = False,
) -> list[Source]:
    """What the gateway watches; `swapplans` (the console) adds SwapPlans, cluster-wide."""
    custom = kubernetes.client.CustomObjectsApi(api)
    core = kubernetes.client.CoreV1Api(api)
    out: list[Source] = []
    for kind, resource in (
        ("deployments", resources.MODEL_DEPLOYMENT),
        ("routes", resources.MODEL_ROUTE),
    ):
        g, v = resources.GROUP, resources.VERSION
        if not watch_namespaces:
            out.append(Source(kind, custom.list_cluster_custom_object, (g, v, resource.plural), {}))
        for ns in watch_namespaces:
            out.append(
                Source(
                    f"{kind}@{ns}",
                    custom.list_namespaced_custom_object,
                    (g, v, ns, resource.plural),
                    {},
                )
            )
    node = resources.INFERENCE_NODE
    g, v = resources.GROUP, resources.VERSION
    out.append(Source("nodes", custom.list_cluster_custom_object, (g, v, node.plural), {}))
    for kind, secret_type in (
        ("api-keys", API_KEY_TYPE),
        ("provider-keys", mroute.PROVIDER_KEY_TYPE),
        ("budgets", budgets.SECRET_TYPE),
    ):
        out.append(
            Source(
                kind,
                core.list_namespaced_secret,
                (namespace,),
                {"field_selector": f"type={secret_type}"},
            )
        )
    if swapplans:
        plan = resources.SWAP_PLAN
        out.append(Source("swapplans", custom.list_cluster_custom_object, (g, v, plan.plural), {}))
    return out


def _key(obj: JsonDict) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Watch(threading.Thread):
    """list + watch of one Source, forever (until `stop`)."""

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        source: Source,
        deliver: Callable[[str, dict[str, JsonDict]], None],
        stop: threading.Event,
    ) -> None:
        super().__init__(name=f"watch-{source.kind}", daemon=True)
        self.api = api
        self.source = source
        self.deliver = deliver
        self.stop_event = stop
        self.objects: dict[str, JsonDict] = {}

    def _list(self) -> str:
        s = self.source
        raw = s.list_fn(*s.args, **s.kwargs, _preload_content=False, _request_timeout=30)
        body = cast(JsonDict, _json(raw))
        self.objects = {_key(o): o for o in body.get("items") or []}
        self.deliver(self.source.kind, dict(self.objects))
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def run(self) -> None:
        backoff = 0.2
        while not self.stop_event.is_set():
            try:
                version = self._list()
                backoff = 0.2
                self._watch(version)
            except ApiException as exc:
                if exc.status != 410:
                    log.warning("watch %s: %s %s", self.source.kind, exc.status, exc.reason)
            except Exception as exc:  # network errors, timeouts: list again after a pause
                log.warning("watch %s: %s: %s", self.source.kind, type(exc).__name__, exc)
            if self.stop_event.wait(backoff):
                return
            backoff = min(5.0, backoff * 2)

    def _watch(self, version: str) -> None:
        s = self.source
        w = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
        for event in w.stream(  # type: ignore[no-untyped-call]
            s.list_fn,
            *s.args,
            **s.kwargs,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=SERVER_TIMEOUT_S,
            _request_timeout=SERVER_TIMEOUT_S + 30,
        ):
            if self.stop_event.is_set():
                w.stop()  # type: ignore[no-untyped-call]
                return
            kind, obj = event.get("type"), event.get("raw_object") or {}
            if kind == "ERROR":
                code = (obj or {}).get("code")
                raise ApiException(status=code or 500, reason=str(obj.get("message", "")))
            if kind == "BOOKMARK":
                continue
            if kind == "DELETED":
                self.objects.pop(_key(obj), None)
            elif kind in ("ADDED", "MODIFIED"):
                self.objects[_key(obj)] = obj
            self.deliver(self.source.kind, dict(self.objects))


def _json(raw: Any) -> Any:
    import json

    return json.loads(raw.data)


class Watches:
    """All the gateway's watches; snapshots go to `on_snapshot(kind, objects)` on the loop."""

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        srcs: list[Source],
        on_snapshot: Callable[[str, dict[str, JsonDict]], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.api = api
        self.stop = threading.Event()
        self.loop = loop
        self.on_snapshot = on_snapshot
        self._parts: dict[str, dict[str, dict[str, JsonDict]]] = {}
        self.threads = [Watch(api, s, self._deliver, self.stop) for s in srcs]

    def _deliver(self, kind: str, objects: dict[str, JsonDict]) -> None:
        base = kind.split("@", 1)[0]
        self.loop.call_soon_threadsafe(self._merge, base, kind, objects)

    def _merge(self, base: str, kind: str, objects: dict[str, JsonDict]) -> None:
        """Per-namespace watches of one kind are merged into one snapshot."""
        parts = self._parts.setdefault(base, {})
        parts[kind] = objects
        expected = {t.source.kind for t in self.threads if t.source.kind.split("@")[0] == base}
        if set(parts) >= expected:
            merged: dict[str, JsonDict] = {}
            for part in parts.values():
                merged.update(part)
            self.on_snapshot(base, merged)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        self.api.close()  # type: ignore[no-untyped-call]
