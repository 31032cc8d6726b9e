"""The console's pages: server-rendered HTML (jinja2, autoescaped), one template per page and
one for the part of it that changes (`?part=live`, which the page's script fetches every second
and puts in place without a reload).

- fleet: every Mac (memory bar, heat and GPU, models, loading progress, conditions; a click
  shows its Events and agent logs); needs list inferencenodes;
- deployments: ModelDeployments and ModelRoutes (replicas, where, Ready reasons, canary splits,
  live tokens/s and TTFT); list modeldeployments / modelroutes, per namespace;
- swaps: SwapPlans with their steps, Approve where the viewer may patch them; list swapplans;
- usage: tokens and cost per team, key and model for a month, budgets; list secrets in the
  gateway's namespace (keys are Secrets);
- keys: API keys (create, rotate, revoke), budgets and prices; the same to read, the caller's
  own rights to change;
- playground: streaming chat with one model or two side by side, TTFT and tokens/s; any login
  (the chat sends an API key the viewer pastes, only to /v1).

May import: jinja2, the standard library, admin, core (ledger). Called by: console.app.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2

from mlxfleet_gateway import __version__
from mlxfleet_gateway.admin import api, auth, keyadmin, parts, swapview, viewkit, web
from mlxfleet_gateway.core import ledger
from mlxfleet_operator.api import resources

TEMPLATES = Path(__file__).parent / "templates"
PAGES = ("fleet", "deployments", "swaps", "usage", "keys", "playground")
TITLES = {
    "fleet": "Fleet",
    "deployments": "Deployments",
    "swaps": "Swaps",
    "usage": "Usage",
    "keys": "Keys & budgets",
    "playground": "Playground",
}


def _money(value: float | None, currency: str = "") -> str:
    if value is None:
        return "-"
    text = f"{value:,.4f}" if 0 < abs(value) < 0.01 else f"{value:,.2f}"
    return f"{text} {currency}".strip()


def _num(value: float | int | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def environment() -> jinja2.Environment:
    """The templates, autoescaped, strict about names they do not get."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["bytes"] = viewkit.gib
    env.filters["money"] = _money
    env.filters["num"] = _num
    env.filters["month"] = month_label
    return env


class Pages:
    def __init__(self, p: parts.Parts, admin: api.AdminApi) -> None:
        self.p = p
        self.api = admin
        self.env = environment()

    def render(self, template: str, status: int = 200, **ctx: Any) -> web.Response:
        ctx.setdefault("version", __version__)
        return web.html_response(status, self.env.get_template(template).render(**ctx))

    def login(self, status: int, *, message: str = "") -> web.Response:
        return self.render("login.html", status, message=message, title="Log in")

    def error(self, status: int, message: str) -> web.Response:
        return self.render("error.html", status, code=status, message=message, title="Error")

    async def handle(self, req: web.Request, who: auth.Principal, *, csrf: str) -> web.Response:
        rest = req.path[len("/console/") :].strip("/")
        if req.method != "GET":
            raise web.ApiError(
                405, f"method {req.method} not allowed on {req.path}", code="method_not_allowed"
            )
        if rest.startswith("nodes/"):
            return await self.node(who, rest.split("/", 1)[1])
        if rest not in PAGES:
            raise web.not_found(f"no page {req.path}")
        ctx = await getattr(self, rest)(req, who)
        live = req.query.get("part") == "live"
        ctx.update(page=rest, title=TITLES[rest], who=who, csrf=csrf, pages=PAGES, titles=TITLES)
        return self.render(f"{rest}_live.html" if live else f"{rest}.html", **ctx)

    # ---- one context per page ---------------------------------------------------------------

    async def fleet(self, req: web.Request, who: auth.Principal) -> dict[str, Any]:
        await self.p.access.require(who, auth.Check("list", resources.INFERENCE_NODE.plural))
        nodes = self.api.nodes()
        return {"nodes": nodes, "details": who.kube}

    async def deployments(self, req: web.Request, who: auth.Principal) -> dict[str, Any]:
        deps, routes = await self.api.deployments(who)
        plans = {p.id: p for p in swapview.plans(self.p.swapplans.values())}
        return {"deployments": deps, "routes": routes, "plans": plans}

    async def swaps(self, req: web.Request, who: auth.Principal) -> dict[str, Any]:
        return {"plans": await self.api.plans(who), "kube": who.kube}

    async def usage(self, req: web.Request, who: auth.Principal) -> dict[str, Any]:
        await self.p.access.require(who, self.p.keys_check())
        figures = await self.api.usage(req.query.get("month"))
        return {"u": figures, "months": self.p.ledger.months(), "b": keyadmin.budgets_entry(self.p)}

    async def keys(self, req: web.Request, who: auth.Principal) -> dict[str, Any]:
        await self.p.access.require(who, self.p.keys_check())
        b = keyadmin.budgets_entry(self.p)
        teams = {t: v["monthlyBudget"] for t, v in b["teams"].items()}
        return {
            "keys": await keyadmin.list_keys(self.p),
            "b": b,
            "teams_json": json.dumps(teams),
            "prices_json": json.dumps(b["prices"]),
            "namespace": self.p.namespace,
        }

    async def playground(self, req: web.Request, who: auth.Principal) -> dict[str, Any]:
        return {}

    async def node(self, who: auth.Principal, name: str) -> web.Response:
        await self.p.access.require(who, auth.Check("list", resources.INFERENCE_NODE.plural))
        found = next((n for n in self.api.nodes() if n.name == name), None)
        if found is None:
            raise web.not_found(f"no InferenceNode {name}")
        events: list[dict[str, Any]] = []
        lines: list[str] = []
        problems: list[str] = []
        try:
            events = await self.api.events(who, name)
        except (auth.Denied, web.ApiError) as exc:
            problems.append(f"Events: {exc}")
        try:
            lines = await self.api.logs(who, name, 100)
        except (auth.Denied, web.ApiError) as exc:
            problems.append(f"agent logs: {exc}")
        return self.render("node.html", node=found, events=events, lines=lines, problems=problems)


def month_label(month: str) -> str:
    return ledger.month_start(month).strftime("%B %Y")
