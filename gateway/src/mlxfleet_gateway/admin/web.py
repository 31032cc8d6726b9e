"""The little HTTP the console and the admin API need, on raw ASGI: a parsed request (bounded
body, cookies, query), a response with the security headers every answer carries, and errors
that name what is wrong.

Every answer: `Cache-Control: no-store`, `X-Content-Type-Options: nosniff`, `Referrer-Policy:
same-origin` (nothing leaves for other sites; the browser still names this origin in `Origin`,
which the CSRF check reads: `no-referrer` would make it `null`), `X-Frame-Options: DENY` and a
Content-Security-Policy that lets a page load only the gateway's own script and style (no
inline script, nothing from elsewhere).
May import: the standard library, mlxfleet_common.wire.openai_proxy (ASGI types, body reading).
Called by: admin.api, console.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import cookies
from typing import Any
from urllib.parse import parse_qsl

from mlxfleet_common.wire import openai_proxy as asgi

MAX_BODY = 1024 * 1024
CSP = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY = (
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", CSP),
)
JSON = "application/json"
HTML = "text/html; charset=utf-8"


class ApiError(Exception):
    """An answer other than success: status, a message naming the field or the right, a code."""

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "code": self.code, "param": self.param}}


def bad(message: str, *, param: str | None = None) -> ApiError:
    return ApiError(400, message, code="invalid_value", param=param)


def not_found(message: str) -> ApiError:
    return ApiError(404, message, code="not_found")


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names; a repeated header: the last
    cookies: dict[str, str]
    body: bytes
    secure: bool  # came over TLS (or a proxy in front says so)
    host: str

    def json(self) -> dict[str, Any]:
        try:
            value = json.loads(self.body or b"{}")
        except ValueError as exc:
            raise bad(f"the body is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise bad("the body must be a JSON object")
        return value

    def form(self) -> dict[str, str]:
        return dict(parse_qsl(self.body.decode("utf-8", "replace"), keep_blank_values=True))


async def read(scope: asgi.Scope, receive: asgi.Receive) -> Request:
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    jar: dict[str, str] = {}
    if "cookie" in headers:
        parsed = cookies.SimpleCookie()
        with contextlib.suppress(cookies.CookieError):
            parsed.load(headers["cookie"])
        jar = {k: m.value for k, m in parsed.items()}
    body = b""
    if scope["method"] in ("POST", "PUT", "PATCH", "DELETE"):
        try:
            body = await asgi.read_body(scope, receive, limit=MAX_BODY)
        except asgi.BodyTooLarge:
            raise ApiError(413, f"body above {MAX_BODY} bytes", code="body_too_large") from None
    secure = scope.get("scheme") == "https" or headers.get("x-forwarded-proto") == "https"
    query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
    return Request(
        method=scope["method"],
        path=scope["path"],
        query=query,
        headers=headers,
        cookies=jar,
        body=body,
        secure=secure,
        host=headers.get("host", ""),
    )


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def json_response(
    status: int, value: Any, headers: Mapping[bytes, bytes] | None = None
) -> Response:
    body = json.dumps(value, default=str, separators=(",", ":")).encode()
    return Response(status, body, JSON, list((headers or {}).items()))


def html_response(
    status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None
) -> Response:
    return Response(status, text.encode(), HTML, headers or [])


def redirect(location: str, headers: list[tuple[bytes, bytes]] | None = None) -> Response:
    return Response(303, b"", "text/plain", [(b"location", location.encode()), *(headers or [])])


async def send(send_fn: asgi.Send, r: Response) -> None:
    headers = [
        (b"content-type", r.content_type.encode()),
        (b"content-length", str(len(r.body)).encode()),
        *SECURITY,
        *r.headers,
    ]
    await send_fn({"type": "http.response.start", "status": r.status, "headers": headers})
    await send_fn({"type": "http.response.body", "body": r.body})
