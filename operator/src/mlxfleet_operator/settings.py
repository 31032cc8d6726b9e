"""Settings of one `mlxfleet-operator` process (the flags of `main`), as one frozen value.

Injected, never read from a global: `main` parses them, builds the runtime with them (handlers
read `run.rt.config`) and passes them to `handlers.registry(config)` for the timer intervals.
Each flag is declared once on its field (`Opt`, the shared mechanism mlxfleet_common.settings;
the election's on `adapters.leader.ElectionSettings`).
May import: pydantic, mlxfleet_common.settings and the standard library. Called by: main,
handlers (registration), adapters.runtime.
"""

from __future__ import annotations

import argparse
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlxfleet_common.settings import Opt

AUTOSCALER = "autoscaler (ModelDeployments with minReplicas/maxReplicas)"
NAMESPACE_DEFAULT = "$POD_NAMESPACE, the ServiceAccount's namespace in a pod, else mlxfleet-system"


class OperatorSettings(BaseModel):
    """Each field with an `Opt` is a flag of `mlxfleet-operator` (mlxfleet_common.settings)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kubeconfig: Annotated[
        str | None,
        Field(description="kubeconfig file; unset: in-cluster"),
        Opt(
            "kubeconfig file (default: in-cluster ServiceAccount, or $KUBECONFIG)",
            env="KUBECONFIG",
        ),
    ] = None
    namespaces: Annotated[
        tuple[str, ...],
        Field(description="empty: all namespaces"),
        Opt(
            "watch this namespace (repeatable)",
            flag="--namespace",
            short="-n",
            action="append",
            metavar="NAMESPACE",
            exclusive="scope",
        ),
    ] = ()
    all_namespaces: Annotated[
        bool,
        Field(description="the default: no namespaces"),
        Opt("watch every namespace (default)", short="-A", action="store_true", exclusive="scope"),
    ] = False
    standalone: Annotated[
        bool,
        Field(description="no leader election (tests, local demo; one replica)"),
        Opt(
            "one operator, no leader election (tests, local demo); never run two",
            action="store_true",
        ),
    ] = False
    provider_keys_namespace: Annotated[
        str,
        Field(
            min_length=1,
            max_length=63,
            description="where the gateway reads provider-key Secrets: ModelRoute status "
            "checks the ones external backends name there",
        ),
        Opt(
            "namespace of the provider-key Secrets ModelRoute external backends name (the "
            f"gateway's; default: {NAMESPACE_DEFAULT})"
        ),
    ] = "mlxfleet-system"
    liveness: Annotated[
        str | None,
        Field(description="e.g. http://0.0.0.0:8080/healthz"),
        Opt("liveness endpoint, e.g. http://0.0.0.0:8080/healthz"),
    ] = None
    poll_seconds: Annotated[float, Field(gt=0, le=3600), Opt("agent poll interval (default 5)")] = (
        5.0
    )
    misses: Annotated[
        int, Field(ge=1, le=100), Opt("missed polls before Ready=False (default 3)")
    ] = 3
    failover_delay: Annotated[
        float,
        Field(ge=0, le=86400),
        Opt("seconds a node may be NotReady before its replicas move (default 15)"),
    ] = 15.0
    preemption_backoff: Annotated[
        float,
        Field(
            ge=0,
            le=86400,
            description="seconds an evicted replica stays off the node it was evicted from (the "
            "first time; doubled per further eviction, up to 16x)",
        ),
        Opt(
            "seconds a replica evicted for a higher-priority deployment stays off that node "
            "(doubled for each further eviction within a while, up to 16x; default 30)"
        ),
    ] = 30.0
    capacity_stall_seconds: Annotated[
        float,
        Field(ge=0, le=86400),
        Opt(
            "seconds replicas may wait for a node that can take them before the deployment is "
            "Stalled, still WaitingForCapacity (default 120)"
        ),
    ] = 120.0
    heartbeat_write_seconds: Annotated[
        float,
        Field(ge=0, le=3600),
        Opt(
            "write an unchanged node's lastHeartbeatTime at most this often (default 60; "
            "longer above 30 nodes: heartbeats alone write at most once in 2 s)"
        ),
    ] = 60.0
    swap_prefetch: Annotated[
        bool,
        Field(
            description="copy a SwapPlan's target weights to its nodes as soon as the plan "
            "exists (off: each step's node fetches them when its step starts)"
        ),
        Opt(
            "copy a SwapPlan's new weights to all its nodes as soon as the plan exists (default "
            "on; --no-swap-prefetch: each node fetches them when its step starts, e.g. on a "
            "metered link)",
            action=argparse.BooleanOptionalAction,
        ),
    ] = True
    scale_up_window: Annotated[
        float,
        Field(ge=0, le=3600, description="seconds before a scale-up (autoscaler)"),
        Opt(
            "seconds the load must ask for more replicas before they are placed (default 5)",
            group=AUTOSCALER,
        ),
    ] = 5.0
    scale_down_window: Annotated[
        float,
        Field(ge=0, le=86400, description="seconds before a scale-down (autoscaler)"),
        Opt(
            "seconds the load must ask for fewer replicas before they go (default 120)",
            group=AUTOSCALER,
        ),
    ] = 120.0
    demand_namespace: Annotated[
        str,
        Field(
            min_length=1,
            max_length=63,
            description="where gateways write their ModelDemands (the gateway's namespace)",
        ),
        Opt(
            "namespace where gateways write their ModelDemands (requests held for sleeping "
            f"deployments; the gateway's; default: {NAMESPACE_DEFAULT})",
            group=AUTOSCALER,
        ),
    ] = "mlxfleet-system"
    fleet_key_file: Annotated[
        str | None,
        Opt(
            "the fleet key (the gateway's --fleet-key-file; one key a line, the current "
            "first): each approved node is sent its own data-plane and peer keys derived from "
            "it, and peers get fetch tokens (default: none sent; docs/install.md)"
        ),
    ] = None
    fleet_key_optional: Annotated[
        bool,
        Opt(
            "a --fleet-key-file that does not exist is not an error: no node gets keys of its "
            "own (the chart mounts the fleet-key Secret as optional)",
            action="store_true",
        ),
    ] = False
    fleet_keys: tuple[str, ...] = Field(
        default=(),
        repr=False,
        description="the fleet key(s) of --fleet-key-file (the current first): each approved "
        "node gets its own keys derived from them; empty: none are sent",
    )
    metrics_port: Annotated[
        int | None, Field(ge=0, le=65535), Opt("serve Prometheus /metrics on this port")
    ] = None
    metrics_host: Annotated[str, Opt("address of the metrics server")] = "0.0.0.0"
    agent_metrics_namespace: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=63,
            pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            description="publish each InferenceNode's agent /metrics as a scrape target (a "
            "headless Service + EndpointSlice) in this namespace; unset: not published",
        ),
        Opt(
            "publish every InferenceNode's agent /metrics as a scrape target (a headless "
            "Service and EndpointSlice per node, selected by the chart's ServiceMonitor) in "
            "this namespace, usually the operator's own (default: not published)"
        ),
    ] = None
    log_level: Annotated[str, Opt("DEBUG, INFO, WARNING")] = "INFO"

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value
