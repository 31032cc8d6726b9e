"""Settings of one `mlxfleet-gateway` process, each declared once with the shared mechanism
(`mlxfleet_common.settings`): its flag, its `--config` file key and its environment variable
(`KUBECONFIG`, `MLXFLEET_GATEWAY_FLEET_KEY`, the telemetry bucket's S3 credentials).

May import: pydantic, mlxfleet_common.settings, the standard library, the agent contract
(fleet-key checks). Called by: cli
(builds it), server (reads it).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr

from mlxfleet_agent import contract
from mlxfleet_common.settings import Opt, SettingsError

__all__ = ["Settings", "SettingsError", "fleet_key", "host_port", "own_namespace"]

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "mlxfleet-system"
ENV_PREFIX = "MLXFLEET_TELEMETRY_"


def host_port(text: str, *, flag: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:8080`) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise SettingsError(f"{flag} {text!r}: expected HOST:PORT, such as 0.0.0.0:8080")
    return host.strip("[]") or "0.0.0.0", int(port)


def own_namespace() -> str:
    """The namespace of the pod's ServiceAccount, else mlxfleet-system."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE


def _pair(value: object) -> object:
    """`HOST:PORT` text as (host, port); a pair passes as it is."""
    if isinstance(value, str):
        try:
            return host_port(value, flag="")
        except SettingsError:
            raise ValueError("expected HOST:PORT, such as 0.0.0.0:8080") from None
    return value


ADDRESS = BeforeValidator(_pair)


TELEMETRY = "MLXFLEET_TELEMETRY_"


class Settings(BaseModel):
    """Each field declared once: its flag, config-file key (`--config`) and environment
    variable (mlxfleet_common.settings); docs/gateway.md, "Running it", lists the flags."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kubeconfig: Annotated[
        str | None,
        Opt(
            "kubeconfig file (default: in-cluster ServiceAccount, or $KUBECONFIG)",
            env="KUBECONFIG",
        ),
    ] = None
    listen: Annotated[
        tuple[str, int],
        ADDRESS,
        Opt("HOST:PORT of the OpenAI API (port 0: any; required)"),
    ]
    metrics_listen: Annotated[
        tuple[str, int] | None,
        ADDRESS,
        Opt("HOST:PORT of /metrics and /healthz (default: off)"),
    ] = None
    allow_anonymous: Annotated[
        bool,
        Opt(
            "serve requests without a valid API key (all namespaces, no limits): local demos "
            "and tests only",
            action="store_true",
        ),
    ] = False
    namespace: Annotated[
        str,
        Opt(
            "the gateway's namespace: API-key and provider-key Secrets live here (default: "
            "the pod's, else mlxfleet-system)"
        ),
    ] = Field(default_factory=lambda: own_namespace())
    watch_namespaces: Annotated[
        tuple[str, ...],
        Opt(
            "route only to ModelDeployments/ModelRoutes of this namespace (repeatable; "
            "default: all)",
            flag="--watch-namespace",
            action="append",
            metavar="WATCH_NAMESPACE",
        ),
    ] = ()
    fleet_key_file: Annotated[
        Path | None,
        Opt(
            "the fleet key (one a line, the current first; also $MLXFLEET_GATEWAY_FLEET_KEY): "
            "never sent; each node's data plane gets its own key derived from it "
            "(docs/gateway.md)"
        ),
    ] = None
    # the current one: keys derive from it (`fleet_key` sets it from the file or the variable)
    fleet_key: Annotated[
        str | None, Opt(env="MLXFLEET_GATEWAY_FLEET_KEY", file=False), Field(repr=False)
    ] = None
    allow_open_data_plane: Annotated[
        bool,
        Opt(
            "run without a fleet key: agents get requests with no credential, so their data "
            "planes must be open (development only)",
            action="store_true",
        ),
    ] = False
    connect_timeout_s: Annotated[float, Field(gt=0, le=60), Opt("to agents (default 0.5)")] = 0.5
    probe_interval_s: Annotated[
        float, Field(gt=0, le=60), Opt("agent liveness probes (default 0.2)")
    ] = 0.2
    probe_timeout_s: Annotated[float, Field(gt=0, le=60), Opt("a probe slower than this fails")] = (
        0.5
    )
    max_attempts: Annotated[
        int, Field(ge=1, le=10), Opt("replicas tried per backend (default 3)")
    ] = 3
    move_after_s: Annotated[
        float,
        Field(ge=0),
        Opt(
            "move requests waiting for their first byte off an agent unresponsive this long "
            "(default 1)"
        ),
    ] = 1.0
    stream_cut_after_s: Annotated[
        float, Field(ge=0), Opt("cut streams of an agent unresponsive this long (default 10)")
    ] = 10.0
    read_timeout_s: Annotated[float, Field(gt=0), Opt("longest upstream silence (600)")] = 600.0
    eject_min_s: float = Field(default=1.0, gt=0)
    affinity: Annotated[
        bool,
        Opt(
            "no prefix affinity (plain least-loaded)",
            flag="--no-affinity",
            action="store_false",
        ),
    ] = True
    peers: Annotated[
        int,
        Field(ge=1, le=1000),
        Opt("gateway replicas behind the Service: each enforces limit / peers (default 1)"),
    ] = 1
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    # the OpenAI port, before authentication (mlxfleet_common.wire.connlimits; the agent's names)
    max_header_bytes: Annotated[
        int,
        Field(ge=1024, le=1024 * 1024),
        Opt("largest request head (default 32 KiB): 431"),
    ] = 32 * 1024
    header_timeout_s: Annotated[
        float,
        Field(gt=0, le=600),
        Opt("time to send a whole request head (default 10): 408"),
    ] = 10.0
    body_timeout_s: Annotated[
        float,
        Field(gt=0, le=3600),
        Opt("time to send a whole request body after its head (default 60): 408"),
    ] = 60.0
    max_connections: Annotated[
        int,
        Field(ge=1, le=100_000),
        Opt("open client connections; beyond them 503 + Retry-After (default 4096)"),
    ] = 4096
    drain_s: float = Field(default=30.0, ge=0)
    # requests for a sleeping deployment (the activator): queue bound per deployment, deadline
    cold_start_queue: Annotated[
        int,
        Field(ge=1, le=100_000),
        Opt(
            "requests held per sleeping deployment while it loads; beyond them 503 + "
            "Retry-After (default 256)"
        ),
    ] = 256
    cold_start_timeout_s: Annotated[
        float,
        Field(gt=0, le=3600),
        Opt(
            "longest wait of a held request for a sleeping deployment's replica; then 503 + "
            "Retry-After (default 120)"
        ),
    ] = 120.0
    name: Annotated[
        str,
        Field(min_length=1),
        Opt(
            "this replica's name in telemetry and its ModelDemand (default: host name, the "
            "pod's name; unique per replica)"
        ),
    ] = Field(default_factory=lambda: socket.gethostname().split(".")[0] or "gateway")
    telemetry_bucket: Annotated[
        str | None, Opt("S3/R2 bucket for per-key usage (default: off)")
    ] = None
    telemetry_prefix: Annotated[
        str, Opt("object key prefix in that bucket (default mlxfleet-telemetry)")
    ] = "mlxfleet-telemetry"
    telemetry_endpoint_url: Annotated[
        str | None, Opt("S3-compatible endpoint (R2, MinIO, ...)")
    ] = None
    telemetry_region: Annotated[str | None, Opt("the bucket's region")] = None
    telemetry_interval_s: Annotated[
        float, Field(gt=0, le=3600), Opt("seconds between uploads of usage (default 60)")
    ] = 60.0
    telemetry_access_key_id: Annotated[
        str | None, Opt(env=TELEMETRY + "ACCESS_KEY_ID", file=False), Field(repr=False)
    ] = None
    telemetry_secret_access_key: Annotated[
        SecretStr | None, Opt(env=TELEMETRY + "SECRET_ACCESS_KEY", file=False)
    ] = None
    console: Annotated[
        bool,
        Opt(
            "serve the console at /console/ and the admin API at /admin/v1/ on the same port: "
            "Kubernetes tokens (TokenReview, SubjectAccessReview) or admin-scoped API keys "
            "only; needs the console RBAC (docs/console.md)",
            action="store_true",
        ),
    ] = False
    # /v1/responses conversations (previous_response_id), in this replica's memory
    responses_max_stored: Annotated[
        int,
        Field(ge=0, le=10_000_000),
        Opt(
            "responses kept for previous_response_id (/v1/responses), in this replica's "
            "memory (default 10000)"
        ),
    ] = 10_000
    responses_max_bytes: Annotated[
        int,
        Field(ge=0),
        Opt(
            "bytes of those responses (default 64 MiB); when full, the API key holding the "
            "most loses its oldest first"
        ),
    ] = 64 * 1024 * 1024
    responses_ttl_s: Annotated[
        float, Field(gt=0), Opt("how long a stored response can be continued (default 3600)")
    ] = 3600.0
    log_level: Annotated[str, Opt("debug, info, warning, error")] = "info"
    access_log: Annotated[
        bool,
        Opt(
            "no line per request (the access log: who, which model, where, how long, tokens; "
            "never the prompt or the answer)",
            flag="--no-access-log",
            action="store_false",
        ),
    ] = True  # one line per request (never its text): metering.ACCESS


def fleet_key(path: Path | None, env_value: str | None) -> str | None:
    """The current fleet key: the first of --fleet-key-file (else of the environment variable),
    checked as the operator checks it (`contract.credentials.parse_fleet_keys`)."""
    if path is not None:
        flag = f"--fleet-key-file {path}"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise SettingsError(f"{flag}: cannot read it ({why or exc})") from exc
    elif env_value is not None:
        flag, text = "MLXFLEET_GATEWAY_FLEET_KEY", env_value
    else:
        return None
    try:
        return contract.credentials.parse_fleet_keys(text, flag=flag)[0]
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
