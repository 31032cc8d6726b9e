"""The alert rules (charts/mlxfleet/templates/monitoring/prometheusrule.yaml, rendered into
manifests/monitoring/prometheusrule.yaml by `make manifests`): promtool checks and unit-tests
them (tests/alerts/rules_test.yaml), every alert has a scenario where it fires and is evaluated
in the healthy fleet where it does not, and every runbook link lands on a heading of
docs/troubleshooting.md."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.support.docs import anchors

REPO = Path(__file__).resolve().parents[2]
RULE = REPO / "manifests" / "monitoring" / "prometheusrule.yaml"
TESTS = Path(__file__).with_name("rules_test.yaml")
RUNBOOKS = REPO / "docs" / "troubleshooting.md"
HEALTHY = "healthy fleet"


def alerts() -> list[dict[str, Any]]:
    spec = yaml.safe_load(RULE.read_text())["spec"]
    return [rule for group in spec["groups"] for rule in group["rules"] if "alert" in rule]


def unit_tests() -> list[dict[str, Any]]:
    return list(yaml.safe_load(TESTS.read_text())["tests"])


def names() -> list[str]:
    return [rule["alert"] for rule in alerts()]


@pytest.mark.tools
def test_promtool_checks_the_rules_and_every_unit_test_passes(
    promtool: Path, tmp_path: Path
) -> None:
    spec = yaml.safe_load(RULE.read_text())["spec"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, width=1000))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    for args in (["check", "rules", "rules.yaml"], ["test", "rules", TESTS.name]):
        done = subprocess.run(
            [str(promtool), *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize("alert", names())
def test_every_alert_fires_in_a_scenario(alert: str) -> None:
    fired = [
        case
        for test in unit_tests()
        if test["name"] != HEALTHY
        for case in test["alert_rule_test"]
        if case["alertname"] == alert and case.get("exp_alerts")
    ]
    assert fired, f"tests/alerts/rules_test.yaml has no scenario where {alert} fires"


@pytest.mark.parametrize("alert", names())
def test_every_alert_stays_silent_in_the_healthy_fleet(alert: str) -> None:
    (healthy,) = (t for t in unit_tests() if t["name"] == HEALTHY)
    cases = [c for c in healthy["alert_rule_test"] if c["alertname"] == alert]
    assert cases, f"the healthy fleet does not evaluate {alert}"
    assert all(c["exp_alerts"] == [] for c in cases)


def test_no_test_names_an_alert_that_does_not_exist() -> None:
    tested = {c["alertname"] for t in unit_tests() for c in t["alert_rule_test"]}
    assert tested <= set(names())


@pytest.mark.parametrize("alert", names())
def test_every_alert_links_its_runbook_in_troubleshooting(alert: str) -> None:
    (rule,) = (r for r in alerts() if r["alert"] == alert)
    url = urlsplit(rule["annotations"]["runbook_url"])
    assert url.path.endswith("/docs/troubleshooting.md"), url
    assert url.fragment == alert.lower()
    assert url.fragment in anchors(RUNBOOKS), f"docs/troubleshooting.md has no `### {alert}`"
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert {"summary", "description"} <= set(rule["annotations"])
