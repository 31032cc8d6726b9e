"""What the console and the admin API work from: the gateway's view, the objects only they
watch (InferenceNodes as they are, SwapPlans), the API server, the month's figures, live rates.

`observe` takes the watches' snapshots (server hands every kind to it); `visible` says in which
namespaces a caller may list a kind (one review for all of them, else one per namespace, cached);
`write` sends a change as the caller (a Kubernetes identity: its own rights, the API server
judges) or as the gateway (an admin API key: the console's RBAC), and maps the API server's
answer to an admin error; `remember`/`forget` put an object the admin API just wrote into the view
at once (the watch brings the same moments later), so a new key works and a revoked one is
refused on this replica without waiting.
May import: the standard library, view, months, core.budgets, admin (auth, kubeapi, live, web).
Called by: admin.api, admin.keyadmin, console.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mlxfleet_gateway import months, view
from mlxfleet_gateway.admin import auth, kubeapi, live, web
from mlxfleet_gateway.core import budgets

JsonDict = dict[str, Any]
ALL = "*"


@dataclass
class Parts:
    view: view.View
    kube: kubeapi.KubeApi
    access: auth.Authenticator
    ledger: months.MonthLedger
    gate: budgets.Gate
    live: live.LiveRates
    namespace: str  # the gateway's: API keys and budgets
    nodes: dict[str, JsonDict] = field(default_factory=dict)
    swapplans: dict[str, JsonDict] = field(default_factory=dict)
    version: int = 0  # bumped on every snapshot: a page's live part is unchanged without it

    def observe(self, kind: str, objects: dict[str, JsonDict]) -> None:
        if kind == "nodes":
            self.nodes = dict(objects)
        elif kind == "swapplans":
            self.swapplans = dict(objects)
        self.version += 1

    # ---- who may see what -------------------------------------------------------------------

    async def visible(
        self, who: auth.Principal, resource: str, namespaces: Iterable[str]
    ) -> set[str] | str:
        """ALL, or the namespaces (of those given) where `who` may list `resource`."""
        if await self.access.allowed(who, auth.Check("list", resource)):
            return ALL
        out = set()
        for ns in sorted(set(namespaces)):
            if await self.access.allowed(who, auth.Check("list", resource, namespace=ns)):
                out.add(ns)
        return out

    def keys_check(self, verb: str = "list") -> auth.Check:
        """The right behind reading keys, usage and budgets: the Secrets they are."""
        return auth.Check(verb, "secrets", group="", namespace=self.namespace)

    # ---- writes --------------------------------------------------------------------------------

    async def write(
        self,
        who: auth.Principal,
        method: str,
        path: str,
        *,
        body: JsonDict | None = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JsonDict:
        """A change as the caller (Kubernetes identity) or as the gateway (admin key)."""
        try:
            reply = await self.kube.call(
                method,
                path,
                token=who.token if who.kube else None,
                body=body,
                params=params,
                content_type=content_type,
            )
        except kubeapi.KubeUnavailable as exc:
            raise web.ApiError(
                502, f"the API server did not answer: {exc}", code="kube_error"
            ) from None
        if reply.ok:
            return reply.body
        as_whom = who.name if who.kube else "the gateway (for an admin API key)"
        said = f"the API server refused {as_whom}: {reply.message}"
        if reply.status in (401, 403):
            raise web.ApiError(403, said, code="forbidden")
        if reply.status == 404:
            raise web.not_found(said)
        if reply.status == 409:
            raise web.ApiError(409, said, code="conflict")
        if reply.status in (400, 422):
            raise web.bad(said)
        raise web.ApiError(502, said, code="kube_error")

    def remember(self, kind: str, obj: JsonDict) -> None:
        meta = obj.get("metadata") or {}
        self.view.raw[kind][f"{meta.get('namespace', '')}/{meta.get('name', '')}"] = obj
        self.view.rebuild()

    def forget(self, kind: str, namespace: str, name: str) -> None:
        if self.view.raw[kind].pop(f"{namespace}/{name}", None) is not None:
            self.view.rebuild()
