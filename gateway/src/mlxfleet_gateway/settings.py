"""Settings of one `mlxfleet-gateway` process (from its flags; S3 credentials from the environment).

May import: pydantic, the standard library, the agent contract (fleet-key checks). Called by: cli
(builds it), server (reads it).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from mlxfleet_agent import contract

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "mlxfleet-system"
ENV_PREFIX = "MLXFLEET_TELEMETRY_"


class SettingsError(ValueError):
    """Flags that cannot run (a bad address, an unreadable key file); the message names it."""


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


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kubeconfig: str | None = None
    listen: tuple[str, int]
    metrics_listen: tuple[str, int] | None = None
    allow_anonymous: bool = False
    namespace: str = DEFAULT_NAMESPACE
    watch_namespaces: tuple[str, ...] = ()
    fleet_key: str | None = Field(default=None, repr=False)  # the current one: keys derive from it
    connect_timeout_s: float = Field(default=0.5, gt=0, le=60)
    probe_interval_s: float = Field(default=0.2, gt=0, le=60)
    probe_timeout_s: float = Field(default=0.5, gt=0, le=60)
    max_attempts: int = Field(default=3, ge=1, le=10)
    move_after_s: float = Field(default=1.0, ge=0)
    stream_cut_after_s: float = Field(default=10.0, ge=0)
    read_timeout_s: float = Field(default=600.0, gt=0)
    eject_min_s: float = Field(default=1.0, gt=0)
    affinity: bool = True
    peers: int = Field(default=1, ge=1, le=1000)
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    # the OpenAI port, before authentication (mlxfleet_common.wire.connlimits; the agent's names)
    max_header_bytes: int = Field(default=32 * 1024, ge=1024, le=1024 * 1024)
    header_timeout_s: float = Field(default=10.0, gt=0, le=600)
    body_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    max_connections: int = Field(default=4096, ge=1, le=100_000)
    drain_s: float = Field(default=30.0, ge=0)
    # requests for a sleeping deployment (the activator): queue bound per deployment, deadline
    cold_start_queue: int = Field(default=256, ge=1, le=100_000)
    cold_start_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    name: str = Field(default_factory=lambda: socket.gethostname().split(".")[0] or "gateway")
    telemetry_bucket: str | None = None
    telemetry_prefix: str = "mlxfleet-telemetry"
    telemetry_endpoint_url: str | None = None
    telemetry_region: str | None = None
    telemetry_interval_s: float = Field(default=60.0, gt=0, le=3600)
    console: bool = False  # /console/ and /admin/v1/ on the same port (docs/console.md)
    # /v1/responses conversations (previous_response_id), in this replica's memory
    responses_max_stored: int = Field(default=10_000, ge=0, le=10_000_000)
    responses_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    responses_ttl_s: float = Field(default=3600.0, gt=0)
    log_level: str = "info"
    access_log: bool = True  # one line per request (never its text): metering.ACCESS


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


def s3_credentials() -> tuple[str | None, str | None]:
    env = os.environ
    return (
        env.get(ENV_PREFIX + "ACCESS_KEY_ID") or None,
        env.get(ENV_PREFIX + "SECRET_ACCESS_KEY") or None,
    )
