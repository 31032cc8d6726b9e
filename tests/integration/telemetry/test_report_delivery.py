"""Reports delivered (issue 25): the monthly PDF arrives by e-mail from a real SMTP server
(aiosmtpd, TLS with a trustme certificate: STARTTLS with a login, or TLS from the first byte),
the summary reaches a Slack-compatible webhook (a local receiver), a failed delivery is retried,
recorded next to the report in the real S3 bucket, pushed to the real Prometheus Pushgateway
(Debian's) and sent again later without sending twice; the report itself is never lost.
"""

from __future__ import annotations

import contextlib
import io
import json
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pypdf
import pytest
import trustme
import yaml
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from mlxfleet_operator.adapters import objectstore
from mlxfleet_operator.dev import processes
from mlxfleet_operator.reports import cli, delivery, fixture
from tests.support import s3 as s3support

pytestmark = pytest.mark.s3
PREFIX = "acme/telemetry"
LOGIN, PASSWORD = "reports@example.com", "smtp-password-1"
MONTH, WEEK = "2026-10", "2026-W42"
MONTH_TITLE = "mlxfleet monthly report October 2026"


# ----------------------------------------------------------------------------- SMTP server


@dataclass
class Received:
    envelope: Envelope
    tls: bool
    authenticated: bool

    @property
    def message(self) -> EmailMessage:
        raw = self.envelope.original_content or b""
        found = message_from_bytes(raw, policy=policy.default)
        assert isinstance(found, EmailMessage)
        return found


@dataclass
class Mailbox:
    implicit_tls: bool  # the listening socket speaks TLS: nothing reaches it in clear
    received: list[Received] = field(default_factory=list)
    auth_tried: list[bool] = field(default_factory=list)  # per AUTH: was the session in TLS

    def tls(self, session: Session) -> bool:
        return self.implicit_tls or session.ssl is not None  # after STARTTLS

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.received.append(Received(envelope, self.tls(session), bool(session.authenticated)))
        return "250 OK"

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        self.auth_tried.append(self.tls(session))
        ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
            LOGIN.encode(),
            PASSWORD.encode(),
        )
        return AuthResult(success=ok)


@dataclass
class SmtpServer:
    port: int
    mailbox: Mailbox
    controller: Controller


@contextlib.contextmanager
def smtp_server(ca: trustme.CA, *, mode: str) -> Iterator[SmtpServer]:
    """`starttls`: STARTTLS required before AUTH and mail; `tls`: TLS from the first byte;
    `plain`: an old server that offers no TLS at all."""
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    (port,) = processes.free_ports(1)
    box = Mailbox(implicit_tls=mode == "tls")
    kwargs: dict[str, Any] = {"authenticator": box.authenticate, "auth_require_tls": True}
    if mode == "starttls":
        kwargs |= {"tls_context": ctx, "require_starttls": True, "auth_required": True}
    elif mode == "tls":  # aiosmtpd's auth_require_tls looks for STARTTLS: here all is TLS
        kwargs |= {"ssl_context": ctx, "auth_require_tls": False}
    controller = Controller(box, hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    try:
        yield SmtpServer(port, box, controller)
    finally:
        controller.stop()


# ----------------------------------------------------------------------------- webhook


@dataclass
class Webhook:
    url: str
    posts: list[dict[str, Any]]
    fail_next: list[int]  # status codes to answer before a 200


@contextlib.contextmanager
def webhook() -> Iterator[Webhook]:
    posts: list[dict[str, Any]] = []
    fail_next: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            status = fail_next.pop(0) if fail_next else 200
            if status == 200:
                posts.append({"json": json.loads(body), "type": self.headers["Content-Type"]})
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Webhook(
            f"http://127.0.0.1:{server.server_port}/hooks/T000/B000/secret", posts, fail_next
        )
    finally:
        server.shutdown()
        server.server_close()


# ----------------------------------------------------------------------------- pushgateway


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real Prometheus Pushgateway (Debian's prometheus-pushgateway)."""
    (port,) = processes.free_ports(1)
    root = tmp_path_factory.mktemp("pushgateway")
    with (root / "log").open("wb") as log:
        proc = subprocess.Popen(
            ["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/-/ready", timeout=2).status_code == 200:
                break
        assert proc.poll() is None, (root / "log").read_text()
        assert time.monotonic() < deadline, (root / "log").read_text()
        time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=20)


def pushed(url: str, report: str) -> dict[str, float]:
    """mlxfleet_report_delivery_failed by channel, as the Pushgateway serves it to Prometheus."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text):
        for sample in family.samples:
            if (
                sample.name == "mlxfleet_report_delivery_failed"
                and sample.labels.get("report") == report
            ):
                assert sample.labels["job"] == delivery.PUSH_JOB
                out[sample.labels["channel"]] = sample.value
    return out


# ----------------------------------------------------------------------------- the runs


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def bucket(s3_server: s3support.S3Server) -> str:
    """October 2026 of the fixture fleet, one object a day per node."""
    name = s3_server.make_bucket()
    store = store_of(s3_server, name)
    for iv in fixture.intervals(interval_hours=24):
        store.put_interval(iv)
    return name


def store_of(s3_server: s3support.S3Server, bucket: str) -> objectstore.TelemetryStore:
    return objectstore.TelemetryStore(
        objectstore.StoreConfig(
            bucket=bucket,
            prefix=PREFIX,
            endpoint_url=s3_server.endpoint_url,
            region=s3_server.region,
            access_key_id=s3_server.access_key,
            secret_access_key=s3_server.secret_key,
        )
    )


@dataclass
class Runner:
    s3: s3support.S3Server
    bucket: str
    root: Path
    monkeypatch: pytest.MonkeyPatch

    def config(self, delivery_: dict[str, Any]) -> Path:
        cfg = yaml.safe_load(fixture.CONFIG_YAML) or {}
        cfg["delivery"] = {"attempts": 3, "backoffSeconds": 0.05, **delivery_}
        path = self.root / f"report-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    def bucket_flags(self) -> list[str]:
        return [
            "--bucket", self.bucket, "--prefix", PREFIX, "--endpoint-url", self.s3.endpoint_url,
            "--region", self.s3.region,
        ]  # fmt: skip

    def run(self, kind: str, period: str, cfg: Path, **env: str) -> int:
        for name, value in env.items():
            self.monkeypatch.setenv(name, value)
        flag = "--month" if kind == "monthly" else "--week"
        return cli.main(
            [kind, flag, period, "--config", str(cfg), "--out", str(self.root / "out"),
             "--write-back", *self.bucket_flags()]
        )  # fmt: skip

    def record(self, stem: str) -> dict[str, Any]:
        store = store_of(self.s3, self.bucket)
        data, _ = store.get_object(store.report_key(delivery.record_name(stem)))
        return dict(json.loads(data))

    def stored(self, name: str) -> bytes:
        store = store_of(self.s3, self.bucket)
        return store.get_object(store.report_key(name))[0]


@pytest.fixture
def runner(
    s3_server: s3support.S3Server, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Runner:
    monkeypatch.setenv("MLXFLEET_TELEMETRY_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.delenv(delivery.SMTP_USERNAME_ENV, raising=False)
    monkeypatch.delenv(delivery.SMTP_PASSWORD_ENV, raising=False)
    monkeypatch.delenv(delivery.WEBHOOK_URL_ENV, raising=False)
    store = store_of(s3_server, bucket)  # each test starts with no delivery of either report
    store.delete_objects(
        [store.report_key(delivery.record_name(s)) for s in (f"monthly-{MONTH}", f"weekly-{WEEK}")]
    )
    return Runner(s3_server, bucket, tmp_path, monkeypatch)


def email_spec(ca_file: Path, port: int, security: str) -> dict[str, Any]:
    return {
        "to": ["cfo@example.com", "platform@example.com"],
        "from": "mlxfleet@example.com",
        "smtpHost": "127.0.0.1",
        "smtpPort": port,
        "security": security,
        "caFile": str(ca_file),
    }


def ca_file(ca: trustme.CA, root: Path) -> Path:
    path = root / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return path


def test_the_monthly_report_arrives_by_smtp_with_the_pdf_and_the_webhook_gets_the_summary(
    runner: Runner, ca: trustme.CA, pushgateway: str
) -> None:
    with smtp_server(ca, mode="starttls") as smtp, webhook() as hook:
        cfg = runner.config(
            {
                "email": email_spec(ca_file(ca, runner.root), smtp.port, "starttls"),
                "webhook": {},
                "pushgateway": pushgateway,
            }
        )
        rc = runner.run(
            "monthly",
            MONTH,
            cfg,
            MLXFLEET_SMTP_USERNAME=LOGIN,
            MLXFLEET_SMTP_PASSWORD=PASSWORD,
            MLXFLEET_REPORT_WEBHOOK_URL=hook.url,
        )
        assert rc == 0
        (mail,) = smtp.mailbox.received
        assert mail.tls
        assert mail.authenticated
        assert smtp.mailbox.auth_tried == [True]  # the password only ever crossed TLS
        assert sorted(mail.envelope.rcpt_tos) == ["cfo@example.com", "platform@example.com"]
        msg = mail.message
        assert msg["From"] == "mlxfleet@example.com"
        assert msg["Subject"] == f"[mlxfleet] {MONTH_TITLE}"
        (pdf,) = [p for p in msg.iter_attachments() if p.get_content_type() == "application/pdf"]
        assert pdf.get_filename() == f"monthly-{MONTH}.pdf"
        data = pdf.get_content()
        assert data == runner.stored(f"monthly-{MONTH}.pdf")  # the very PDF in the bucket
        assert "Cost per million tokens" in "".join(
            page.extract_text() for page in pypdf.PdfReader(io.BytesIO(data)).pages
        )
        body = msg.get_body(preferencelist=("plain",))
        assert body is not None
        assert MONTH_TITLE in body.get_content()
        (post,) = hook.posts
        assert post["type"] == "application/json"
        text = post["json"]["text"]
        assert text.startswith(f"{MONTH_TITLE}\n- ")
        assert text == runner.stored(delivery.summary_name(f"monthly-{MONTH}")).decode()
    record = runner.record(f"monthly-{MONTH}")
    assert {n: (c["state"], c["attempts"]) for n, c in record["channels"].items()} == {
        "email": ("delivered", 1),
        "webhook": ("delivered", 1),
    }
    assert pushed(pushgateway, "monthly") == {"email": 0.0, "webhook": 0.0}


def test_smtp_with_tls_from_the_first_byte_carries_the_weekly_report(
    runner: Runner, ca: trustme.CA
) -> None:
    with smtp_server(ca, mode="tls") as smtp:
        cfg = runner.config({"email": email_spec(ca_file(ca, runner.root), smtp.port, "tls")})
        rc = runner.run(
            "weekly", WEEK, cfg, MLXFLEET_SMTP_USERNAME=LOGIN, MLXFLEET_SMTP_PASSWORD=PASSWORD
        )
        assert rc == 0
        (mail,) = smtp.mailbox.received
        assert mail.tls
        assert mail.authenticated
        (html,) = list(mail.message.iter_attachments())
        assert html.get_filename() == f"weekly-{WEEK}.html"
        assert html.get_content_type() == "text/html"


def test_a_server_without_tls_gets_no_password_and_the_failure_is_recorded(
    runner: Runner, ca: trustme.CA, pushgateway: str
) -> None:
    with smtp_server(ca, mode="plain") as smtp:
        cfg = runner.config(
            {
                "email": email_spec(ca_file(ca, runner.root), smtp.port, "starttls"),
                "attempts": 2,
                "pushgateway": pushgateway,
            }
        )
        rc = runner.run(
            "weekly", WEEK, cfg, MLXFLEET_SMTP_USERNAME=LOGIN, MLXFLEET_SMTP_PASSWORD=PASSWORD
        )
        assert rc == 3
        assert smtp.mailbox.received == []
        assert smtp.mailbox.auth_tried == []
    email = runner.record(f"weekly-{WEEK}")["channels"]["email"]
    assert (email["state"], email["attempts"]) == ("failed", 2)
    assert "STARTTLS" in email["lastError"]
    assert PASSWORD not in json.dumps(runner.record(f"weekly-{WEEK}"))
    assert runner.stored(f"weekly-{WEEK}.html")  # the report is in the bucket all the same
    assert pushed(pushgateway, "weekly") == {"email": 1.0}


def test_a_failed_webhook_is_retried_recorded_and_sent_later_without_sending_twice(
    runner: Runner, ca: trustme.CA, pushgateway: str
) -> None:
    stem = f"monthly-{MONTH}"
    with smtp_server(ca, mode="starttls") as smtp, webhook() as hook:
        cfg = runner.config(
            {
                "email": email_spec(ca_file(ca, runner.root), smtp.port, "starttls"),
                "webhook": {},
                "attempts": 3,
                "pushgateway": pushgateway,
            }
        )
        env = {
            "MLXFLEET_SMTP_USERNAME": LOGIN,
            "MLXFLEET_SMTP_PASSWORD": PASSWORD,
            "MLXFLEET_REPORT_WEBHOOK_URL": hook.url,
        }
        store = store_of(runner.s3, runner.bucket)
        # two failures, then it answers: retried within the run, delivered on the third try
        hook.fail_next[:] = [500, 502]
        assert runner.run("monthly", MONTH, cfg, **env) == 0
        assert len(hook.posts) == 1
        assert runner.record(stem)["channels"]["webhook"]["attempts"] == 3
        # the webhook is down for the whole run: exit 3, the failure recorded and pushed
        store.delete_objects([store.report_key(delivery.record_name(stem))])
        hook.fail_next[:] = [503] * 3
        assert runner.run("monthly", MONTH, cfg, **env) == 3
        channels = runner.record(stem)["channels"]
        assert channels["email"]["state"] == "delivered"
        assert (channels["webhook"]["state"], channels["webhook"]["lastError"]) == (
            "failed",
            "webhook: HTTP 503",
        )
        assert hook.url not in json.dumps(channels)  # the URL is a credential
        assert pushed(pushgateway, "monthly") == {"email": 0.0, "webhook": 1.0}
        assert runner.stored(f"{stem}.pdf").startswith(b"%PDF")  # never lost
        mails = len(smtp.mailbox.received)
        # later, with the webhook back: only the webhook is sent again, from the bucket
        assert cli.main(["deliver", stem, "--config", str(cfg), *runner.bucket_flags()]) == 0
        assert len(hook.posts) == 2
        assert len(smtp.mailbox.received) == mails  # the e-mail went out once, not twice
        webhook_state = runner.record(stem)["channels"]["webhook"]
        assert (webhook_state["state"], webhook_state["attempts"]) == ("delivered", 4)
        assert pushed(pushgateway, "monthly") == {"email": 0.0, "webhook": 0.0}


def test_delivery_needs_the_report_in_the_bucket_first(runner: Runner, ca: trustme.CA) -> None:
    cfg = runner.config({"webhook": {}})
    runner.monkeypatch.setenv(delivery.WEBHOOK_URL_ENV, "http://127.0.0.1:9/hook")
    rc = cli.main(
        ["weekly", "--week", WEEK, "--config", str(cfg), "--out", str(runner.root / "o"),
         *runner.bucket_flags()]
    )  # fmt: skip
    assert rc == 2


def test_deliver_names_a_report_that_is_not_in_the_bucket(
    runner: Runner, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = runner.config({"webhook": {}})
    runner.monkeypatch.setenv(delivery.WEBHOOK_URL_ENV, "http://127.0.0.1:9/hook")
    assert (
        cli.main(["deliver", "monthly-1999-01", "--config", str(cfg), *runner.bucket_flags()]) == 2
    )
    assert "monthly-1999-01 is not in the bucket" in capsys.readouterr().err
