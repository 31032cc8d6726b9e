"""Data-plane routing: request `model` -> slot -> leased backend, and OpenAI-style error bodies.

Pure-ish glue between the HTTP edge (proxy) and the slots: it decides which slot serves a body,
waits for a lease (bounded queue) and turns every refusal into the error shape OpenAI clients
understand (`{"error": {"message", "type", "param", "code"}}`).
May import: slots, control (lookup), the standard library. Called by: proxy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mlxfleet_agent import control, slots

# fields a client must not pass through: mlx_lm would load other weights from these paths
STRIPPED_FIELDS = ("adapters", "draft_model")


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
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.code = code
        self.param = param

    def body(self) -> bytes:
        err = {"message": str(self), "type": self.type, "param": self.param, "code": self.code}
        return json.dumps({"error": err}).encode()


@dataclass(frozen=True, slots=True)
class Routed:
    slot: slots.Slot
    body: dict[str, Any]
    stream: bool


def parse(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or RouteError 400."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RouteError(
            400, f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise RouteError(400, "request body must be a JSON object", code="invalid_json")
    return body


def resolve(manager: control.Manager, body: dict[str, Any]) -> Routed:
    """Which slot serves this body (by its `model`); RouteError 400/404 otherwise."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RouteError(400, "`model` is required and must be a string", param="model")
    slot = manager.route(model)
    if slot is None:
        raise RouteError(
            404,
            f"The model `{model}` does not exist or you do not have access to it.",
            code="model_not_found",
            param="model",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RouteError(400, "`stream` must be a boolean", param="stream")
    for name in STRIPPED_FIELDS:
        body.pop(name, None)
    return Routed(slot=slot, body=body, stream=stream)


async def lease(slot: slots.Slot, *, timeout_s: float) -> slots.Lease:
    """Lease the slot's backend (queueing while it is not ready); RouteError 429/503 on refusal."""
    try:
        return await slot.acquire(timeout_s=timeout_s)
    except slots.QueueFull as exc:
        raise RouteError(429, str(exc), type_="rate_limit_error", code="queue_full") from exc
    except slots.QueueTimeout as exc:
        raise RouteError(503, str(exc), type_="server_error", code="queue_timeout") from exc
    except slots.SlotUnavailable as exc:
        raise RouteError(
            503, f"model is not being served: {exc}", type_="server_error", code="unavailable"
        ) from exc
