"""Settings of one `mlxfleet-agent serve` process: flags, or the same keys in a YAML/JSON file.

Flags override the file; the file overrides the defaults. Keys are snake_case or camelCase
(`state_dir` or `stateDir`), values as on the command line. Secrets are never in the file: it names
the files that hold them (`token_file`, `data_api_keys_file`).
May import: pydantic, yaml and the standard library. Called by: cli (builds it), app (reads it).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel


class SettingsError(ValueError):
    """A config file or flag combination that cannot run (missing token file, bad YAML...)."""


class Settings(BaseModel):
    """Everything `serve` needs; see docs/agent.md for each key."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    state_dir: Path
    models_dir: Path
    bind: str = "127.0.0.1"
    control_port: int = Field(default=8470, ge=0, le=65535)
    data_port: int = Field(default=8471, ge=0, le=65535)
    token_file: Path | None = None
    peer_token_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    data_api_keys_file: Path | None = None
    allowed_roots: list[Path] = Field(default_factory=list)
    memory_budget: int | None = Field(default=None, ge=0, description="bytes; overrides psutil")
    python: str | None = Field(default=None, description="interpreter that runs mlx_lm")
    queue_limit: int = Field(default=256, ge=0, le=100_000)
    queue_timeout_s: float = Field(default=120.0, gt=0)
    load_timeout_s: float = Field(default=300.0, gt=0)
    stop_grace_s: float = Field(default=10.0, ge=0)
    shutdown_drain_s: float = Field(default=30.0, ge=0)
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    # both ports, before authentication (connlimits)
    max_header_bytes: int = Field(default=32 * 1024, ge=1024, le=1024 * 1024)
    header_timeout_s: float = Field(default=10.0, gt=0, le=600)
    max_connections: int = Field(default=512, ge=1, le=100_000, description="data port")
    control_max_connections: int = Field(default=64, ge=1, le=100_000)
    restart_backoff_max_s: float = Field(default=30.0, gt=0)
    log_level: str = "info"
    caffeinate: bool = True
    # telemetry (docs/telemetry.md); S3 credentials only from MLXFLEET_TELEMETRY_* / AWS_* env
    node_name: str | None = Field(default=None, description="name in telemetry; default: host")
    telemetry_interval_s: float = Field(default=60.0, gt=0, le=3600)
    telemetry_bucket: str | None = None
    telemetry_prefix: str | None = None
    telemetry_endpoint_url: str | None = None
    telemetry_region: str | None = None
    idle_power_watts: float | None = Field(default=None, ge=0, le=10_000)
    busy_power_watts: float | None = Field(default=None, ge=0, le=10_000)

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key must be given together")
        return self

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
        """The fleet's peer token (the same on every agent: it lets agents read each other's
        models and nothing else), or None: this agent neither serves nor asks peers."""
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

    def read_data_keys(self) -> frozenset[str] | None:
        """API keys the data plane accepts (one a line), or None: the data plane is open."""
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
        self.read_data_keys()


def reason(exc: OSError) -> str:
    """An OSError as words, without its errno prefix (the caller names the path and the flag)."""
    return (exc.strerror or type(exc).__name__).lower()


def _read_text(path: Path, *, flag: str, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = reason(exc) if isinstance(exc, OSError) else "not UTF-8 text"
        raise SettingsError(
            f"{flag} {path}: not a readable file ({why}); it should hold {what} as text"
        ) from None


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
    text = _read_text(path, flag="--config", what="the agent settings (YAML or JSON)")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SettingsError(f"config file {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path} must hold a mapping")
    return data


def build(*, file_values: dict[str, Any], flag_values: dict[str, Any]) -> Settings:
    """Merge file values with flags (flags win; a flag left unset is None and does not count)."""
    merged = {to_camel(k) if "_" in k else k: v for k, v in file_values.items()}
    for key, value in flag_values.items():
        if value is not None and value != []:
            merged.pop(key, None)
            merged[to_camel(key)] = value
    try:
        return Settings.model_validate(merged)
    except ValueError as exc:
        raise SettingsError(str(exc)) from exc
