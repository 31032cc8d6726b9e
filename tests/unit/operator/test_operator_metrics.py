"""The operator series the alert rules read (charts/mlxfleet/templates/monitoring/
prometheusrule.yaml): what each says, and that a deleted object leaves none behind."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from prometheus_client import generate_latest

from mlxfleet_operator.adapters import kube, metrics


def exposition() -> str:
    return generate_latest(metrics.REGISTRY).decode()


def value(text: str, series: str) -> str | None:
    found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return found.group(1) if found else None


def test_a_forgotten_node_and_deployment_leave_no_series() -> None:
    metrics.NODE_READY.labels("gone-mac").set(0)
    metrics.NODE_MISSES.labels("gone-mac").set(4)
    metrics.observe_token_expiry("gone-mac", datetime(2030, 1, 1, tzinfo=UTC))
    metrics.observe_deployment("team-z", "gone", ready=False, ready_replicas=0, replicas=2)
    text = exposition()
    assert value(text, 'mlxfleet_operator_node_heartbeat_misses{node="gone-mac"}') == "4.0"
    assert (
        value(text, 'mlxfleet_operator_deployment_ready{name="gone",namespace="team-z"}') == "0.0"
    )
    metrics.forget_node("gone-mac")
    metrics.forget_deployment("team-z", "gone")
    metrics.forget_node("never-seen")  # forgetting twice or never seen is harmless
    text = exposition()
    assert 'node="gone-mac"' not in text  # a stale 0 would page MlxfleetNodeHeartbeatMissed
    assert 'name="gone"' not in text


def test_token_expiry_is_exported_only_when_the_secret_declares_one() -> None:
    when = datetime(2031, 5, 1, tzinfo=UTC)
    metrics.observe_token_expiry("mac-t", when)
    series = 'mlxfleet_operator_agent_token_expiry_timestamp_seconds{node="mac-t"}'
    assert float(value(exposition(), series) or 0) == when.timestamp()
    metrics.observe_token_expiry("mac-t", None)  # annotation removed
    assert value(exposition(), series) is None


def test_final_swapplan_phases_are_exported_from_zero() -> None:
    metrics.count_phases(["Failed", "RolledBack"])
    text = exposition()
    for phase in ("Failed", "RolledBack"):
        series = f'mlxfleet_operator_swapplans_finished_total{{phase="{phase}"}}'
        assert value(text, series) is not None


def test_leader_follows_whether_this_replica_acts() -> None:
    acting = [False]
    metrics.report_leadership(lambda: acting[0])
    assert value(exposition(), "mlxfleet_operator_leader") == "0.0"
    acting[0] = True
    assert value(exposition(), "mlxfleet_operator_leader") == "1.0"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2027-01-31T00:00:00Z", datetime(2027, 1, 31, tzinfo=UTC), id="zulu"),
        pytest.param("2027-01-31T02:00:00+02:00", datetime(2027, 1, 31, tzinfo=UTC), id="offset"),
        pytest.param("2027-01-31T00:00:00", None, id="no-zone"),
        pytest.param("next tuesday", None, id="not-a-time"),
        pytest.param("", None, id="empty"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_the_expires_at_annotation_is_a_time_with_a_zone(
    text: str | None, expected: datetime | None
) -> None:
    assert kube._instant(text) == expected
