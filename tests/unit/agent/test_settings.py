"""Agent settings declared once: flags, config-file keys and environment variables come from the
same field, with one precedence (flags > file > environment > defaults), and secrets only from
the environment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlxfleet_agent import contract
from mlxfleet_agent.runtime import compose, settings
from mlxfleet_agent.telemetry import shipper

REPO = Path(__file__).resolve().parents[3]
BASE = {"stateDir": "/var/lib/mlxfleet", "modelsDir": "/var/lib/mlxfleet/models"}
ENV = "MLXFLEET_TELEMETRY_"


def test_the_environment_fills_telemetry_settings_and_the_file_wins() -> None:
    environ = {
        ENV + "BUCKET": "from-env",
        ENV + "PREFIX": "env-prefix",
        ENV + "REGION": "",  # empty: as if unset
        ENV + "ACCESS_KEY_ID": "key-id",
        ENV + "SECRET_ACCESS_KEY": "s3cr3t-value",
        ENV + "MAX_BUFFERED": "7",
    }
    cfg = settings.build(
        file_values={**BASE, "telemetryBucket": "from-file"}, flag_values={}, environ=environ
    )
    ship = compose.shipper_config(cfg)
    assert ship == shipper.ShipperConfig(
        spool_dir=Path("/var/lib/mlxfleet/telemetry"),
        bucket="from-file",
        prefix="env-prefix",
        endpoint_url=None,
        region=None,
        access_key_id="key-id",
        secret_access_key="s3cr3t-value",
        interval_seconds=60.0,
        max_buffered=7,
    )
    assert "s3cr3t-value" not in repr(cfg)


def test_without_environment_the_shipper_defaults_hold() -> None:
    cfg = settings.build(file_values=BASE, flag_values={}, environ={})
    ship = compose.shipper_config(cfg)
    assert (ship.bucket, ship.prefix, ship.max_buffered) == (None, "mlxfleet-telemetry", 10_080)
    assert (ship.access_key_id, ship.secret_access_key) == (None, None)


def test_flags_win_over_the_file_and_the_file_over_defaults() -> None:
    cfg = settings.build(
        file_values={**BASE, "dataPort": 1, "queue_limit": 3},
        flag_values={"data_port": 2, "bind": None, "allowed_roots": []},
        environ={},
    )
    assert (cfg.data_port, cfg.queue_limit, cfg.bind) == (2, 3, "127.0.0.1")


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("telemetryAccessKeyId", id="camel"),
        pytest.param("telemetry_secret_access_key", id="snake"),
    ],
)
def test_secrets_are_refused_in_the_config_file(key: str) -> None:
    with pytest.raises(settings.SettingsError, match=f"{key}.*{ENV}") as info:
        settings.build(file_values={**BASE, key: "x"}, flag_values={}, environ={})
    assert "'x'" not in str(info.value)


def test_a_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(settings.SettingsError, match=ENV + "MAX_BUFFERED"):
        settings.build(file_values=BASE, flag_values={}, environ={ENV + "MAX_BUFFERED": "lots"})


def test_every_flag_and_environment_variable_is_documented() -> None:
    agent_doc = (REPO / "docs" / "agent.md").read_text()
    telemetry_doc = (REPO / "docs" / "telemetry.md").read_text()
    flags = [flag.option for flag in settings.flags()]
    assert {"--state-dir", "--no-caffeinate", "--allowed-root"} <= set(flags)
    assert [f for f in flags if f"`{f}" not in agent_doc] == []
    variables = sorted(settings.environment().values())
    assert len(variables) == 7
    assert [v for v in variables if not re.search(rf"`{v}`|{v}[,`]", telemetry_doc)] == []


def test_allow_env_narrows_the_fleets_list_and_never_widens_it() -> None:
    cfg = settings.build(file_values=BASE, flag_values={}, environ={})
    assert cfg.command_env_names() == contract.COMMAND_ENV_NAMES  # the default: the whole list
    cfg = settings.build(
        file_values=BASE, flag_values={"command_env": ["OMP_NUM_THREADS"]}, environ={}
    )
    assert cfg.command_env_names() == {"OMP_NUM_THREADS"}
    with pytest.raises(settings.SettingsError, match=r"allow_env PYTHONWARNINGS.*only narrow"):
        settings.build(
            file_values={**BASE, "commandEnv": ["PYTHONWARNINGS"]}, flag_values={}, environ={}
        )


def test_a_short_scrape_token_stops_the_agent_naming_the_flag(tmp_path: Path) -> None:
    short = tmp_path / "metrics-token"
    short.write_text("short\n")
    cfg = settings.build(
        file_values={"stateDir": str(tmp_path / "s"), "modelsDir": str(tmp_path / "m")},
        flag_values={"metrics_token_file": short},
        environ={},
    )
    with pytest.raises(settings.SettingsError, match=r"--metrics-token-file .* at least 16"):
        cfg.prepare()
    short.write_text("x" * 16 + "\n")
    assert cfg.read_metrics_token() == "x" * 16


@pytest.mark.parametrize(
    ("bind", "loopback"),
    [
        pytest.param("127.0.0.1", True, id="v4"),
        pytest.param("127.0.0.2", True, id="v4-net"),
        pytest.param("::1", True, id="v6"),
        pytest.param("localhost", True, id="name"),
        pytest.param("0.0.0.0", False, id="any"),
        pytest.param("::", False, id="any-v6"),
        pytest.param("192.168.1.20", False, id="lan"),
        pytest.param("mac-1.local", False, id="other-name"),
    ],
)
def test_loopback_only(bind: str, loopback: bool) -> None:
    cfg = settings.build(file_values={**BASE, "bind": bind}, flag_values={}, environ={})
    assert cfg.loopback_only() is loopback


@pytest.mark.parametrize(
    ("values", "fabric"),
    [
        pytest.param({}, "127.0.0.1", id="loopback-agent"),
        pytest.param({"bind": "0.0.0.0"}, None, id="lan-agent-without"),
        pytest.param({"bind": "0.0.0.0", "fabricAddress": "10.10.0.2"}, "10.10.0.2", id="given"),
    ],
)
def test_the_fabric_address(values: dict[str, str], fabric: str | None) -> None:
    cfg = settings.build(file_values={**BASE, **values}, flag_values={}, environ={})
    assert cfg.fabric() == fabric


@pytest.mark.parametrize("value", ["fe80::1", "mac-1.local", "10.0.0.300"])
def test_a_fabric_address_is_an_ipv4_address(value: str) -> None:
    with pytest.raises(settings.SettingsError, match=r"fabric_address .* IPv4"):
        settings.build(file_values={**BASE, "fabricAddress": value}, flag_values={}, environ={})
