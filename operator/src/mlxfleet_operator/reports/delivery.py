"""Delivering finished reports: by e-mail (SMTP over TLS, login from a Secret, the PDF or HTML
attached) and to a Slack-compatible webhook (the summary), each channel tried `attempts` times
with exponential back-off.

A report is delivered only after it was written to the bucket, so a failed delivery never loses
it. What happened to each channel (state, attempts, last error, when) is recorded next to the
report (`<prefix>/reports/<stem>.delivery.json`): a later run, the Job's own retry or `mlxfleet
report deliver STEM`, sends only what was not delivered yet and never sends twice. The outcome is
pushed to a Prometheus Pushgateway when one is configured (`mlxfleet_report_delivery_failed`,
`..._attempts`, `..._last_success_timestamp_seconds`, grouped by `report`: the
MlxfleetReportDeliveryFailed alert). Errors never carry the webhook URL (it is a credential).
May import: the standard library, httpx, prometheus_client, pydantic, `reports.config`,
`adapters.objectstore`. Called by: reports.cli.
"""

from __future__ import annotations

import logging
import os
import smtplib
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Literal, Protocol

import httpx
import prometheus_client
from pydantic import BaseModel, ConfigDict, Field

from mlxfleet_operator.adapters import objectstore
from mlxfleet_operator.reports import config

log = logging.getLogger("mlxfleet_operator.reports.delivery")

TEXT = "text/plain; charset=utf-8"
SMTP_USERNAME_ENV = "MLXFLEET_SMTP_USERNAME"
SMTP_PASSWORD_ENV = "MLXFLEET_SMTP_PASSWORD"  # noqa: S105 - the variable's name, not a secret
WEBHOOK_URL_ENV = "MLXFLEET_REPORT_WEBHOOK_URL"
PUSH_JOB = "mlxfleet-reports"
TIMEOUT_S = 30.0


def summary_name(stem: str) -> str:
    return f"{stem}.summary.txt"


def record_name(stem: str) -> str:
    return f"{stem}.delivery.json"


class DeliveryError(Exception):
    """One attempt on one channel failed; the message says why (never the webhook URL)."""


@dataclass(frozen=True)
class Report:
    """A finished report: its files by name (body, content type), as rendered or as stored."""

    stem: str  # weekly-2026-W42, monthly-2026-05
    files: Mapping[str, tuple[bytes, str]]

    @property
    def kind(self) -> str:
        return self.stem.split("-", 1)[0]

    @property
    def summary(self) -> str:
        return self.files[summary_name(self.stem)][0].decode()

    def attachments(self) -> list[tuple[str, bytes, str]]:
        """The monthly PDF; the weekly HTML (the e-mail's body is the summary)."""
        wanted = f"{self.stem}.pdf" if self.kind == "monthly" else f"{self.stem}.html"
        data, content_type = self.files[wanted]
        return [(wanted, data, content_type)]

    @staticmethod
    def names(stem: str) -> list[str]:
        """The files a delivery of `stem` needs."""
        main = f"{stem}.pdf" if stem.startswith("monthly-") else f"{stem}.html"
        return [summary_name(stem), main]


class ChannelState(BaseModel):
    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    state: Literal["pending", "delivered", "failed"] = "pending"
    attempts: int = 0
    last_error: str | None = Field(default=None, alias="lastError")
    last_attempt_at: datetime | None = Field(default=None, alias="lastAttemptAt")
    delivered_at: datetime | None = Field(default=None, alias="deliveredAt")


class Record(BaseModel):
    """What happened to one report's delivery, channel by channel."""

    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    report: str
    channels: dict[str, ChannelState] = Field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return sorted(n for n, c in self.channels.items() if c.state != "delivered")


class Channel(Protocol):
    name: str

    def send(self, report: Report) -> None:
        """Deliver once; raise DeliveryError when it did not work."""
        ...


class Email:
    """SMTP with STARTTLS (or TLS from the first byte), verified against the system's CAs or
    `caFile`; the login, when given, only ever over that TLS."""

    name = "email"

    def __init__(
        self, spec: config.EmailSpec, *, username: str | None, password: str | None
    ) -> None:
        self.spec = spec
        self.username = username
        self.password = password

    def message(self, report: Report) -> EmailMessage:
        msg = EmailMessage()
        title = report.summary.splitlines()[0] if report.summary else report.stem
        msg["Subject"] = f"{self.spec.subject_prefix} {title}".strip()
        msg["From"] = self.spec.sender
        msg["To"] = ", ".join(self.spec.to)
        msg["Date"] = formatdate(localtime=False)
        msg["Message-ID"] = make_msgid(domain=self.spec.sender.rsplit("@", 1)[1])
        msg.set_content(report.summary + "\n\nThe full report is attached.\n")
        for name, data, content_type in report.attachments():
            main, sub = content_type.split(";")[0].split("/")
            msg.add_attachment(data, maintype=main, subtype=sub, filename=name)
        return msg

    def send(self, report: Report) -> None:
        spec = self.spec
        context = ssl.create_default_context(cafile=str(spec.ca_file) if spec.ca_file else None)
        where = f"smtp {spec.smtp_host}:{spec.port}"
        try:
            smtp: smtplib.SMTP
            if spec.security == "tls":
                smtp = smtplib.SMTP_SSL(
                    spec.smtp_host, spec.port, timeout=TIMEOUT_S, context=context
                )
            else:
                smtp = smtplib.SMTP(spec.smtp_host, spec.port, timeout=TIMEOUT_S)
            with smtp:
                if spec.security == "starttls":
                    smtp.starttls(context=context)  # refuses to go on in clear
                if self.username:
                    smtp.login(self.username, self.password or "")
                refused = smtp.send_message(self.message(report))
        except smtplib.SMTPResponseException as exc:
            raw = exc.smtp_error
            text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw or "")
            raise DeliveryError(f"{where}: {exc.smtp_code} {text}".strip()) from exc
        except smtplib.SMTPRecipientsRefused as exc:
            raise DeliveryError(
                f"{where}: every recipient refused: {sorted(exc.recipients)}"
            ) from exc
        except (smtplib.SMTPException, ssl.SSLError, OSError) as exc:
            raise DeliveryError(f"{where}: {type(exc).__name__}: {exc}") from exc
        if refused:
            raise DeliveryError(f"{where}: recipients refused: {sorted(refused)}")


class Webhook:
    """A Slack-compatible incoming webhook: POST {"text": summary} as JSON, 2xx is delivered."""

    name = "webhook"

    def __init__(self, url: str, *, client: httpx.Client | None = None) -> None:
        self.url = url
        self.client = client

    def send(self, report: Report) -> None:
        try:
            if self.client is not None:
                answer = self.client.post(self.url, json={"text": report.summary})
            else:
                answer = httpx.post(self.url, json={"text": report.summary}, timeout=TIMEOUT_S)
        except httpx.HTTPError as exc:  # its text names no URL; the URL is the credential
            raise DeliveryError(f"webhook: {type(exc).__name__}") from exc
        if not answer.is_success:
            raise DeliveryError(f"webhook: HTTP {answer.status_code}")


def channels(spec: config.DeliverySpec, environ: Mapping[str, str] | None = None) -> list[Channel]:
    """The channels `spec` asks for, with their secrets from the environment (a Secret)."""
    env = os.environ if environ is None else environ
    out: list[Channel] = []
    if spec.email is not None:
        user = env.get(SMTP_USERNAME_ENV) or None
        if user and not env.get(SMTP_PASSWORD_ENV):
            raise ValueError(
                f"delivery.email: {SMTP_USERNAME_ENV} is set but {SMTP_PASSWORD_ENV} is not"
            )
        out.append(Email(spec.email, username=user, password=env.get(SMTP_PASSWORD_ENV)))
    if spec.webhook is not None and spec.webhook.enabled:
        url = env.get(WEBHOOK_URL_ENV, "")
        if not url.startswith(("https://", "http://")):
            raise ValueError(f"delivery.webhook: set {WEBHOOK_URL_ENV} to the webhook's URL")
        out.append(Webhook(url))
    return out


def deliver(
    report: Report,
    to: Sequence[Channel],
    *,
    record: Record | None,
    attempts: int,
    backoff_s: float,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Record:
    """Send `report` on every channel not delivered yet (by `record`), each up to `attempts`
    times with back-off `backoff_s`, doubling; returns the record of what happened."""
    record = record or Record(report=report.stem)
    for channel in to:
        state = record.channels.get(channel.name, ChannelState())
        if state.state == "delivered":
            continue
        for attempt in range(attempts):
            state.attempts += 1
            state.last_attempt_at = now()
            try:
                channel.send(report)
            except DeliveryError as exc:
                state.state, state.last_error = "failed", str(exc)
                log.warning("delivery of %s by %s failed: %s", report.stem, channel.name, exc)
                if attempt + 1 < attempts:
                    sleep(backoff_s * 2**attempt)
                continue
            state.state, state.last_error, state.delivered_at = "delivered", None, now()
            break
        record.channels[channel.name] = state
    return record


def load_record(store: objectstore.TelemetryStore, stem: str) -> Record | None:
    """The record of an earlier delivery of `stem`, or None (never tried, or unreadable)."""
    try:
        data, _ = store.get_object(store.report_key(record_name(stem)))
    except objectstore.ObjectStoreError:
        return None
    try:
        return Record.model_validate_json(data)
    except ValueError:
        log.warning("unreadable delivery record of %s: starting again", stem)
        return None


def save_record(store: objectstore.TelemetryStore, record: Record) -> str:
    body = record.model_dump_json(indent=2, exclude_none=True).encode()
    return store.put_report(record_name(record.report), body, content_type="application/json")


def gauges(record: Record) -> prometheus_client.CollectorRegistry:
    """The delivery's outcome as the series `push` sends (and the alert rules read)."""
    registry = prometheus_client.CollectorRegistry()
    failed = prometheus_client.Gauge(
        "mlxfleet_report_delivery_failed",
        "1 when the last delivery of this report kind by this channel failed after its retries.",
        ["channel"],
        registry=registry,
    )
    attempts = prometheus_client.Gauge(
        "mlxfleet_report_delivery_attempts",
        "Attempts the last report of this kind took on this channel.",
        ["channel"],
        registry=registry,
    )
    delivered = prometheus_client.Gauge(
        "mlxfleet_report_delivery_last_success_timestamp_seconds",
        "When a report of this kind was last delivered by this channel.",
        ["channel"],
        registry=registry,
    )
    for name, state in record.channels.items():
        failed.labels(name).set(0 if state.state == "delivered" else 1)
        attempts.labels(name).set(state.attempts)
        if state.delivered_at is not None:
            delivered.labels(name).set(state.delivered_at.timestamp())
    return registry


def push(url: str, report: Report, record: Record, *, timeout: float = TIMEOUT_S) -> None:
    """The delivery's outcome to a Prometheus Pushgateway (grouped by job and report kind: a
    later success replaces a failure)."""
    prometheus_client.push_to_gateway(
        url,
        job=PUSH_JOB,
        grouping_key={"report": report.kind},
        registry=gauges(record),
        timeout=timeout,
    )
