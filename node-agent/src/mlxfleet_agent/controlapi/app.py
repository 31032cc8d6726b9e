"""The control API (FastAPI): desired slots, their status and swaps, the model store, the agent's
state, the node's own credentials (PUT /v1/credentials, from the operator), `/metrics` and
`/healthz`. Handlers are thin: parse (pydantic), call the registry or the
catalog, answer. Domain refusals (`refusals.Rejected`, `NoFit`) and validation errors become
`contract.ErrorBody` / `contract.InsufficientMemory` here, once. `GET /v1/logs` answers the
agent's log tail (the `log_tail` callable the composition root hands in). Every /v1 route needs
the bearer token, which `guard.Guard` checks before any parsing.
May import: fastapi/starlette, the standard library, contract, refusals, host.credentials,
models.catalog,
slots.registry, telemetry.metrics, controlapi.state. Never the data plane.
Called by: runtime (builds it, wrapped in the guard).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from mlxfleet_agent import __version__, contract, refusals
from mlxfleet_agent.controlapi import state
from mlxfleet_agent.host import credentials
from mlxfleet_agent.models import catalog
from mlxfleet_agent.slots import registry
from mlxfleet_agent.telemetry import metrics

SlotName = Annotated[
    str,
    Path(
        pattern=contract.DNS_LABEL.pattern,
        max_length=63,
        description="a DNS label: lowercase letters, digits and '-', at most 63",
    ),
]
RequestIdQuery = Annotated[
    str | None,
    Query(
        alias="requestId",
        pattern=contract.REQUEST_ID_PATTERN,
        max_length=contract.REQUEST_ID_MAX,
        description="the caller's id for the swap this PUT starts; its swap record echoes it",
    ),
]


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
    assert isinstance(exc, refusals.Rejected)
    return _error(exc.status, str(exc), field=exc.field, allowed=exc.allowed)


def _no_fit(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, refusals.NoFit)
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

MAX_LOG_TAIL = 2000


def build(
    *,
    slots: registry.Registry,
    models: catalog.Catalog,
    view: state.StateView,
    keys: credentials.NodeKeys,
    agent_metrics: metrics.AgentMetrics,
    log_tail: Callable[[int], list[str]] = lambda _count: [],
) -> FastAPI:
    """The control API: every /v1 route needs the bearer token (checked by `guard.Guard`)."""
    app = FastAPI(
        title="mlxfleet agent control API",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(refusals.Rejected, _rejected)
    app.add_exception_handler(refusals.NoFit, _no_fit)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    bearer = HTTPBearer(auto_error=False, description="the agent's token (--token-file)")
    v1 = APIRouter(prefix=contract.API_PREFIX, dependencies=[Depends(bearer)], responses=ERRORS)

    @v1.get("/state", response_model=contract.AgentState)
    async def get_state() -> contract.AgentState:
        return view.agent_state()

    @v1.put(
        "/slots/{name}",
        status_code=202,
        response_model=contract.SlotStatus,
        responses={507: {"model": contract.InsufficientMemory, "description": "does not fit"}},
    )
    async def put_slot(
        name: SlotName, spec: contract.SlotSpec, request_id: RequestIdQuery = None
    ) -> contract.SlotStatus:
        status, _changed = slots.apply(name, spec, request_id=request_id)
        return status

    @v1.get("/slots/{name}", response_model=contract.SlotStatus)
    async def get_slot(name: SlotName) -> contract.SlotStatus:
        return slots.get(name).status()

    @v1.delete("/slots/{name}", status_code=202, response_model=contract.SlotStatus)
    async def delete_slot(name: SlotName) -> contract.SlotStatus:
        return slots.delete(name)

    @v1.get("/slots/{name}/swaps", response_model=contract.SwapList)
    async def get_swaps(name: SlotName) -> contract.SwapList:
        return contract.SwapList(items=list(slots.get(name).swaps))

    @v1.put("/credentials", response_model=contract.CredentialsStatus)
    async def put_credentials(body: contract.NodeCredentials) -> contract.CredentialsStatus:
        """This node's own keys (the operator's, derived from the fleet key): the data plane
        accepts the data-plane keys from now on, the peer server checks fetch tokens with the
        peer keys. Idempotent; kept across restarts."""
        await asyncio.to_thread(keys.save, body)
        return contract.CredentialsStatus(fingerprint=keys.use(body))

    @v1.get("/models", response_model=contract.ModelList)
    async def list_models() -> contract.ModelList:
        return contract.ModelList(items=models.cached())

    @v1.post("/models/prefetch", status_code=202, response_model=contract.CachedModel)
    async def prefetch(body: contract.PrefetchRequest) -> contract.CachedModel:
        return await models.prefetch(body)

    @v1.delete("/models/{model_id}", status_code=204, response_class=Response)
    async def evict(
        model_id: Annotated[str, Path(max_length=200, pattern=r"^[A-Za-z0-9._-]+$")],
    ) -> Response:
        await models.evict(model_id)
        return Response(status_code=204)

    @v1.get("/logs")
    async def logs(
        tail: Annotated[int, Query(ge=1, le=MAX_LOG_TAIL)] = 100,
    ) -> dict[str, list[str]]:
        """The agent's last `tail` log lines (JSON lines; never request text)."""
        return {"lines": log_tail(tail)}

    app.include_router(v1)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    async def prometheus(_: Request) -> Response:
        """Prometheus exposition (outside /v1: no token; no request text in it, ever)."""
        return Response(agent_metrics.exposition(), media_type=metrics.CONTENT_TYPE)

    app.add_route("/metrics", prometheus, methods=["GET"], include_in_schema=False)

    return app
