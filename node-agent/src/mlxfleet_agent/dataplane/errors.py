"""OpenAI-shaped errors of the data plane: `{"error": {"message", "type", "param", "code"}}`.

`RouteError` is every refusal of the data plane (bad body, unknown model, queue full, backend
unreachable...), raised anywhere in it and answered once by the app with its status.
May import: the standard library. Called by: dataplane (app, routing, relay, answers), runtime
(connection-limit bodies of the data port).
"""

from __future__ import annotations

import json

RETRY_AFTER = [(b"retry-after", b"1")]


class RouteError(Exception):
    """A request the data plane refuses; carries the OpenAI-style body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.code = code
        self.param = param
        self.headers = headers or []

    def body(self) -> bytes:
        err = {"message": str(self), "type": self.type, "param": self.param, "code": self.code}
        return json.dumps({"error": err}).encode()
