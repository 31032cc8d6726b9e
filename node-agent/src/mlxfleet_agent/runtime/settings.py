"""Settings of one `mlxfleet-agent serve` process, each declared once: its type, default and
bounds, its flag, its config-file key and its environment variable come from one field.

A field's `Opt(...)` says how it may be given besides the config file: `Opt("help")` makes the
flag `--field-name` (or `flag=`), `env=` names an environment variable, `file=False` keeps it
out of the config file (secrets). Config-file keys are the field name in snake_case or
camelCase (`state_dir` or `stateDir`), values as on the command line; secrets are never in the
file: it names the files that hold them (`token_file`, `data_api_keys_file`), and the telemetry
keys come from the environment only. Precedence: flags, then the file, then the environment,
then the defaults. `cli` builds the `serve` flags from `flags()`.
The mechanism (Opt, flags, precedence, errors naming the source) is the shared
`mlxfleet_common.settings`; this module holds the agent's declarations.
May import: pydantic, mlxfleet_common.settings, the agent's contract and the standard library.
Called by: cli (builds it), runtime (compose, serve read it).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic.alias_generators import to_camel

from mlxfleet_agent import contract
from mlxfleet_common import settings as mechanism
from mlxfleet_common.settings import Flag, Opt, SettingsError, reason

__all__ = ["Flag", "Opt", "Settings", "SettingsError", "build", "flags", "reason"]


TELEMETRY_ENV = "MLXFLEET_TELEMETRY_"


class Settings(BaseModel):
    """Everything `serve` needs; see docs/agent.md and docs/telemetry.md for each key."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    state_dir: Annotated[Path, Opt("desired state, logs, token (required)")]
    models_dir: Annotated[Path, Opt("model cache; always an allowed file:// root (required)")]
    bind: Annotated[
        str, Opt("address of both ports (default 127.0.0.1; the LAN address in production)")
    ] = "127.0.0.1"
    control_port: Annotated[
        int, Field(ge=0, le=65535), Opt("control API port (default 8470; 0: ephemeral)")
    ] = 8470
    data_port: Annotated[
        int, Field(ge=0, le=65535), Opt("OpenAI data plane port (default 8471; 0: ephemeral)")
    ] = 8471
    token_file: Annotated[
        Path | None, Opt("control API bearer token (default: <state-dir>/token, created)")
    ] = None
    peer_token_file: Annotated[
        Path | None,
        Opt(
            "legacy shared peer token (deprecated: the operator sends each node its own peer "
            "key; give this only while older agents still use one)"
        ),
    ] = None
    metrics_token_file: Annotated[
        Path | None,
        Opt(
            "bearer token a scraper (Prometheus) reads /metrics with, and nothing else "
            "(/metrics beyond loopback needs it or the control token)"
        ),
    ] = None
    tls_cert: Annotated[Path | None, Opt("PEM certificate of the control API")] = None
    tls_key: Annotated[Path | None, Opt("PEM key of the control API")] = None
    data_api_keys_file: Annotated[
        Path | None,
        Opt("more keys the data plane accepts, one a line (besides the node's own key)"),
    ] = None
    allow_open_data_plane: Annotated[
        bool,
        Opt(
            "serve the data plane without any key on a non-loopback --bind (anyone who reaches "
            "the port may use every model; development only)",
            action="store_true",
        ),
    ] = False
    allowed_roots: Annotated[
        list[Path],
        Opt(
            "another directory file:// sources may name (repeatable)",
            flag="--allowed-root",
            action="append",
        ),
    ] = Field(default_factory=list)
    fabric_address: Annotated[
        str | None,
        Opt(
            "IPv4 address of this Mac on the network its sharded ranks use (the Thunderbolt "
            "bridge): ranks listen there only (default: --bind when it is loopback, else none: "
            "no ranks)"
        ),
    ] = None
    rank_accept_timeout_s: Annotated[
        float,
        Field(gt=0, le=3600),
        Opt(
            "seconds a rank may wait in accept for its ring peers before it is stopped (default 60)"
        ),
    ] = 60.0
    command_programs: Annotated[
        list[str],
        Opt(
            "a program the `command` engine may run, by name or absolute path (repeatable; "
            "none: the engine is off)",
            flag="--allow-command",
            action="append",
        ),
    ] = Field(default_factory=list)
    command_env: Annotated[
        list[str],
        Opt(
            "an environment variable a `command` slot may set, from the fleet's list "
            "(repeatable; default: that whole list, docs/engines.md)",
            flag="--allow-env",
            action="append",
        ),
    ] = Field(default_factory=list)
    memory_budget: Annotated[
        int | None,
        Field(ge=0, description="bytes; overrides psutil"),
        Opt("bytes slots may use (default: from psutil and sizing.budget_bytes)"),
    ] = None
    memory_pressure_file: Annotated[
        Path | None,
        Field(description="Linux PSI file; unset: none"),
        Opt(
            "Linux pressure stall file read for memory pressure (default /proc/pressure/memory; "
            "a cgroup's memory.pressure for an agent confined to one)"
        ),
    ] = Path("/proc/pressure/memory")
    thermal_files: Annotated[
        list[Path],
        Opt(
            "read heat from this file instead of the host (repeatable: one source each): a "
            "recorded output of powermetrics (text or plist), macmon pipe, nvidia-smi "
            "--format=csv or pmset -g therm, read again every sample (tests, or a root job that "
            "writes it)",
            flag="--thermal-file",
            action="append",
        ),
    ] = Field(default_factory=list)
    doctor_interval_s: Annotated[
        float,
        Field(gt=0, le=86_400),
        Opt(
            "how often the macOS doctor examines the host: pmset, fdesetup, networksetup "
            "(default 300)"
        ),
    ] = 300.0
    doctor_updates_interval_s: float = Field(
        default=21_600.0, gt=0, le=7 * 86_400, description="softwareupdate -l (slow, online)"
    )
    doctor_outputs_dir: Annotated[
        Path | None,
        Field(description="recorded doctor command outputs; unset: run the commands"),
        Opt(
            "read the doctor's command outputs from files here instead of running them "
            "(pmset-g.txt, fdesetup-status.txt, softwareupdate-l.txt, "
            "networksetup-listallhardwareports.txt, systemsetup-getrestartpowerfailure.txt; "
            "a missing file: that command is missing)"
        ),
    ] = None
    doctor_disk_min_free_bytes: int = Field(
        default=20 * 1024**3,
        ge=0,
        description="free space of the models dir below which the node reports DiskPressure",
    )
    download_max_bytes_per_s: Annotated[
        int | None,
        Field(ge=1024, description="bytes per second; unset: as fast as the network goes"),
        Opt("cap on the s3:// model download rate, bytes/s (default: none)"),
    ] = None
    python: Annotated[
        str | None,
        Field(description="interpreter that runs mlx_lm"),
        Opt("interpreter that runs mlx_lm (default: this one)"),
    ] = None
    queue_limit: Annotated[
        int,
        Field(ge=0, le=100_000),
        Opt("requests a not-ready slot queues (default 256)"),
    ] = 256
    queue_timeout_s: Annotated[
        float, Field(gt=0), Opt("longest wait in that queue (default 120)")
    ] = 120.0
    load_timeout_s: Annotated[
        float, Field(gt=0), Opt("longest load + warm-up of a backend (default 300)")
    ] = 300.0
    stop_grace_s: Annotated[
        float, Field(ge=0), Opt("SIGINT -> SIGKILL grace of a backend (default 10)")
    ] = 10.0
    health_interval_s: Annotated[
        float,
        Field(gt=0, le=3600),
        Opt("poll of a serving backend's health endpoint, mlx_lm's /health (default 2)"),
    ] = 2.0
    backend_log_max_bytes: Annotated[
        int,
        Field(ge=4096),
        Opt("size at which a backend's log is rotated, bytes (default 10 MiB)"),
    ] = 10 * 1024 * 1024
    backend_log_keep: Annotated[
        int,
        Field(ge=0, le=100),
        Opt("rotated backend logs kept per backend (default 3)"),
    ] = 3
    shutdown_drain_s: Annotated[
        float, Field(ge=0), Opt("drain of the data plane on exit (default 30)")
    ] = 30.0
    busy_after_s: Annotated[
        float,
        Field(gt=0, le=86400),
        Opt(
            "a request waiting this long for its first token makes its slot busy: not ready, "
            "out of routing until it answers (default 60)"
        ),
    ] = 60.0
    hung_up_grace_s: Annotated[
        float,
        Field(gt=0, le=3600),
        Opt(
            "how long a request whose client left may hold a backend that cannot stop it "
            "(mlx-lm mid-prompt) before that backend is restarted (default 5)"
        ),
    ] = 5.0
    max_body_bytes: Annotated[
        int, Field(ge=1024), Opt("largest data-plane request body (default 16 MiB)")
    ] = 16 * 1024 * 1024
    # both ports, before authentication (connlimits)
    max_header_bytes: Annotated[
        int,
        Field(ge=1024, le=1024 * 1024),
        Opt("largest request head on both ports (default 32 KiB): 431"),
    ] = 32 * 1024
    header_timeout_s: Annotated[
        float,
        Field(gt=0, le=600),
        Opt("time to send a whole request head, both ports (default 10): 408"),
    ] = 10.0
    body_timeout_s: Annotated[
        float,
        Field(gt=0, le=3600),
        Opt("time to send a whole request body after its head, both ports (default 60): 408"),
    ] = 60.0
    max_connections: Annotated[
        int,
        Field(ge=1, le=100_000, description="data port"),
        Opt("open connections on the data port (default 512)"),
    ] = 512
    control_max_connections: Annotated[
        int,
        Field(ge=1, le=100_000),
        Opt("open connections on the control port (default 64)"),
    ] = 64
    restart_backoff_max_s: float = Field(default=30.0, gt=0)
    log_level: Annotated[str, Opt("debug, info, warning, error (default info)")] = "info"
    caffeinate: Annotated[
        bool,
        Opt(
            "do not keep the Mac awake while serving",
            flag="--no-caffeinate",
            action="store_false",
        ),
    ] = True
    # telemetry (docs/telemetry.md); S3 credentials only from the environment (or AWS_*)
    node_name: str | None = Field(default=None, description="name in telemetry; default: host")
    telemetry_interval_s: float = Field(default=60.0, gt=0, le=3600)
    telemetry_bucket: Annotated[str | None, Opt(env=TELEMETRY_ENV + "BUCKET")] = None
    telemetry_prefix: Annotated[str | None, Opt(env=TELEMETRY_ENV + "PREFIX")] = None
    telemetry_endpoint_url: Annotated[str | None, Opt(env=TELEMETRY_ENV + "ENDPOINT_URL")] = None
    telemetry_region: Annotated[str | None, Opt(env=TELEMETRY_ENV + "REGION")] = None
    telemetry_access_key_id: Annotated[
        str | None, Opt(env=TELEMETRY_ENV + "ACCESS_KEY_ID", file=False)
    ] = None
    telemetry_secret_access_key: Annotated[
        SecretStr | None, Opt(env=TELEMETRY_ENV + "SECRET_ACCESS_KEY", file=False)
    ] = None
    telemetry_max_buffered: Annotated[
        int, Field(ge=0), Opt(env=TELEMETRY_ENV + "MAX_BUFFERED", file=False)
    ] = 10_080  # one week of 60 s intervals
    idle_power_watts: float | None = Field(default=None, ge=0, le=10_000)
    busy_power_watts: float | None = Field(default=None, ge=0, le=10_000)

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key must be given together")
        return self

    @model_validator(mode="after")
    def _fabric(self) -> Settings:
        if self.fabric_address is not None:
            try:
                ipaddress.IPv4Address(self.fabric_address)
            except ValueError:
                raise ValueError(
                    f"fabric_address {self.fabric_address!r} must be an IPv4 address (the "
                    "Mac's address on its fabric network; mlx's ring backend speaks IPv4 only)"
                ) from None
        return self

    def fabric(self) -> str | None:
        """The address ranks listen on: --fabric-address, else 127.0.0.1 for an agent on
        loopback, else None (this agent runs no rank)."""
        if self.fabric_address is not None:
            return self.fabric_address
        return "127.0.0.1" if self.loopback_only() else None

    @model_validator(mode="after")
    def _command_env(self) -> Settings:
        wider = sorted(set(self.command_env) - contract.COMMAND_ENV_NAMES)
        if wider:
            raise ValueError(
                f"allow_env {', '.join(wider)}: an agent may only narrow the fleet's list "
                f"({', '.join(sorted(contract.COMMAND_ENV_NAMES))}), since admission refuses "
                "any other name"
            )
        return self

    def command_env_names(self) -> frozenset[str]:
        """The names a `command` slot may set here: --allow-env, or the fleet's whole list."""
        return frozenset(self.command_env) or contract.COMMAND_ENV_NAMES

    def roots(self) -> list[Path]:
        """Allowed roots of file:// sources: --models-dir always, plus --allowed-root entries."""
        out = [self.models_dir.resolve()]
        out += [r.resolve() for r in self.allowed_roots if r.resolve() not in out]
        return out

    def read_token(self) -> str:
        """The control API bearer token; a fresh one is written to state_dir/token if none given.

        The generated file is created 0600 in one step (O_CREAT|O_EXCL), never readable by
        others, not even between its creation and a chmod."""
        path = self.token_file or self.state_dir / "token"
        flag = "--token-file" if self.token_file is not None else "--state-dir"
        if not path.exists():
            if self.token_file is not None:
                raise SettingsError(
                    f"--token-file {path}: the file does not exist (write the control API token "
                    "into it, or leave --token-file out to have one generated in --state-dir)"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            _create_private(path, secrets.token_urlsafe(32) + "\n")
        token = _read_text(path, flag=flag, what="the control API token").strip()
        if not token:
            raise SettingsError(f"{flag} {path}: the token file is empty (write a token into it)")
        return token

    def read_peer_token(self) -> str | None:
        """The legacy shared peer token (the same on every agent that has it: it lets agents
        read each other's models), or None: peers only by per-node fetch tokens."""
        if self.peer_token_file is None:
            return None
        path = self.peer_token_file
        token = _read_text(path, flag="--peer-token-file", what="the fleet peer token").strip()
        if len(token) < 16:
            raise SettingsError(
                f"--peer-token-file {path}: the token must be at least 16 characters "
                "(the same secret on every agent of the fleet)"
            )
        return token

    def read_metrics_token(self) -> str | None:
        """The scrape token (`/metrics` only), or None: none is set."""
        if self.metrics_token_file is None:
            return None
        path = self.metrics_token_file
        token = _read_text(path, flag="--metrics-token-file", what="the metrics scrape token")
        token = token.strip()
        if len(token) < 16:
            raise SettingsError(
                f"--metrics-token-file {path}: the token must be at least 16 characters "
                "(the bearer token Prometheus sends, as in its credentials file)"
            )
        return token

    def loopback_only(self) -> bool:
        """Whether both ports listen on a loopback address only (`--bind`)."""
        if self.bind == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.bind).is_loopback
        except ValueError:
            return False  # a host name: it may resolve anywhere

    def read_data_keys(self) -> frozenset[str] | None:
        """More keys the data plane accepts (one a line), or None: only the node's own."""
        if self.data_api_keys_file is None:
            return None
        text = _read_text(
            self.data_api_keys_file, flag="--data-api-keys-file", what="data-plane API keys"
        )
        lines = text.splitlines()
        keys = frozenset(s.strip() for s in lines if s.strip() and not s.startswith("#"))
        if not keys:
            raise SettingsError(
                f"--data-api-keys-file {self.data_api_keys_file}: the file has no keys "
                "(one key a line; lines starting with # are comments)"
            )
        return keys

    @property
    def loopback(self) -> bool:
        """Both ports listen on loopback only (--bind 127.0.0.1, ::1 or localhost)."""
        if self.bind == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.bind).is_loopback
        except ValueError:
            return False

    def may_be_open(self) -> bool:
        """The data plane may serve without a key: on loopback, or when told to."""
        return self.loopback or self.allow_open_data_plane

    def credentials_path(self) -> Path:
        """Where the node's own keys from the operator are kept."""
        return self.state_dir / "credentials.json"

    def prepare(self) -> None:
        """Start-up checks with messages naming the flag, the value and what to do: the state and
        models directories exist and are writable, the token and key files can be read."""
        for flag, path in (("--state-dir", self.state_dir), ("--models-dir", self.models_dir)):
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SettingsError(
                    f"{flag} {path}: cannot create the directory ({reason(exc)}); "
                    "choose a directory the agent's user may write"
                ) from None
            if not os.access(path, os.W_OK | os.X_OK):
                raise SettingsError(
                    f"{flag} {path}: the directory is not writable by this user; "
                    "fix its owner or permissions, or choose another directory"
                )
        self.read_token()
        self.read_peer_token()
        self.read_metrics_token()
        self.read_data_keys()


# ---- the declarations, read back (the shared mechanism, mlxfleet_common.settings) -----------


def flags() -> list[Flag]:
    """Every `serve` flag, in declaration order."""
    return mechanism.flags(Settings)


def environment() -> dict[str, str]:
    """Setting name -> the environment variable it is read from."""
    return mechanism.environment(Settings)


def build(
    *,
    file_values: Mapping[str, Any],
    flag_values: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Merge the environment, the config file and the flags (in that order, the last wins; a
    flag left unset is None and does not count, nor does an empty environment variable)."""
    return mechanism.build(
        Settings, file_values=file_values, flag_values=flag_values, environ=environ
    )


def _read_text(path: Path, *, flag: str, what: str) -> str:
    return mechanism.read_text(path, flag=flag, what=what)


def _create_private(path: Path, text: str) -> None:
    """Create `path` with mode 0600 from the start; leave it alone if it appeared meanwhile."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a YAML or JSON config file into a mapping (JSON is YAML, but report JSON errors)."""
    return mechanism.read_config_file(path, what="the agent settings (YAML or JSON)")
