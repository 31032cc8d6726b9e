"""OpenAI-shaped errors of the gateway: `{"error": {"message", "type", "param", "code"}}`.

The shape (and its class) is the one the agent's data plane answers too
(`mlxfleet_common.wire.openai_proxy`).
May import: the standard library, mlxfleet_common.wire (openai_proxy, headers). Called by:
every gateway module that refuses a request.
"""

from __future__ import annotations

from mlxfleet_common.wire import headers as header
from mlxfleet_common.wire.openai_proxy import OpenAIError


class GatewayError(OpenAIError):
    """A request the gateway refuses or could not serve, with the status and body to send."""


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


def model_not_found(model: str) -> GatewayError:
    """404 that says nothing about models outside the caller's scope."""
    return GatewayError(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        code="model_not_found",
        param="model",
    )


def unauthorized(message: str = "missing or invalid API key") -> GatewayError:
    return GatewayError(401, message, type_="authentication_error", code="invalid_api_key")


def forbidden(model: str) -> GatewayError:
    return GatewayError(
        403,
        f"this API key may not use the model `{model}`",
        type_="permission_error",
        code="model_not_allowed",
        param="model",
    )


def rate_limited(message: str, *, retry_after_s: int, code: str) -> GatewayError:
    return GatewayError(
        429,
        message,
        type_="rate_limit_error",
        code=code,
        headers=((header.RETRY_AFTER, str(retry_after_s).encode()),),
    )


def unavailable(message: str, *, code: str = "no_backend") -> GatewayError:
    return GatewayError(503, message, type_="server_error", code=code)


def upstream_failed(message: str) -> GatewayError:
    return GatewayError(502, message, type_="server_error", code="upstream_failed")


def budget_exceeded(message: str) -> GatewayError:
    """429 for a key whose (or whose team's) monthly budget is spent: OpenAI's quota error type;
    `x-should-retry: false` tells the OpenAI SDKs not to retry it (it holds until the month ends
    or the budget is raised)."""
    return GatewayError(
        429,
        message,
        type_="insufficient_quota",
        code="budget_exceeded",
        headers=((b"x-should-retry", b"false"),),
    )
