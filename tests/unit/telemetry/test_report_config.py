"""Malformed report config files: one clear ConfigError naming the field, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxfleet_operator.reports import config, fixture, inventory


@pytest.mark.parametrize(
    ("text", "names"),
    [
        pytest.param("nodes: [unclosed", "not valid YAML", id="bad-yaml"),
        pytest.param("- a\n- b\n", "must be a mapping", id="list-not-mapping"),
        pytest.param("nodes: {mini-1: {purchasePriceUSD: -5}}", "nodes.mini-1", id="negative-cost"),
        pytest.param(
            "nodes: {mini-1: {purchasePriceUSD: lots}}", "purchasePriceUSD", id="price-not-number"
        ),
        pytest.param("reference: {inputUSDPerMillion: 1}", "outputUSDPerMillion", id="ref-missing"),
        pytest.param("namespaces: [a, b]", "namespaces", id="namespaces-not-mapping"),
        pytest.param("delivery: {attempts: 2}", "give email, webhook", id="delivery-nowhere"),
        pytest.param(
            "delivery: {email: {to: [bob], from: a@b.io, smtpHost: h}}",
            "delivery.email.to",
            id="not-an-address",
        ),
        pytest.param(
            "delivery: {email: {to: [a@b.io], from: a@b.io, smtpHost: h, security: none}}",
            "delivery.email.security",
            id="smtp-in-clear",
        ),
        pytest.param("delivery: {webhook: {}, attempts: 0}", "delivery.attempts", id="no-attempts"),
        pytest.param(
            "delivery: {webhook: {}, pushgateway: 'gateway:9091'}",
            "delivery.pushgateway",
            id="pushgateway-not-url",
        ),
        pytest.param(
            "delivery: {webhook: {}, password: x}", "delivery.password", id="no-secrets-here"
        ),
    ],
)
def test_malformed_config_names_the_problem(text: str, names: str) -> None:
    with pytest.raises(config.ConfigError, match=names.replace(".", r"\.")):
        config.ReportConfig.from_yaml(text)


def test_empty_config_is_allowed() -> None:
    cfg = config.ReportConfig.from_yaml("")
    assert cfg.nodes == {}
    assert cfg.reference_price() is None


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match=r"report\.yaml"):
        config.ReportConfig.from_file(tmp_path / "report.yaml")


def test_fixture_config_is_valid() -> None:
    cfg = config.ReportConfig.from_yaml(fixture.CONFIG_YAML)
    inputs, problems = inventory.build(cfg, None).cost_inputs()
    assert inputs
    assert problems == []


def test_delivery_defaults() -> None:
    spec = config.ReportConfig.from_yaml(
        "delivery: {email: {to: [cfo@example.com], from: fleet@example.com, smtpHost: smtp.x.io,"
        " security: tls}}"
    ).delivery
    assert spec is not None
    assert spec.email is not None
    assert (spec.email.port, spec.attempts, spec.backoff_seconds) == (465, 3, 30.0)
    assert spec.webhook is None
