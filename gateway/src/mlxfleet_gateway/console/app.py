"""The console (`/console/`) and the admin API (`/admin/v1/`) as one ASGI app, mounted by the
proxy for the paths it does not serve itself (`--console`): nothing runs on a `/v1` request.

Every page and endpoint needs a credential: `Authorization: Bearer <Kubernetes token or admin
API key>`, or the session cookie the login form sets (admin.session); without one a page answers
401 with the login form, an endpoint 401 JSON, and an API key without the admin scope 403.
`--allow-anonymous` opens nothing here. Requests that change something and come with the cookie
must carry its CSRF token and, when the browser sends an Origin, come from this host. Only the
static files (the script and the style sheet, no data) and the login form itself are open.
`build` makes it from the gateway's parts; `start`/`stop` run its live-rates sampler and close its
API-server connections.
May import: the standard library, kubernetes (the client the watches use), view, months,
metrics, core, admin, console.pages. Called by: server (mounted through the proxy).
"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes

from mlxfleet_common.wire import openai_proxy as asgi
from mlxfleet_gateway import metrics, months, view
from mlxfleet_gateway.admin import api, auth, kubeapi, live, parts, session, web
from mlxfleet_gateway.console import pages
from mlxfleet_gateway.core import budgets, keys

log = logging.getLogger("mlxfleet_gateway.console")
STATIC = Path(__file__).parent / "static"
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
HOME = "/console/fleet"


class Console:
    prefixes: tuple[str, ...] = ("/console", "/admin/")

    def __init__(self, p: parts.Parts, sessions: session.Sessions) -> None:
        self.p = p
        self.sessions = sessions
        self.api = api.AdminApi(p)
        self.pages = pages.Pages(p, self.api)
        self._static = {
            f.name: (f.read_bytes(), STATIC_TYPES[f.suffix])
            for f in STATIC.iterdir()
            if f.suffix in STATIC_TYPES
        }

    async def __call__(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        admin = scope["path"].startswith(api.PREFIX)
        try:
            req = await web.read(scope, receive)
            r = await self._route(req, admin=admin)
        except auth.Denied as exc:
            r = self._denied(exc, admin=admin, scope=scope)
        except web.ApiError as exc:
            r = (
                web.json_response(exc.status, exc.body())
                if admin
                else self.pages.error(exc.status, str(exc))
            )
        except asgi.ClientGone:
            return
        except Exception:  # never a bare 500 without a word in the log
            log.exception("console error", extra={"path": scope["path"]})
            err = web.ApiError(500, "internal error (see the gateway's log)", code="internal")
            r = web.json_response(500, err.body()) if admin else self.pages.error(500, str(err))
        await web.send(send, r)

    def _denied(self, exc: auth.Denied, *, admin: bool, scope: asgi.Scope) -> web.Response:
        if admin:
            headers = (
                {b"www-authenticate": b'Bearer realm="mlxfleet"'} if exc.status == 401 else None
            )
            return web.json_response(
                exc.status,
                {"error": {"message": str(exc), "code": exc.code, "param": None}},
                headers,
            )
        if exc.status == 401:
            return self.pages.login(401, message=str(exc) if scope.get("method") == "POST" else "")
        return self.pages.error(exc.status, str(exc))

    async def _route(self, req: web.Request, *, admin: bool) -> web.Response:
        path = req.path
        if path in ("/console", "/console/"):
            return web.redirect(HOME)
        if path.startswith("/console/static/") and req.method == "GET":
            found = self._static.get(path.rsplit("/", 1)[1])
            if found is None:
                raise web.not_found(f"no file {path}")
            return web.Response(200, found[0], found[1])
        if path == "/console/login":
            if req.method == "POST":
                return await self._login(req)
            return self.pages.login(200)
        who, sess = await self._who(req)
        if req.method in CHANGES and sess is not None:
            self._check_csrf(req, sess)
        if path == "/console/logout" and req.method == "POST":
            return web.redirect(
                "/console/login", [(b"set-cookie", self.sessions.clear_cookie(secure=req.secure))]
            )
        if admin:
            return await self.api.handle(req, who)
        return await self.pages.handle(req, who, csrf=sess.csrf if sess else "")

    async def _who(self, req: web.Request) -> tuple[auth.Principal, session.Session | None]:
        """The caller, from the Authorization header, else from the session cookie."""
        header = req.headers.get("authorization")
        if header is not None:
            return await self.p.access.principal(auth.bearer(header)), None
        sess = self.sessions.open(req.cookies.get(session.COOKIE))
        if sess is None:
            raise auth.unauthenticated()
        if sess.kind == auth.KEY:
            return self.p.access.key_principal(sess.credential), sess
        return await self.p.access.principal(sess.credential), sess

    def _check_csrf(self, req: web.Request, sess: session.Session) -> None:
        origin = req.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != req.host:
            raise auth.Denied(403, f"cross-site request from {origin} refused", code="csrf_failed")
        offered = req.headers.get("x-csrf-token")
        if offered is None and req.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"
        ):
            offered = req.form().get("csrf")
        if not sess.csrf_ok(offered):
            raise auth.Denied(403, "missing or wrong CSRF token (X-CSRF-Token)", code="csrf_failed")

    async def _login(self, req: web.Request) -> web.Response:
        origin = req.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != req.host:
            raise auth.Denied(403, f"cross-site login from {origin} refused", code="csrf_failed")
        credential = req.form().get("credential", "").strip()
        if not credential:
            return self.pages.login(401, message="paste a Kubernetes token or an admin API key")
        who = await self.p.access.principal(credential)
        if who.kube:
            sess = self.sessions.new(auth.KUBE, credential)
        else:
            sess = self.sessions.new(auth.KEY, keys.hash_key(credential))
        log.info("console login", extra={"who": who.name, "kind": who.kind})
        cookie = self.sessions.set_cookie(sess, secure=req.secure)
        return web.redirect(HOME, [(b"set-cookie", cookie)])

    def start(self) -> None:
        self.p.live.start()

    async def stop(self) -> None:
        await self.p.live.stop()
        await self.p.kube.aclose()


def build(
    *,
    state: view.View,
    api_client: kubernetes.client.ApiClient,
    ledger: months.MonthLedger,
    gate: budgets.Gate,
    gauges: metrics.GatewayMetrics,
    namespace: str,
    fleet_key: str | None,
) -> Console:
    kube = kubeapi.KubeApi(api_client)
    p = parts.Parts(
        view=state,
        kube=kube,
        access=auth.Authenticator(kube, state),
        ledger=ledger,
        gate=gate,
        live=live.LiveRates(gauges),
        namespace=namespace,
    )
    return Console(p, session.Sessions(session.session_key(fleet_key)))
