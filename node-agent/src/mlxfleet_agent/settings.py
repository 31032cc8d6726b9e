"""Settings of one `mlxfleet-agent serve` process: flags, or the same keys in a YAML/JSON file.

Flags override the file; the file overrides the defaults. Keys are snake_case or camelCase
(`state_dir` or `stateDir`), values as on the command line. Secrets are never in the file: it names
the files that hold them (`token_file`, `data_api_keys_file`).
May import: pydantic, yaml and the standard library. Called by: cli (builds it), app (reads it).
"""

from __future__ import annotations

import json
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
        """The control API bearer token; a fresh one is written to state_dir/token if none given."""
        path = self.token_file or self.state_dir / "token"
        if not path.exists():
            if self.token_file is not None:
                raise SettingsError(f"token_file {path} does not exist")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(32) + "\n")
            path.chmod(0o600)
        token = path.read_text().strip()
        if not token:
            raise SettingsError(f"token_file {path} is empty")
        return token

    def read_data_keys(self) -> frozenset[str] | None:
        """API keys the data plane accepts (one a line), or None: the data plane is open."""
        if self.data_api_keys_file is None:
            return None
        lines = self.data_api_keys_file.read_text().splitlines()
        keys = frozenset(s.strip() for s in lines if s.strip() and not s.startswith("#"))
        if not keys:
            raise SettingsError(f"data_api_keys_file {self.data_api_keys_file} has no keys")
        return keys


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a YAML or JSON config file into a mapping (JSON is YAML, but report JSON errors)."""
    text = path.read_text()
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
