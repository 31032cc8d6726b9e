"""The admin API, `/admin/v1/` (JSON): keys, usage, budgets, and the fleet as the console sees it.

What each endpoint needs of a Kubernetes caller (SubjectAccessReviews; an admin API key may):
- GET keys, keys/NAME, usage, budgets: list secrets in the gateway's namespace;
- POST keys, PATCH keys/NAME, POST keys/NAME/rotate, DELETE keys/NAME, PUT budgets: the write
  itself, sent as the caller (create/patch/delete secrets there; an admin key: the gateway);
- GET fleet: list inferencenodes; GET deployments: list modeldeployments and modelroutes, per
  namespace; GET swapplans: list swapplans, per namespace;
- POST swapplans/NS/NAME/approve: patch swapplans in NS (a Kubernetes identity only);
- GET nodes/NAME/events, nodes/NAME/logs: list inferencenodes, then read as the caller (the
  Events; the agent's token Secret, as `kubectl mlxfleet logs`).

Errors are `{"error": {"message", "code", "param"}}` with 400 `invalid_value`, 401
`unauthenticated`, 403 `forbidden`, 404 `not_found`, 409 `conflict`, 502/503 `kube_error`.
May import: the standard library, months, core (budgets, ledger), admin.
Called by: console.app.
"""

from __future__ import annotations

import base64
import re
from dataclasses import asdict, replace
from typing import Any

from mlxfleet_gateway.admin import (
    auth,
    deploymentview,
    keyadmin,
    kubeapi,
    nodeview,
    parts,
    swapview,
    viewkit,
    web,
)
from mlxfleet_gateway.core import budgets, ledger
from mlxfleet_operator.api import resources

PREFIX = "/admin/v1/"
MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
MAX_TAIL = 1000


def _split(path: str) -> list[str]:
    return [p for p in path[len(PREFIX) :].split("/") if p]


class AdminApi:
    def __init__(self, p: parts.Parts) -> None:
        self.p = p

    async def handle(self, req: web.Request, who: auth.Principal) -> web.Response:
        seg = _split(req.path)
        m = req.method
        p = self.p
        a = p.access
        if seg == ["keys"]:
            if m == "GET":
                await a.require(who, p.keys_check())
                return web.json_response(200, {"items": await keyadmin.list_keys(p)})
            if m == "POST":
                return web.json_response(201, await keyadmin.create(p, who, req.json()))
        elif len(seg) == 2 and seg[0] == "keys":
            name = seg[1]
            if m == "GET":
                await a.require(who, p.keys_check())
                raw = keyadmin.get_key(p, name)
                return web.json_response(200, keyadmin.entry(raw, p, keyadmin.spent_by_key(p)))
            if m == "PATCH":
                return web.json_response(200, await keyadmin.update(p, who, name, req.json()))
            if m == "DELETE":
                return web.json_response(200, await keyadmin.revoke(p, who, name))
        elif len(seg) == 3 and seg[0] == "keys" and seg[2] == "rotate":
            if m == "POST":
                return web.json_response(200, await keyadmin.rotate(p, who, seg[1]))
        elif seg == ["usage"]:
            if m == "GET":
                await a.require(who, p.keys_check())
                return web.json_response(200, await self.usage(req.query.get("month")))
        elif seg == ["budgets"]:
            if m == "GET":
                await a.require(who, p.keys_check())
                return web.json_response(200, keyadmin.budgets_entry(p))
            if m == "PUT":
                return web.json_response(200, await keyadmin.put_budgets(p, who, req.json()))
        elif seg == ["fleet"]:
            if m == "GET":
                await a.require(who, auth.Check("list", resources.INFERENCE_NODE.plural))
                return web.json_response(200, {"items": [asdict(n) for n in self.nodes()]})
        elif seg == ["deployments"]:
            if m == "GET":
                deps, routes = await self.deployments(who)
                return web.json_response(
                    200,
                    {"items": [asdict(d) for d in deps], "routes": [asdict(r) for r in routes]},
                )
        elif seg == ["swapplans"]:
            if m == "GET":
                plans = await self.plans(who)
                return web.json_response(200, {"items": [asdict(x) for x in plans]})
        elif len(seg) == 4 and seg[0] == "swapplans" and seg[3] == "approve":
            if m == "POST":
                return web.json_response(200, await self.approve(who, seg[1], seg[2]))
        elif len(seg) == 3 and seg[0] == "nodes" and seg[2] in ("events", "logs"):
            if m == "GET":
                await a.require(who, auth.Check("list", resources.INFERENCE_NODE.plural))
                if seg[2] == "events":
                    return web.json_response(200, {"items": await self.events(who, seg[1])})
                tail = _tail(req.query.get("tail"))
                return web.json_response(200, {"lines": await self.logs(who, seg[1], tail)})
        else:
            raise web.not_found(f"no admin endpoint {req.path}")
        raise web.ApiError(405, f"method {m} not allowed on {req.path}", code="method_not_allowed")

    # ---- figures -------------------------------------------------------------------------------

    async def usage(self, month: str | None) -> dict[str, Any]:
        p = self.p
        current = p.ledger.month()
        month = month or current
        if not MONTH.match(month):
            raise web.bad(f"month: {month!r} is not YYYY-MM", param="month")
        await p.ledger.read_month(month)
        rows = p.ledger.rows(month)
        b = p.view.budgets

        def table(by: ledger.GroupBy) -> list[dict[str, Any]]:
            return [
                {**asdict(r), "tokens": r.tokens, "cost": round(r.cost, 6)}
                for r in ledger.summarize(rows, b, by=by)
            ]

        spent = budgets.spend(rows, b)
        return {
            "month": month,
            "current": month == current,
            "resetsAt": ledger.next_month(month),
            "currency": b.currency,
            "replicas": 1 + len(p.ledger.peers.get(month) or {}),
            "totals": {
                "requests": sum(r.requests for r in rows),
                "promptTokens": sum(r.prompt_tokens for r in rows),
                "completionTokens": sum(r.completion_tokens for r in rows),
                "cost": round(sum(spent.keys.values()), 6),
            },
            "byTeam": table("team"),
            "byKey": table("key"),
            "byModel": table("model"),
        }

    def nodes(self) -> list[nodeview.Node]:
        p = self.p
        return nodeview.nodes(p.nodes.values(), p.view.raw["deployments"].values())

    async def deployments(
        self, who: auth.Principal
    ) -> tuple[list[deploymentview.Deployment], list[deploymentview.Route]]:
        p = self.p
        deps = list(p.view.raw["deployments"].values())
        routes = list(p.view.raw["routes"].values())
        md = await p.visible(
            who, resources.MODEL_DEPLOYMENT.plural, (viewkit.namespace_of(d) for d in deps)
        )
        mr = await p.visible(
            who, resources.MODEL_ROUTE.plural, (viewkit.namespace_of(r) for r in routes)
        )
        deps = [d for d in deps if md == parts.ALL or viewkit.namespace_of(d) in md]
        routes = [r for r in routes if mr == parts.ALL or viewkit.namespace_of(r) in mr]
        return deploymentview.deployments(deps, p.live.now), deploymentview.routes(
            routes, p.live.now
        )

    async def plans(self, who: auth.Principal) -> list[swapview.Plan]:
        p = self.p
        raw = list(p.swapplans.values())
        ok = await p.visible(
            who, resources.SWAP_PLAN.plural, (viewkit.namespace_of(x) for x in raw)
        )
        shown = swapview.plans(x for x in raw if ok == parts.ALL or viewkit.namespace_of(x) in ok)
        out = []
        for plan in shown:
            may = who.kube and await p.access.allowed(who, approve_check(plan.namespace))
            out.append(replace(plan, may_approve=may))
        return out

    # ---- acting as the caller ----------------------------------------------------------------

    async def approve(self, who: auth.Principal, namespace: str, name: str) -> dict[str, Any]:
        """`spec.paused: false` on a SwapPlan, patched with the caller's own token once a
        SubjectAccessReview said they may patch SwapPlans there."""
        p = self.p
        if not who.kube:
            raise auth.forbidden(
                "approving a SwapPlan needs a Kubernetes identity (its RBAC decides): "
                "log in with a Kubernetes token, not an API key"
            )
        await p.access.require(who, approve_check(namespace))
        if f"{namespace}/{name}" not in p.swapplans:
            raise web.not_found(f"no SwapPlan {namespace}/{name}")
        g, v = resources.GROUP, resources.VERSION
        changed = await p.write(
            who,
            "PATCH",
            kubeapi.path("apis", g, v, "namespaces", namespace, resources.SWAP_PLAN.plural, name),
            body={"spec": {"paused": False}},
            content_type="application/merge-patch+json",
        )
        p.swapplans[f"{namespace}/{name}"] = changed
        p.version += 1
        return {"name": name, "namespace": namespace, "approved": True, "by": who.name}

    async def events(self, who: auth.Principal, node: str) -> list[dict[str, Any]]:
        """The node's recent Events, read with the caller's rights (kopf posts the Events of a
        cluster-scoped object in `default`)."""
        self._kube_only(who, "the node's Events")
        selector = f"involvedObject.kind={resources.INFERENCE_NODE.kind},involvedObject.name={node}"
        params = {"fieldSelector": selector, "limit": "200"}
        try:
            reply = await self.p.kube.call("GET", "/api/v1/events", token=who.token, params=params)
            if reply.status == 403:
                reply = await self.p.kube.call(
                    "GET", "/api/v1/namespaces/default/events", token=who.token, params=params
                )
        except kubeapi.KubeUnavailable as exc:
            raise web.ApiError(
                502, f"the API server did not answer: {exc}", code="kube_error"
            ) from None
        if not reply.ok:
            raise auth.forbidden(f"the API server refused {who.name} the Events: {reply.message}")
        items = []
        for e in reply.body.get("items") or []:
            when = e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or ""
            items.append(
                {
                    "time": when,
                    "type": e.get("type"),
                    "reason": e.get("reason"),
                    "message": e.get("message"),
                    "count": e.get("count") or 1,
                }
            )
        return sorted(items, key=lambda x: str(x["time"]), reverse=True)[:30]

    async def logs(self, who: auth.Principal, node: str, tail: int) -> list[str]:
        """The agent's last log lines, as `kubectl mlxfleet logs`: its token read from the
        labelled Secret the InferenceNode names, with the caller's own rights."""
        self._kube_only(who, "agent logs")
        raw = self.p.nodes.get(f"/{node}")
        if raw is None:
            raise web.not_found(f"no InferenceNode {node}")
        agent = (raw.get("spec") or {}).get("agent") or {}
        url = str(agent.get("url") or "").rstrip("/")
        token = await self._secret_value(who, agent.get("tokenSecretRef") or {}, "token")
        ca_ref = agent.get("caSecretRef")
        ca = await self._secret_value(who, ca_ref, "ca.crt") if ca_ref else None
        try:
            r = await self.p.kube.get_url(
                url + "/v1/logs", bearer=token, ca_pem=ca, params={"tail": str(tail)}
            )
        except Exception as exc:  # any transport error reaching the Mac
            raise web.ApiError(
                502, f"{node}: {url}/v1/logs: {type(exc).__name__}: {exc}", code="agent_error"
            ) from None
        if r.status_code != 200:
            raise web.ApiError(
                502, f"{node}: the agent answered {r.status_code}", code="agent_error"
            )
        lines = r.json().get("lines") or []
        return [str(x) for x in lines]

    async def _secret_value(
        self, who: auth.Principal, ref: dict[str, Any], default_key: str
    ) -> str:
        namespace = ref.get("namespace") or resources.AGENT_SECRETS_NAMESPACE
        name, key = str(ref.get("name") or ""), str(ref.get("key") or default_key)
        try:
            reply = await self.p.kube.call(
                "GET",
                kubeapi.path("api", "v1", "namespaces", namespace, "secrets", name),
                token=who.token,
            )
        except kubeapi.KubeUnavailable as exc:
            raise web.ApiError(
                502, f"the API server did not answer: {exc}", code="kube_error"
            ) from None
        if not reply.ok:
            raise auth.forbidden(
                f"reading the agent's logs needs get secrets in {namespace} (as kubectl "
                f"mlxfleet logs): the API server refused {who.name}: {reply.message}"
            )
        labels = (reply.body.get("metadata") or {}).get("labels") or {}
        label = resources.AGENT_CREDENTIALS_LABEL
        if labels.get(label) != "true":
            raise auth.forbidden(f"Secret {namespace}/{name} is not labelled {label}=true")
        value = (reply.body.get("data") or {}).get(key)
        if value is None:
            raise web.not_found(f"Secret {namespace}/{name} has no key {key}")
        return base64.b64decode(value).decode().strip()

    @staticmethod
    def _kube_only(who: auth.Principal, what: str) -> None:
        if not who.kube:
            raise auth.forbidden(
                f"{what} are read with the caller's own Kubernetes rights: log in with a "
                "Kubernetes token"
            )


def approve_check(namespace: str) -> auth.Check:
    return auth.Check("patch", resources.SWAP_PLAN.plural, namespace=namespace)


def _tail(text: str | None) -> int:
    if text is None:
        return 100
    if not text.isdigit() or not 1 <= int(text) <= MAX_TAIL:
        raise web.bad(f"tail: a whole number from 1 to {MAX_TAIL}", param="tail")
    return int(text)
