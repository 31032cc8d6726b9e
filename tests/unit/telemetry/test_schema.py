"""The telemetry object schema shared by the agent (writer) and the reports (reader)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from mlxfleet_agent import contract


def test_key_is_partitioned_by_utc_date_and_node() -> None:
    start = datetime(2026, 10, 15, 23, 59, tzinfo=timezone(timedelta(hours=-2)))
    assert (
        contract.telemetry_key("fleet/telemetry/", "mini-1", start)
        == "fleet/telemetry/v1/date=2026-10-16/node=mini-1/20261016T015900Z.jsonl"
    )
    assert contract.telemetry_key("", "m", start).startswith("v1/date=2026-10-16/")


@pytest.mark.parametrize(
    ("node", "start"),
    [
        pytest.param("a/b", datetime(2026, 1, 1, tzinfo=UTC), id="slash-in-node"),
        pytest.param("mini-1", datetime(2026, 1, 1), id="naive-time"),
    ],
)
def test_unusable_keys_are_refused(node: str, start: datetime) -> None:
    with pytest.raises(ValueError):
        contract.telemetry_key("p", node, start)


def test_interval_round_trips_as_one_camel_case_json_line() -> None:
    iv = contract.TelemetryInterval(
        node="mini-1",
        interval_start=datetime(2026, 10, 1, tzinfo=UTC),
        interval_seconds=60,
        slots=[contract.SlotTelemetry(slot="chat", model="llama", prompt_tokens=5)],
    )
    line = iv.model_dump_json()
    assert "\n" not in line
    raw = json.loads(line)
    assert raw["schemaVersion"] == contract.TELEMETRY_SCHEMA_VERSION
    assert raw["intervalStart"] == "2026-10-01T00:00:00Z"
    assert raw["slots"][0]["promptTokens"] == 5
    assert contract.TelemetryInterval.model_validate_json(line) == iv


def test_reader_tolerates_fields_added_later() -> None:
    raw = {
        "schemaVersion": 1,
        "node": "n",
        "intervalStart": "2026-10-01T00:00:00Z",
        "intervalSeconds": 60,
        "somethingNew": {"x": 1},
    }
    assert contract.TelemetryInterval.model_validate(raw).node == "n"


def test_interval_must_have_a_positive_length() -> None:
    with pytest.raises(ValidationError, match=r"interval_?[sS]econds"):
        contract.TelemetryInterval(
            node="n", interval_start=datetime(2026, 10, 1, tzinfo=UTC), interval_seconds=0
        )
