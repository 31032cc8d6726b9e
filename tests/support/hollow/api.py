"""The control API of a hollow node: the real agent's routes, status codes and error bodies.

Mirrors `mlxfleet_agent.app.control_app` + `Guard` (FastAPI): every `/v1/` path needs the bearer
token (401 first, then 413 for a body over 1 MiB), an unknown path is 404, a known path with
another method 405, a path parameter or body that fails validation 422 naming the field (400
for a body that is not JSON), domain refusals their own status (404/409/403/507) with an
`ErrorBody` or `InsufficientMemory` body. Successful answers are the contract models dumped the
way FastAPI does (camelCase, nulls included).
May import: the standard library, pydantic, `mlxfleet_agent.contract`, hollow.node.
Called by: hollow.server.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import unquote

from pydantic import BaseModel, StringConstraints, TypeAdapter, ValidationError

from mlxfleet_agent import contract, refusals
from tests.support.hollow import node as hnode

MAX_BODY = 1024 * 1024
SLOT_NAME = TypeAdapter(
    Annotated[str, StringConstraints(pattern=contract.DNS_LABEL.pattern, max_length=63)]
)
MODEL_ID = TypeAdapter(
    Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]+$", max_length=200)]
)
REQUEST_ID = TypeAdapter(
    Annotated[
        str,
        StringConstraints(pattern=contract.REQUEST_ID_PATTERN, max_length=contract.REQUEST_ID_MAX),
    ]
)


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[bytes, bytes]
    body: bytes
    query: dict[str, str] = field(default_factory=dict)


def _json(status: int, payload: Any) -> Response:
    return Response(status, json.dumps(payload, separators=(",", ":")).encode())


def _model(status: int, model: BaseModel) -> Response:
    return Response(status, model.model_dump_json(by_alias=True).encode())


def error(
    status: int, message: str, *, field: str | None = None, allowed: str | None = None
) -> Response:
    body = contract.ErrorBody(
        error=contract.ErrorDetail(field=field, message=message, allowed=allowed)
    )
    response = Response(status, body.model_dump_json(exclude_none=True).encode())
    if status == 401:
        response.headers.append((b"www-authenticate", b"Bearer"))
    return response


class _Invalid(Exception):
    """Validation errors in FastAPI's shape: each with `loc` (without body/path), msg, ctx."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("invalid request")
        self.errors = errors


def _validation(errors: list[dict[str, Any]]) -> Response:
    """The agent's `_validation_error`: 422 naming the first field (400 for broken JSON)."""
    first = errors[0]
    if first.get("type") == "json_invalid":
        return error(400, f"request body is not valid JSON: {first.get('msg')}", field="body")
    ctx = first.get("ctx") or {}
    allowed = ctx.get("expected") or ctx.get("pattern")
    if first.get("type") == "extra_forbidden":
        allowed = "only the fields in the schema (see /openapi.json)"

    def path(loc: Any) -> str | None:
        return ".".join(str(p) for p in loc) or None

    message = "; ".join(f"{path(e['loc']) or 'body'}: {e['msg']}" for e in errors[:5])
    return error(422, message, field=path(first["loc"]), allowed=allowed and str(allowed))


def _param(adapter: TypeAdapter[str], name: str, value: str) -> list[dict[str, Any]]:
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        return [{**e, "loc": (name, *e["loc"])} for e in exc.errors()]
    return []


def _body(request: Request, model: type[BaseModel]) -> tuple[Any, list[dict[str, Any]]]:
    """Parse and validate a JSON body as FastAPI does (JSON only with a JSON content type)."""
    data: Any = request.body
    if not request.body:
        return None, [{"type": "missing", "loc": (), "msg": "Field required", "ctx": {}}]
    ctype = request.headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    if ctype == b"application/json" or ctype.endswith(b"+json"):
        try:
            data = json.loads(request.body)
        except ValueError:
            return None, [{"type": "json_invalid", "loc": (), "msg": "JSON decode error"}]
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, [dict(e) for e in exc.errors()]


Handler = Callable[[hnode.HollowNode, Request, dict[str, str]], Awaitable[Response]]


async def _state(n: hnode.HollowNode, r: Request, p: dict[str, str]) -> Response:
    return _model(200, n.state())


def _slot_or_404(n: hnode.HollowNode, name: str) -> Any:
    slot = n.slots.get(name)
    if slot is None:
        raise refusals.Rejected(404, f"no slot named {name}", field="name")
    return slot


async def _put_slot(n: hnode.HollowNode, r: Request, p: dict[str, str]) -> Response:
    errors = _param(SLOT_NAME, "name", p["name"])
    request_id = r.query.get("requestId")  # echoed by the swap's record, as the real agent does
    if request_id is not None:
        errors += _param(REQUEST_ID, "requestId", request_id)
    spec, body_errors = _body(r, contract.SlotSpec)
    if errors or body_errors:
        raise _Invalid(errors + body_errors)
    return _model(202, n.apply(p["name"], spec, request_id=request_id))


async def _get_slot(n: hnode.HollowNode, r: Request, p: dict[str, str]) -> Response:
    if errors := _param(SLOT_NAME, "name", p["name"]):
        raise _Invalid(errors)
    return _model(200, _slot_or_404(n, p["name"]).status())


async def _delete_slot(n: hnode.HollowNode, r: Request, p: dict[str, str]) -> Response:
    if errors := _param(SLOT_NAME, "name", p["name"]):
        raise _Invalid(errors)
    status = n.delete(p["name"])
    if status is None:
        raise refusals.Rejected(404, f"no slot named {p['name']}", field="name")
    return _model(202, status)


async def _swaps(n: hnode.HollowNode, r: Request, p: dict[str, str]) -> Response:
    if errors := _param(SLOT_NAME, "name", p["name"]):
        raise _Invalid(errors)
    return _model(200, contract.SwapList(items=list(_slot_or_404(n, p["name"]).swaps)))


async def _models(n: hnode.HollowNode, r: Request, p: dict[str, str]) -> Response:
    return _model(200, contract.ModelList(items=n.cached()))


async def _prefetch(n: hnode.HollowNode, r: Request, p: dict[str, str]) -> Response:
    body, errors = _body(r, contract.PrefetchRequest)
    if errors:
        raise _Invalid(errors)
    return _model(202, await n.prefetch(body))


async def _evict(n: hnode.HollowNode, r: Request, p: dict[str, str]) -> Response:
    if errors := _param(MODEL_ID, "model_id", p["model_id"]):
        raise _Invalid(errors)
    n.evict(p["model_id"])
    return Response(204)


async def _healthz(n: hnode.HollowNode, r: Request, p: dict[str, str]) -> Response:
    return _json(200, {"status": "ok"})


ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    ("GET", re.compile(r"^/v1/state$"), _state),
    ("PUT", re.compile(r"^/v1/slots/(?P<name>[^/]+)$"), _put_slot),
    ("GET", re.compile(r"^/v1/slots/(?P<name>[^/]+)$"), _get_slot),
    ("DELETE", re.compile(r"^/v1/slots/(?P<name>[^/]+)$"), _delete_slot),
    ("GET", re.compile(r"^/v1/slots/(?P<name>[^/]+)/swaps$"), _swaps),
    ("GET", re.compile(r"^/v1/models$"), _models),
    ("POST", re.compile(r"^/v1/models/prefetch$"), _prefetch),
    ("DELETE", re.compile(r"^/v1/models/(?P<model_id>[^/]+)$"), _evict),
    ("GET", re.compile(r"^/healthz$"), _healthz),
]


def guard(request: Request, token: str) -> Response | None:
    """The agent's `Guard`: bearer token (constant time), then the body size, on /v1/ only."""
    if not request.path.startswith(contract.API_PREFIX + "/"):
        return None
    given = request.headers.get(b"authorization", b"")
    if not hmac.compare_digest(given, f"Bearer {token}".encode()):
        return error(401, "missing or wrong bearer token", field="authorization")
    length = request.headers.get(b"content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
        return error(413, f"body larger than {MAX_BODY} bytes", field="body")
    return None


async def handle(n: hnode.HollowNode, request: Request) -> Response:
    n.requests += 1
    refused = guard(request, n.cfg.token)
    if refused is not None:
        return refused
    path = unquote(request.path)
    matched = False
    for method, pattern, handler in ROUTES:
        found = pattern.match(path)
        if found is None:
            continue
        matched = True
        if method != request.method:
            continue
        try:
            return await handler(n, request, found.groupdict())
        except _Invalid as exc:
            return _validation(exc.errors)
        except refusals.Rejected as exc:
            return error(exc.status, str(exc), field=exc.field, allowed=exc.allowed)
        except refusals.NoFit as exc:
            body = contract.InsufficientMemory(
                error=contract.ErrorDetail(field="source", message=str(exc)),
                estimate_bytes=exc.estimate,
                budget_bytes=exc.budget,
                free_bytes=exc.free,
            )
            return Response(507, body.model_dump_json(exclude_none=True).encode())
    if matched:
        return error(405, "Method Not Allowed")
    return error(404, "Not Found")
