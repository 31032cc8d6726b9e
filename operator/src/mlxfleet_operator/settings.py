"""Settings of one `mlxfleet-operator` process (flags of `main`, or `MLXFLEET_OPERATOR_*` env).

kopf decorators read their intervals when the handler modules are imported, so `main` calls
`configure(...)` first and imports `mlxfleet_operator.handlers` afterwards.
May import: pydantic and the standard library. Called by: main, handlers, adapters.runtime.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

ENV_PREFIX = "MLXFLEET_OPERATOR_"


class OperatorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kubeconfig: str | None = Field(default=None, description="kubeconfig file; unset: in-cluster")
    namespaces: tuple[str, ...] = Field(default=(), description="empty: all namespaces")
    standalone: bool = Field(default=False, description="no kopf peering (tests, one replica)")
    priority: int = Field(default=0, description="kopf peering priority (two replicas)")
    peering_name: str = "mlxfleet-operator"
    liveness: str | None = Field(default=None, description="e.g. http://0.0.0.0:8080/healthz")
    poll_seconds: float = Field(default=5.0, gt=0, le=3600)
    misses: int = Field(default=3, ge=1, le=100)
    failover_delay: float = Field(default=15.0, ge=0, le=86400)
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    log_level: str = "INFO"


_current: OperatorSettings | None = None


def configure(settings: OperatorSettings) -> None:
    global _current
    _current = settings


def from_env(environ: dict[str, str] | None = None) -> OperatorSettings:
    env = os.environ if environ is None else environ
    data: dict[str, object] = {}
    for field in OperatorSettings.model_fields:
        raw = env.get(ENV_PREFIX + field.upper())
        if raw is None:
            continue
        data[field] = tuple(x for x in raw.split(",") if x) if field == "namespaces" else raw
    return OperatorSettings.model_validate(data)


def current() -> OperatorSettings:
    """The configured settings, else those from the environment (`kopf run` of the handlers)."""
    global _current
    if _current is None:
        _current = from_env()
    return _current
