"""Report settings: per-node cost inputs (InferenceNode `spec.cost` shape), telemetry name
aliases, reference API price, model -> namespace names, and where finished reports are delivered
(e-mail, webhook; no secret here: those come from the environment). Read from a YAML file (a
ConfigMap in the CronJobs).

`nodes` are the whole inventory when the report runs outside a cluster; with `--from-cluster`
the InferenceNodes are, and a `nodes` entry overrides single cost fields of the InferenceNode of
that name (see `inventory`). `aliases` maps a name agents ship telemetry under to the node it
belongs to (an agent whose nodeName is not its InferenceNode's name, an old name after a rename).
May import: pydantic, yaml, `api`, `core.kit.cost`, `mlxfleet_agent.contract`. Called by: cli,
inventory.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from mlxfleet_agent import contract
from mlxfleet_operator.api import inferencenode
from mlxfleet_operator.core.kit import cost


class ConfigError(ValueError):
    """A report config that cannot be used; the message names the file, the field and why."""


class ReferenceSpec(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_by_name=True, validate_by_alias=True)

    name: str = "reference API"
    input_usd_per_million: float = Field(alias="inputUSDPerMillion", ge=0)
    output_usd_per_million: float = Field(alias="outputUSDPerMillion", ge=0)
    provider: str | None = None  # whose list prices: the PDF names it
    as_of: date | None = Field(default=None, alias="asOf")  # when they were read


ADDRESS = re.compile(r"^[^@\s<>,;\"]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")
SMTP_PORTS = {"starttls": 587, "tls": 465}


class EmailSpec(BaseModel):
    """E-mail delivery: an SMTP server reached with TLS (STARTTLS on 587, or TLS from the first
    byte on 465; never in clear), its login from MLXFLEET_SMTP_USERNAME/PASSWORD (a Secret)."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)

    to: list[str] = Field(min_length=1, max_length=100)
    sender: str = Field(alias="from")
    smtp_host: str = Field(alias="smtpHost", min_length=1, max_length=253)
    smtp_port: int | None = Field(default=None, alias="smtpPort", ge=1, le=65535)
    security: Literal["starttls", "tls"] = "starttls"
    ca_file: Path | None = Field(
        default=None, alias="caFile", description="CA bundle for a private SMTP server"
    )
    subject_prefix: str = Field(default="[mlxfleet]", alias="subjectPrefix", max_length=100)

    @field_validator("to")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        for i, address in enumerate(value):
            if not ADDRESS.match(address):
                raise ValueError(f"to[{i}]: {address!r} is not an e-mail address")
        return value

    @field_validator("sender")
    @classmethod
    def _sender(cls, value: str) -> str:
        if not ADDRESS.match(value):
            raise ValueError(f"{value!r} is not an e-mail address")
        return value

    @property
    def port(self) -> int:
        return self.smtp_port or SMTP_PORTS[self.security]


class WebhookSpec(BaseModel):
    """A Slack-compatible incoming webhook (POST {"text": summary}); its URL, a credential, comes
    from MLXFLEET_REPORT_WEBHOOK_URL (a Secret)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True


class DeliverySpec(BaseModel):
    """Where finished reports go, how often a failed send is tried, where the outcome is pushed."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)

    email: EmailSpec | None = None
    webhook: WebhookSpec | None = None
    attempts: int = Field(default=3, ge=1, le=10)
    backoff_seconds: float = Field(default=30.0, alias="backoffSeconds", ge=0, le=3600)
    pushgateway: str | None = Field(
        default=None,
        description="Prometheus Pushgateway URL for mlxfleet_report_delivery_* (the alert)",
    )

    @model_validator(mode="after")
    def _something(self) -> DeliverySpec:
        if self.email is None and self.webhook is None:
            raise ValueError("give email, webhook or both (or leave delivery out)")
        return self

    @field_validator("pushgateway")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value


class ReportConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    nodes: dict[str, inferencenode.Cost] = Field(default_factory=dict)
    aliases: dict[str, str] = Field(default_factory=dict)
    reference: ReferenceSpec | None = None
    namespaces: dict[str, str] = Field(default_factory=dict)
    delivery: DeliverySpec | None = None

    @field_validator("aliases")
    @classmethod
    def _aliases_name_other_nodes(cls, value: dict[str, str]) -> dict[str, str]:
        for telemetry_name, node in value.items():
            if not contract.TELEMETRY_NODE.match(node):
                raise ValueError(
                    f"aliases.{telemetry_name}: {node!r} is not a node name "
                    "(letters, digits, '.', '_', '-'; at most 253)"
                )
            if node == telemetry_name:
                raise ValueError(f"aliases.{telemetry_name}: maps the name to itself")
        return value

    @classmethod
    def from_yaml(cls, text: str, *, origin: str = "report config") -> ReportConfig:
        """Parse and validate; every problem becomes one ConfigError naming the field."""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{origin}: not valid YAML: {exc}") from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"{origin}: must be a mapping with keys nodes, aliases, reference, namespaces, "
                "delivery; "
                f"got {type(data).__name__}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ConfigError(f"{origin}: {problems}") from exc

    @classmethod
    def from_file(cls, path: Path | None) -> ReportConfig:
        if path is None:
            return cls()
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"report config {path}: {exc.strerror or exc}") from exc
        return cls.from_yaml(text, origin=f"report config {path}")

    def reference_price(self) -> cost.ReferencePrice | None:
        r = self.reference
        if r is None:
            return None
        return cost.ReferencePrice(
            r.name,
            r.input_usd_per_million,
            r.output_usd_per_million,
            provider=r.provider,
            as_of=r.as_of.isoformat() if r.as_of else None,
        )
