"""HTTP wiring of the agent: the control API (FastAPI), the data plane (proxy), and `serve`.

`lifespan(settings)` is the one place the agent's runtime is built and torn down (extend it to
start more things, e.g. telemetry shipping). `serve(settings)` binds both ports, runs two uvicorn
servers in one event loop and, on SIGINT/SIGTERM, shuts down in order: stop accepting data-plane
requests and drain the in-flight ones, stop the control API, stop every backend.
May import: everything in the agent except cli. Called by: cli (`serve`), tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import json
import logging
import signal
import socket
import ssl
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
import uvicorn
from fastapi import APIRouter, FastAPI, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from mlxfleet_agent import (
    __version__,
    connlimits,
    contract,
    control,
    metrics,
    platform,
    proxy,
    router,
    shipper,
    slots,
    state,
    store,
    supervisor,
    telemetry,
)
from mlxfleet_agent import (
    settings as settings_mod,
)
from mlxfleet_agent.peers import server

log = logging.getLogger("mlxfleet_agent")
CONTROL_MAX_BODY = 1024 * 1024
SlotName = Annotated[
    str,
    Path(
        pattern=contract.DNS_LABEL.pattern,
        max_length=63,
        description="a DNS label: lowercase letters, digits and '-', at most 63",
    ),
]


@dataclass
class Runtime:
    """Everything one serving agent holds; built by `lifespan`."""

    settings: settings_mod.Settings
    manager: control.Manager
    telemetry: telemetry.Telemetry
    client: httpx.AsyncClient
    control_app: Any
    data_app: proxy.DataPlane


# ---------------------------------------------------------------------------------------------
# Logging: one JSON object per line
# ---------------------------------------------------------------------------------------------

_STD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STD_ATTRS and not key.startswith("_") and key != "color_message":
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)


# ---------------------------------------------------------------------------------------------
# Control API
# ---------------------------------------------------------------------------------------------


def _error(
    status: int, message: str, *, field: str | None = None, allowed: str | None = None
) -> JSONResponse:
    body = contract.ErrorBody(
        error=contract.ErrorDetail(field=field, message=message, allowed=allowed)
    )
    return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=status)


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "path", "query", "header")]
    return ".".join(parts) or None


def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors: list[dict[str, Any]] = [dict(e) for e in exc.errors() if isinstance(e, dict)]
    first: dict[str, Any] = errors[0] if errors else {"loc": (), "msg": "invalid", "type": ""}
    if first.get("type") == "json_invalid":
        return _error(400, f"request body is not valid JSON: {first.get('msg')}", field="body")
    ctx = first.get("ctx") or {}
    allowed = ctx.get("expected") or ctx.get("pattern")
    if first.get("type") == "extra_forbidden":
        allowed = "only the fields in the schema (see /openapi.json)"
    message = "; ".join(
        f"{_field_path(e.get('loc', ())) or 'body'}: {e.get('msg')}" for e in errors[:5]
    )
    return _error(
        422, message, field=_field_path(first.get("loc", ())), allowed=allowed and str(allowed)
    )


def _rejected(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, control.Rejected)
    return _error(exc.status, str(exc), field=exc.field, allowed=exc.allowed)


def _no_fit(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, control.NoFit)
    body = contract.InsufficientMemory(
        error=contract.ErrorDetail(field="source", message=str(exc)),
        estimate_bytes=exc.estimate,
        budget_bytes=exc.budget,
        free_bytes=exc.free,
    )
    return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=507)


def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return _error(exc.status_code, str(exc.detail))


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": contract.ErrorBody, "description": "malformed JSON"},
    401: {"model": contract.ErrorBody, "description": "missing or wrong bearer token"},
    404: {"model": contract.ErrorBody, "description": "no such slot or model"},
    409: {"model": contract.ErrorBody, "description": "conflict (served name taken, deleting)"},
    413: {"model": contract.ErrorBody, "description": "body too large"},
    422: {"model": contract.ErrorBody, "description": "invalid field (named in error.field)"},
}


def control_app(manager: control.Manager) -> FastAPI:
    """The control API: every /v1 route needs the bearer token (checked by `Guard`)."""
    app = FastAPI(
        title="mlxfleet agent control API",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(control.Rejected, _rejected)
    app.add_exception_handler(control.NoFit, _no_fit)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    bearer = HTTPBearer(auto_error=False, description="the agent's token (--token-file)")
    v1 = APIRouter(prefix=contract.API_PREFIX, dependencies=[_depends(bearer)], responses=ERRORS)

    def slot_or_404(name: str) -> slots.Slot:
        slot = manager.slots.get(name)
        if slot is None:
            raise control.Rejected(404, f"no slot named {name}", field="name")
        return slot

    @v1.get("/state", response_model=contract.AgentState)
    async def get_state() -> contract.AgentState:
        return manager.agent_state()

    @v1.put(
        "/slots/{name}",
        status_code=202,
        response_model=contract.SlotStatus,
        responses={507: {"model": contract.InsufficientMemory, "description": "does not fit"}},
    )
    async def put_slot(name: SlotName, spec: contract.SlotSpec) -> contract.SlotStatus:
        status, _changed = manager.apply(name, spec)
        return status

    @v1.get("/slots/{name}", response_model=contract.SlotStatus)
    async def get_slot(name: SlotName) -> contract.SlotStatus:
        return slot_or_404(name).status()

    @v1.delete("/slots/{name}", status_code=202, response_model=contract.SlotStatus)
    async def delete_slot(name: SlotName) -> contract.SlotStatus:
        status = manager.delete(name)
        if status is None:
            raise control.Rejected(404, f"no slot named {name}", field="name")
        return status

    @v1.get("/slots/{name}/swaps", response_model=contract.SwapList)
    async def get_swaps(name: SlotName) -> contract.SwapList:
        return contract.SwapList(items=list(slot_or_404(name).swaps))

    @v1.get("/models", response_model=contract.ModelList)
    async def list_models() -> contract.ModelList:
        return contract.ModelList(items=manager.models.cached())

    @v1.post("/models/prefetch", status_code=202, response_model=contract.CachedModel)
    async def prefetch(body: contract.PrefetchRequest) -> contract.CachedModel:
        return await manager.models.prefetch(body)

    @v1.delete("/models/{model_id}", status_code=204, response_class=Response)
    async def evict(
        model_id: Annotated[str, Path(max_length=200, pattern=r"^[A-Za-z0-9._-]+$")],
    ) -> Response:
        await manager.models.evict(model_id)
        return Response(status_code=204)

    app.include_router(v1)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _depends(bearer: HTTPBearer) -> Any:
    from fastapi import Depends

    return Depends(bearer)  # documents the scheme; Guard enforces it before any parsing


class Guard:
    """ASGI wrapper of the control app: bearer token on /v1 (constant time), body size bound."""

    def __init__(self, app: Any, *, token: str, max_body: int = CONTROL_MAX_BODY) -> None:
        self.app = app
        self.token = token.encode()
        self.max_body = max_body

    async def __call__(self, scope: proxy.Scope, receive: proxy.Receive, send: proxy.Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(contract.API_PREFIX + "/"):
            await self.app(scope, receive, send)
            return
        given = b""
        length = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                given = value
            elif name == b"content-length":
                length = value
        if not hmac.compare_digest(bearer_token(given), self.token):
            await _asgi_error(
                send,
                401,
                "missing or wrong bearer token",
                field="authorization",
                extra=[(b"www-authenticate", b"Bearer")],
            )
            return
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await _asgi_error(send, 413, f"body larger than {self.max_body} bytes", field="body")
            return
        chunks: list[bytes] = []
        seen = 0
        while True:  # control bodies are small: read them whole (bounded), then replay
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_body:
                await _asgi_error(
                    send, 413, f"body larger than {self.max_body} bytes", field="body"
                )
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> proxy.Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def bearer_token(header: bytes) -> bytes:
    """The credentials of an `Authorization: Bearer <token>` header; the scheme is matched
    case-insensitively (RFC 7235). Anything else gives b"" (never equal to a token)."""
    scheme, _, credentials = header.partition(b" ")
    if scheme.lower() != b"bearer":
        return b""
    return credentials.strip(b" \t")


async def _asgi_error(
    send: proxy.Send,
    status: int,
    message: str,
    *,
    field: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = contract.ErrorBody(error=contract.ErrorDetail(field=field, message=message))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(extra or [])],
        }
    )
    await send(
        {"type": "http.response.body", "body": body.model_dump_json(exclude_none=True).encode()}
    )


# ---------------------------------------------------------------------------------------------
# Runtime and serving
# ---------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def lifespan(cfg: settings_mod.Settings) -> AsyncIterator[Runtime]:
    """Build the agent runtime, restore persisted slots; on exit stop every backend."""
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    cfg.models_dir.mkdir(parents=True, exist_ok=True)
    killed = state.sweep_orphans(cfg.state_dir)
    if killed:
        log.warning("killed backends orphaned by a previous agent", extra={"pids": killed})
    token = cfg.read_token()
    keys = cfg.read_data_keys()
    tel, ship = shipper.build(
        state_dir=cfg.state_dir,
        node=cfg.node_name,
        interval_seconds=cfg.telemetry_interval_s,
        idle_watts=cfg.idle_power_watts,
        busy_watts=cfg.busy_power_watts,
        bucket=cfg.telemetry_bucket,
        prefix=cfg.telemetry_prefix,
        endpoint_url=cfg.telemetry_endpoint_url,
        region=cfg.telemetry_region,
    )
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=60.0),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        trust_env=False,
    )
    holder: list[control.Manager] = []
    peer_token = cfg.read_peer_token()
    model_store = store.Store(cfg.models_dir, allowed_roots=cfg.roots(), peer_token=peer_token)
    models = control.ModelsFacade(model_store)
    deps = slots.Deps(
        models=models,
        client=client,
        telemetry=tel,
        log_dir=cfg.state_dir / "logs",
        python=cfg.python or supervisor.default_python(),
        load_timeout_s=cfg.load_timeout_s,
        stop_grace_s=cfg.stop_grace_s,
        restart_backoff_max_s=cfg.restart_backoff_max_s,
        budget=lambda: holder[0].budget(),
        others_estimate=lambda name: holder[0].others_estimate(name),
        on_backends_changed=lambda: holder[0].record_backends(),
        persist=lambda: holder[0].persist(),
    )
    manager = control.Manager(
        state_dir=cfg.state_dir,
        models_dir=cfg.models_dir,
        models=models,
        deps=deps,
        queue_limit=cfg.queue_limit,
        memory_budget=cfg.memory_budget,
    )
    holder.append(manager)
    data = proxy.DataPlane(
        manager=manager,
        telemetry=tel,
        api_keys=keys,
        max_body_bytes=cfg.max_body_bytes,
        queue_timeout_s=cfg.queue_timeout_s,
    )
    runtime = Runtime(
        settings=cfg,
        manager=manager,
        telemetry=tel,
        client=client,
        control_app=server.PeerServer(
            Guard(_with_metrics(control_app(manager), tel), token=token),
            holdings=model_store,
            models_dir=cfg.models_dir,
            token=peer_token,
        ),
        data_app=data,
    )
    restored = manager.restore()
    if restored:
        log.info("restored slots", extra={"slots": restored})
    ship.start()
    caffeinate = platform.start_caffeinate() if cfg.caffeinate else None
    try:
        yield runtime
    finally:
        await manager.close()
        await asyncio.to_thread(ship.stop)
        await client.aclose()
        if caffeinate is not None:
            caffeinate.terminate()
        log.info("backends stopped")


def _with_metrics(app: FastAPI, tel: telemetry.Telemetry) -> FastAPI:
    """Prometheus `GET /metrics` on the control port (outside /v1: no token, no request text)."""
    metrics.add_route(app, tel.metrics)
    return app


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (serve() orders the shutdown itself)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(host: str, port: int, *, port_flag: str) -> socket.socket:
    """A listening socket; failures become SettingsError naming the flag, value and remedy."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the
    # socket's proto says TCP; with Nagle on, each streamed chunk waits ~40 ms for a delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise settings_mod.SettingsError(_bind_error(exc, host, port, port_flag)) from None
    sock.setblocking(False)
    return sock


def _bind_error(exc: OSError, host: str, port: int, port_flag: str) -> str:
    local = "127.0.0.1, 0.0.0.0 (every interface) or an address of this machine"
    if isinstance(exc, socket.gaierror):
        return f"--bind {host}: not an IP address or known host name ({exc.strerror}); use {local}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"--bind {host}: not an address of this machine; use {local}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{port_flag} {port}: {host}:{port} is already in use by another process; stop it, "
            "or choose another port (0 picks a free one)"
        )
    if exc.errno == errno.EACCES:
        return (
            f"{port_flag} {port}: permission denied on {host}:{port} (ports below 1024 need "
            "privileges); choose a port above 1023"
        )
    return f"--bind {host} {port_flag} {port}: cannot listen ({settings_mod.reason(exc)})"


def _server(
    app: Any,
    cfg: settings_mod.Settings,
    *,
    tls: bool,
    drain_s: float,
    max_connections: int,
    error_body: connlimits.ErrorBody,
) -> _Server:
    kwargs: dict[str, Any] = {}
    if tls:
        kwargs = {"ssl_certfile": str(cfg.tls_cert), "ssl_keyfile": str(cfg.tls_key)}
    config = uvicorn.Config(
        app,
        http=connlimits.protocol(
            max_header_bytes=cfg.max_header_bytes,
            header_timeout_s=cfg.header_timeout_s,
            max_connections=max_connections,
            error_body=error_body,
        ),
        ws="none",
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=int(max(1, drain_s)),
        timeout_keep_alive=30,
        server_header=False,
        **kwargs,
    )
    return _Server(config)


def _control_error(status: int, message: str) -> bytes:
    body = contract.ErrorBody(error=contract.ErrorDetail(field="headers", message=message))
    return body.model_dump_json(exclude_none=True).encode()


def _data_error(status: int, message: str) -> bytes:
    kind = "rate_limit_error" if status == 503 else "invalid_request_error"
    return router.RouteError(status, message, type_=kind, code="connection_refused").body()


async def serve(
    cfg: settings_mod.Settings, *, on_ready: Callable[[int, int], None] | None = None
) -> None:
    """Run the agent until SIGINT/SIGTERM; then drain, stop backends and return."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    control_sock = _bind(cfg.bind, cfg.control_port, port_flag="--control-port")
    try:
        data_sock = _bind(cfg.bind, cfg.data_port, port_flag="--data-port")
    except settings_mod.SettingsError:
        control_sock.close()
        raise
    async with lifespan(cfg) as rt:
        rt.manager.data_port = data_sock.getsockname()[1]
        control_srv = _server(
            rt.control_app,
            cfg,
            tls=cfg.tls_cert is not None,
            drain_s=5.0,
            max_connections=cfg.control_max_connections,
            error_body=_control_error,
        )
        data_srv = _server(
            rt.data_app,
            cfg,
            tls=False,
            drain_s=cfg.shutdown_drain_s,
            max_connections=cfg.max_connections,
            error_body=_data_error,
        )
        data_task = loop.create_task(data_srv.serve(sockets=[data_sock]))
        control_task = loop.create_task(control_srv.serve(sockets=[control_sock]))
        while not (control_srv.started and data_srv.started):
            if data_task.done() or control_task.done():
                break
            await asyncio.sleep(0.02)
        ports = (control_sock.getsockname()[1], data_sock.getsockname()[1])
        log.info(
            "agent ready",
            extra={
                "control_port": ports[0],
                "data_port": ports[1],
                "bind": cfg.bind,
                "tls": cfg.tls_cert is not None,
                "state_dir": str(cfg.state_dir),
            },
        )
        if on_ready is not None:
            on_ready(*ports)
        stopper = loop.create_task(stop.wait())
        await asyncio.wait({stopper, data_task, control_task}, return_when=asyncio.FIRST_COMPLETED)
        log.info("shutting down: draining the data plane")
        rt.manager.begin_shutdown()
        data_srv.should_exit = True
        await data_task
        control_srv.should_exit = True
        await control_task
        stopper.cancel()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    log.info("agent stopped")


def check_tls(cfg: settings_mod.Settings) -> None:
    """Fail early (before binding) when the TLS pair cannot be loaded; SettingsError names the
    flag, the file and what to do."""
    if cfg.tls_cert is None or cfg.tls_key is None:
        return
    off = "or leave --tls-cert and --tls-key out to serve the control API over plain HTTP"
    for flag, path in (("--tls-cert", cfg.tls_cert), ("--tls-key", cfg.tls_key)):
        if not path.is_file():
            why = "no such file" if not path.exists() else "not a regular file"
            raise settings_mod.SettingsError(f"{flag} {path}: {why}; give a PEM file, {off}")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(str(cfg.tls_cert), str(cfg.tls_key))
    except ssl.SSLError as exc:
        raise settings_mod.SettingsError(
            f"--tls-cert {cfg.tls_cert} / --tls-key {cfg.tls_key}: not a PEM certificate "
            f"(chain) and its matching private key ({exc.reason or exc}); {off}"
        ) from None
    except OSError as exc:
        raise settings_mod.SettingsError(
            f"--tls-cert {cfg.tls_cert} / --tls-key {cfg.tls_key}: cannot read "
            f"({settings_mod.reason(exc)}); {off}"
        ) from None
