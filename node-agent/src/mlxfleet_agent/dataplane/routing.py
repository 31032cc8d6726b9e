"""Data-plane routing: request `model` -> route (a slot) -> leased backend.

Pure-ish glue between the HTTP edge (app) and the slots, written against the narrow
`slots.lease` protocols: it decides which route serves a body, applies the slot's request policy
(the body's shape: `openai_body`, the `max_tokens` cap, which image URLs the backend may fetch),
waits for a lease (bounded queue) and turns every refusal into an OpenAI-shaped `errors.RouteError`.
May import: contract, mlxfleet_common.wire.openai_body, slots.lease, dataplane.errors, the standard
library. Called by: dataplane (app, relay).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from mlxfleet_agent import contract
from mlxfleet_agent.dataplane.errors import RETRY_AFTER, RouteError
from mlxfleet_agent.slots import lease as lease_
from mlxfleet_common.wire import openai_body

# fields a client must not pass through: mlx_lm would load other weights from these paths
STRIPPED_FIELDS = ("adapters", "draft_model")
IMAGE_PART_TYPES = ("image_url", "input_image", "image")  # what mlx_lm fetches (_image_url)


@dataclass(frozen=True, slots=True)
class Routed:
    route: lease_.Route
    body: dict[str, Any]
    stream: bool


def parse(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or RouteError 400."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RouteError(
            400, f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise RouteError(400, "request body must be a JSON object", code="invalid_json")
    return body


def resolve(routes: lease_.Routes, body: dict[str, Any], *, slot: str | None = None) -> Routed:
    """Which route serves this body: the slot named `slot` when given (the caller holds the
    fleet credential: the gateway names the slot, so two tenants' equal names never mix), else
    by its `model`; RouteError 400/404 otherwise, and 503 (Retry-After) for a named slot this
    agent does not have: the gateway's view is behind the slot's removal (a scale-down, a
    deployment gone to sleep), so the gateway tries elsewhere or holds the request."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RouteError(400, "`model` is required and must be a string", param="model")
    route = routes.slot_route(slot) if slot is not None else routes.route(model)
    if route is None and slot is not None:  # the gateway's view is behind a slot's removal
        raise RouteError(
            503,
            f"no slot {slot!r} on this agent",
            type_="server_error",
            code="slot_not_found",
            headers=RETRY_AFTER,
        )
    if route is None:
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
    return Routed(route=route, body=body, stream=stream)


def check_capability(spec: contract.SlotSpec, capability: str, *, path: str) -> None:
    """Refuse (400) an endpoint the slot's engine does not serve, naming what it serves."""
    if capability in spec.engine.capabilities:  # str enum members: equal to their values
        return
    serves = sorted(c.value for c in spec.engine.capabilities)
    if capability not in serves:
        raise RouteError(
            400,
            f"model `{spec.served_name}` (engine {spec.engine.name.value}) does not serve "
            f"{path}; it serves: {', '.join(serves)}",
            param="model",
            code="unsupported_endpoint",
        )


def check_body(body: dict[str, Any], spec: contract.SlotSpec, *, endpoint: str) -> None:
    """Refuse (400, naming the field) a completion body the slot's engine would choke on: the
    OpenAI shape for every engine, and what mlx-lm accepts for its slots (a malformed `stop`
    or message would kill mlx_lm's generation thread; see `openai_body`)."""
    try:
        openai_body.check(body, endpoint=endpoint)
        if spec.engine.name is contract.EngineName.MLX_LM:
            openai_body.check_mlx_lm(body, endpoint=endpoint)
    except openai_body.BodyError as exc:
        raise _refused(exc) from None


def check_token_ids(body: dict[str, Any], backend: lease_.Upstream) -> None:
    """Refuse (400) token ids beyond the leased backend's vocabulary (after `check_body`)."""
    if backend.vocab_size is None:
        return
    try:
        openai_body.check_token_ids(body, vocab_size=backend.vocab_size)
    except openai_body.BodyError as exc:
        raise _refused(exc) from None


def _refused(exc: openai_body.BodyError) -> RouteError:
    return RouteError(exc.status, str(exc), param=exc.param, code=exc.code)


def token_cap(spec: contract.SlotSpec, asked: int | None = None) -> int:
    """What one answer of the slot may generate (`contract.completion_cap`): `asked` clamped
    to `server.maxTokens`, else `contextLength`; without `asked`, `server.maxTokens`, else
    mlx_lm's default (512) within that cap (before the room its prompt leaves)."""
    return contract.completion_cap(
        asked=asked, max_tokens=spec.server.max_tokens, context_length=spec.context_length
    )


def limit_tokens(
    body: dict[str, Any], spec: contract.SlotSpec, *, prompt_tokens: int | None = None
) -> None:
    """Apply the slot's cap on generated tokens to a request body (in place).

    The cap is `token_cap`'s. A request asking for more is clamped to the cap (its answer ends
    with finish_reason "length"); a request asking for none gets `server.maxTokens` (else
    mlx_lm's default, 512, within the cap), cut to the room its prompt (`prompt_tokens`, when
    counted) leaves in `contextLength`. `max_completion_tokens` wins over `max_tokens`, as in
    mlx_lm, and is folded into `max_tokens`. A value of the wrong type is left for the backend
    to refuse (400).
    """
    asked = body.get("max_completion_tokens")
    if asked is None:
        asked = body.get("max_tokens")
    if asked is None:
        body.pop("max_completion_tokens", None)
        wanted = token_cap(spec)
        if prompt_tokens is not None:
            wanted = max(1, min(wanted, spec.context_length - prompt_tokens))
        body["max_tokens"] = wanted
        return
    if isinstance(asked, bool) or not isinstance(asked, int):
        return
    body.pop("max_completion_tokens", None)
    body["max_tokens"] = token_cap(spec, asked)


def interruptible(body: dict[str, Any], spec: contract.SlotSpec, *, streamed: bool) -> bool:
    """Whether closing the backend's connection stops this request's work at once.

    mlx_lm notices a closed connection at its next write: a streamed request of its batch (a
    keep-alive comment per prompt chunk, then each token) stops within a prefill step. A request
    it serves alone (a `seed`, the slot's `kvBits`, image parts) runs its whole prompt before its
    first write, and a whole answer (`streamed` False) writes only at its end. Other engines are
    taken at their word (they stop on a closed connection)."""
    if spec.engine.name is not contract.EngineName.MLX_LM:
        return True
    if not streamed or body.get("seed") is not None or spec.server.kv_bits is not None:
        return False
    return not _has_images(body)


def _has_images(body: dict[str, Any]) -> bool:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") in IMAGE_PART_TYPES for p in content
        ):
            return True
    return False


def check_images(body: dict[str, Any], *, allowed: Sequence[str]) -> None:
    """Refuse (400) an image part whose URL the backend would fetch, unless it is allowed.

    mlx_lm downloads every http(s) image URL of a chat request, whatever the model (server-side
    request forgery from the backend's host). `data:` URLs are always fine; other URLs only under
    one of the slot's `server.allowedImageUrls` prefixes, without '.'/'..' segments.
    """
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in IMAGE_PART_TYPES:
                continue
            key = "image_url" if "image_url" in part else "image"
            url, param = part.get(key), f"messages[{i}].content[{j}].{key}"
            if isinstance(url, dict):
                url, param = url.get("url"), param + ".url"
            if not image_url_allowed(url, allowed):
                where = ", ".join(allowed) if allowed else "none"
                raise RouteError(
                    400,
                    "image URLs must be data: URLs; this deployment lets the backend fetch only "
                    f"URLs under its spec.server.allowedImageUrls ({where})",
                    param=param,
                    code="image_url_not_allowed",
                )


def image_url_allowed(url: object, allowed: Sequence[str]) -> bool:
    if not isinstance(url, str):
        return False
    if url.startswith("data:"):
        return True
    if not url.isprintable() or " " in url or "\\" in url:
        return False
    segments = unquote(urlsplit(url).path).split("/")
    if "." in segments or ".." in segments:
        return False
    return any(url.startswith(prefix) for prefix in allowed)


async def lease(route: lease_.Route, *, timeout_s: float) -> lease_.Lease:
    """Lease the route's backend (queueing while it is not ready or at its maxConcurrency);
    RouteError 429/503 (with Retry-After) on refusal."""
    try:
        return await route.lease(timeout_s=timeout_s)
    except lease_.QueueFull as exc:
        raise RouteError(
            429, str(exc), type_="rate_limit_error", code="queue_full", headers=RETRY_AFTER
        ) from exc
    except lease_.QueueTimeout as exc:
        raise RouteError(
            503, str(exc), type_="server_error", code="queue_timeout", headers=RETRY_AFTER
        ) from exc
    except lease_.SlotUnavailable as exc:
        raise RouteError(
            503, f"model is not being served: {exc}", type_="server_error", code="unavailable"
        ) from exc
