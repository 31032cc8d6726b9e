"""`delivery.deliver` (pure over its channels): retries with doubling back-off, a record per
channel, a channel already delivered is never sent again; `delivery.channels` takes its secrets
from the environment and says which one is missing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mlxfleet_operator.reports import config, delivery

REPORT = delivery.Report(
    "monthly-2026-10",
    {
        "monthly-2026-10.summary.txt": (b"mlxfleet monthly report October 2026", delivery.TEXT),
        "monthly-2026-10.pdf": (b"%PDF-1.7", "application/pdf"),
    },
)
NOW = datetime(2026, 11, 1, 7, tzinfo=UTC)


class Flaky:
    def __init__(self, name: str, failures: int) -> None:
        self.name = name
        self.failures = failures
        self.sent = 0

    def send(self, report: delivery.Report) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise delivery.DeliveryError(f"{self.name}: down")
        self.sent += 1


def test_a_failure_is_retried_with_doubling_back_off() -> None:
    waits: list[float] = []
    hook = Flaky("webhook", failures=2)
    record = delivery.deliver(
        REPORT, [hook], record=None, attempts=3, backoff_s=10, sleep=waits.append, now=lambda: NOW
    )
    assert waits == [10, 20]
    state = record.channels["webhook"]
    assert (state.state, state.attempts, state.last_error, state.delivered_at) == (
        "delivered",
        3,
        None,
        NOW,
    )
    assert record.failed == []


def test_what_still_fails_is_recorded_and_only_that_is_sent_again() -> None:
    mail, hook = Flaky("email", failures=0), Flaky("webhook", failures=5)
    record = delivery.deliver(
        REPORT, [mail, hook], record=None, attempts=2, backoff_s=0, sleep=lambda _: None
    )
    assert record.failed == ["webhook"]
    assert record.channels["webhook"].last_error == "webhook: down"
    again = delivery.Record.model_validate_json(record.model_dump_json())  # as stored
    hook.failures = 0
    delivery.deliver(REPORT, [mail, hook], record=again, attempts=2, backoff_s=0)
    assert (mail.sent, hook.sent) == (1, 1)  # the e-mail is not sent twice
    assert again.channels["webhook"].attempts == 3
    assert again.failed == []


def test_the_monthly_mail_carries_the_pdf_the_weekly_the_html() -> None:
    assert [a[0] for a in REPORT.attachments()] == ["monthly-2026-10.pdf"]
    assert delivery.Report.names("weekly-2026-W42") == [
        "weekly-2026-W42.summary.txt",
        "weekly-2026-W42.html",
    ]


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        pytest.param({}, "MLXFLEET_REPORT_WEBHOOK_URL", id="no-webhook-url"),
        pytest.param(
            {
                "MLXFLEET_REPORT_WEBHOOK_URL": "https://hooks.example.com/x",
                "MLXFLEET_SMTP_USERNAME": "u",
            },
            "MLXFLEET_SMTP_PASSWORD",
            id="login-without-password",
        ),
    ],
)
def test_missing_secrets_are_named(env: dict[str, str], problem: str) -> None:
    spec = config.DeliverySpec.model_validate(
        {
            "webhook": {},
            "email": {"to": ["a@example.com"], "from": "b@example.com", "smtpHost": "smtp"},
        }
    )
    with pytest.raises(ValueError, match=problem):
        delivery.channels(spec, env)
