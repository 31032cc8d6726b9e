"""Settings of one `mlxfleet-operator` process (the flags of `main`), as one frozen value.

Injected, never read from a global: `main` parses them, builds the runtime with them (handlers
read `run.rt.config`) and passes them to `handlers.registry(config)` for the timer intervals.
May import: pydantic and the standard library. Called by: main, handlers (registration),
adapters.runtime.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class OperatorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kubeconfig: str | None = Field(default=None, description="kubeconfig file; unset: in-cluster")
    namespaces: tuple[str, ...] = Field(default=(), description="empty: all namespaces")
    standalone: bool = Field(
        default=False, description="no leader election (tests, local demo; one replica)"
    )
    liveness: str | None = Field(default=None, description="e.g. http://0.0.0.0:8080/healthz")
    poll_seconds: float = Field(default=5.0, gt=0, le=3600)
    misses: int = Field(default=3, ge=1, le=100)
    failover_delay: float = Field(default=15.0, ge=0, le=86400)
    preemption_backoff: float = Field(
        default=30.0,
        ge=0,
        le=86400,
        description="seconds an evicted replica stays off the node it was evicted from (the "
        "first time; doubled per further eviction, up to 16x)",
    )
    capacity_stall_seconds: float = Field(default=120.0, ge=0, le=86400)
    heartbeat_write_seconds: float = Field(default=60.0, ge=0, le=3600)
    swap_prefetch: bool = Field(
        default=True,
        description="copy a SwapPlan's target weights to its nodes as soon as the plan exists "
        "(off: each step's node fetches them when its step starts)",
    )
    provider_keys_namespace: str = Field(
        default="mlxfleet-system",
        min_length=1,
        max_length=63,
        description="where the gateway reads provider-key Secrets: ModelRoute status checks "
        "the ones external backends name there",
    )
    scale_up_window: float = Field(
        default=5.0, ge=0, le=3600, description="seconds before a scale-up (autoscaler)"
    )
    scale_down_window: float = Field(
        default=120.0, ge=0, le=86400, description="seconds before a scale-down (autoscaler)"
    )
    demand_namespace: str = Field(
        default="mlxfleet-system",
        min_length=1,
        max_length=63,
        description="where gateways write their ModelDemands (the gateway's namespace)",
    )
    fleet_keys: tuple[str, ...] = Field(
        default=(),
        repr=False,
        description="the fleet key(s) of --fleet-key-file (the current first): each approved "
        "node gets its own keys derived from them; empty: none are sent",
    )
    agent_metrics_namespace: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="publish each InferenceNode's agent /metrics as a scrape target (a headless "
        "Service + EndpointSlice) in this namespace; unset: not published",
    )
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    log_level: str = "INFO"
