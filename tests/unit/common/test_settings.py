"""The shared settings mechanism (mlxfleet_common.settings): one declaration gives a flag, a
config-file key and an environment variable; flags win over the file, the file over the
environment, the environment over the defaults; a bad value in any of them is refused naming
where it came from and what is allowed, never echoing a secret."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from mlxfleet_agent.runtime import settings as agent_settings
from mlxfleet_common import settings as mechanism
from mlxfleet_common.settings import Opt, SettingsError
from mlxfleet_gateway import settings as gateway_settings
from mlxfleet_operator import settings as operator_settings
from mlxfleet_operator.adapters import leader

REPO = Path(__file__).resolve().parents[3]


class Toy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    state_dir: Annotated[Path, Opt("where state lives (required)")]
    port: Annotated[int, Field(ge=1, le=65535), Opt("the port", env="TOY_PORT")] = 8080
    region: Annotated[str | None, Opt("a region", env="TOY_REGION")] = None
    tags: Annotated[list[str], Opt("a tag (repeatable)", flag="--tag", action="append")] = Field(
        default_factory=list
    )
    quiet: Annotated[bool, Opt("say less", action="store_true", exclusive="noise")] = False
    loud: Annotated[bool, Opt("say more", action="store_true", exclusive="noise")] = False
    caffeinate: Annotated[bool, Opt("sleep", flag="--no-caffeinate", action="store_false")] = True
    token: Annotated[SecretStr | None, Opt(env="TOY_TOKEN", file=False)] = None
    telemetry_token: Annotated[SecretStr | None, Opt(env="TOY_TOKEN", file=False)] = None
    low: Annotated[float, Opt("the low mark")] = 1.0
    high: Annotated[float, Opt("the high mark")] = 2.0
    file_only: float = Field(default=3.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> Toy:
        if self.low >= self.high:
            raise ValueError(f"low: {self.low}; allowed: less than high ({self.high})")
        return self


BASE = {"stateDir": "/s"}


def build(
    file_values: dict[str, Any] | None = None,
    flag_values: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Toy:
    return mechanism.build(
        Toy,
        file_values={**BASE, **(file_values or {})},
        flag_values=flag_values or {},
        environ=environ or {},
    )


def test_flags_win_over_the_file_the_file_over_the_environment_and_that_over_defaults() -> None:
    assert build().port == 8080
    assert build(environ={"TOY_PORT": "1"}).port == 1
    assert build({"port": 2}, environ={"TOY_PORT": "1"}).port == 2
    assert build({"port": 2}, {"port": 3}, {"TOY_PORT": "1"}).port == 3


def test_unset_flags_and_empty_variables_do_not_count() -> None:
    cfg = build({"region": "eu"}, {"region": None, "tags": []}, {"TOY_PORT": "", "TOY_REGION": ""})
    assert (cfg.port, cfg.region, cfg.tags) == (8080, "eu", [])


def test_file_keys_take_either_spelling() -> None:
    assert build({"file_only": 4}).file_only == 4
    assert build({"fileOnly": 5}).file_only == 5


@pytest.mark.parametrize(
    ("file_values", "flag_values", "environ", "where"),
    [
        pytest.param({}, {"port": 70000}, {}, "--port 70000", id="flag"),
        pytest.param({}, {}, {"TOY_PORT": "70000"}, "environment variable TOY_PORT", id="env"),
        pytest.param({"port": 70000}, {}, {}, "config file key port 70000", id="file"),
        pytest.param(
            {"port": 70000}, {}, {"TOY_PORT": "1"}, "config file key port 70000", id="file-won"
        ),
    ],
)
def test_a_bad_value_names_its_source_and_what_is_allowed(
    file_values: dict[str, Any], flag_values: dict[str, Any], environ: dict[str, str], where: str
) -> None:
    with pytest.raises(SettingsError) as info:
        build(file_values, flag_values, environ)
    assert str(info.value) == f"{where}: Input should be less than or equal to 65535"


def test_a_value_of_the_wrong_kind_is_refused_naming_the_kind() -> None:
    with pytest.raises(SettingsError, match=r"^environment variable TOY_PORT: .*valid integer"):
        build(environ={"TOY_PORT": "lots"})
    with pytest.raises(SettingsError, match=r"^config file key fileOnly 'x': .*valid number"):
        build({"fileOnly": "x"})


def test_an_environment_value_is_never_echoed() -> None:
    with pytest.raises(SettingsError) as info:
        build(environ={"TOY_PORT": "s3cr3t"})
    assert "s3cr3t" not in str(info.value)


def test_a_missing_setting_names_every_way_to_give_it() -> None:
    with pytest.raises(SettingsError) as info:
        mechanism.build(Toy, file_values={}, flag_values={}, environ={})
    assert str(info.value) == "stateDir: required (give --state-dir or config file key stateDir)"


def test_an_unknown_file_key_names_the_nearest_known_one_and_the_known_keys() -> None:
    with pytest.raises(SettingsError) as info:
        build({"prot": 1})
    message = str(info.value)
    assert message.startswith("config file key prot: not a setting (did you mean port?")
    assert "stateDir, port, region, tags" in message
    assert "token" not in message  # not a file key


@pytest.mark.parametrize("key", ["token", "telemetryToken"])
def test_a_secret_is_refused_in_the_file_naming_its_variable(key: str) -> None:
    with pytest.raises(SettingsError, match=f"config file key {key}: .* set TOY_TOKEN") as info:
        build({key: "s3cr3t"})
    assert "s3cr3t" not in str(info.value)
    secret = build(environ={"TOY_TOKEN": "s3cr3t"}).token
    assert secret is not None
    assert secret.get_secret_value() == "s3cr3t"


def test_a_check_across_fields_is_named_by_the_source_of_the_field_it_names() -> None:
    with pytest.raises(SettingsError, match=r"^--low: low: 3.0; allowed: less than high"):
        build(flag_values={"low": 3.0})
    with pytest.raises(SettingsError, match=r"^config file key low: low: 3"):
        build({"low": 3})
    with pytest.raises(SettingsError, match=r"^--low: low: 1.0; allowed"):  # the default: its flag
        build({"high": 0.5})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toy", exit_on_error=False)
    mechanism.add_flags(p, Toy)
    return p


def test_the_flags_come_from_the_declarations() -> None:
    options = [flag.option for flag in mechanism.flags(Toy)]
    assert options == [
        "--state-dir", "--port", "--region", "--tag", "--quiet", "--loud", "--no-caffeinate",
        "--low", "--high",
    ]  # fmt: skip
    assert mechanism.environment(Toy) == {
        "port": "TOY_PORT",
        "region": "TOY_REGION",
        "token": "TOY_TOKEN",
        "telemetry_token": "TOY_TOKEN",
    }
    ns = parser().parse_args(["--port", "9", "--tag", "a", "--tag", "b", "--no-caffeinate"])
    values = mechanism.flag_values(Toy, ns)
    assert values["port"] == 9  # converted by the field's type
    assert values["state_dir"] is None  # unset: does not count
    cfg = mechanism.build(Toy, file_values=BASE, flag_values=values, environ={})
    assert (cfg.port, cfg.tags, cfg.caffeinate, cfg.quiet) == (9, ["a", "b"], False, False)


def test_exclusive_flags_exclude_each_other() -> None:
    with pytest.raises(argparse.ArgumentError, match="not allowed with"):
        parser().parse_args(["--quiet", "--loud"])


def test_a_flag_of_the_wrong_type_is_refused_by_the_parser() -> None:
    with pytest.raises(argparse.ArgumentError, match="--port: invalid int value"):
        parser().parse_args(["--port", "many"])


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        pytest.param("list.yaml", "- a list\n", "must hold a mapping", id="not-a-mapping"),
        pytest.param("bad.yaml", "port: [1\n", "config file", id="bad-yaml"),
        pytest.param("bad.json", '{"port": 1,}', "config file", id="bad-json"),
    ],
)
def test_a_malformed_config_file_is_refused_naming_it(
    tmp_path: Path, name: str, text: str, said: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SettingsError, match=said) as info:
        mechanism.read_config_file(path)
    assert str(path) in str(info.value)


def test_an_unreadable_config_file_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"^--config .*missing.yaml: not a readable file"):
        mechanism.read_config_file(tmp_path / "missing.yaml")
    assert mechanism.read_config_file(_write(tmp_path / "empty.yaml", "")) == {}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("models", "doc"),
    [
        pytest.param([agent_settings.Settings], "agent.md", id="agent"),
        pytest.param([gateway_settings.Settings], "gateway.md", id="gateway"),
        pytest.param(
            [operator_settings.OperatorSettings, leader.ElectionSettings], "operator.md", id="op"
        ),
    ],
)
def test_every_flag_of_the_three_programs_is_in_its_settings_table(
    models: list[type[BaseModel]], doc: str
) -> None:
    text = (REPO / "docs" / doc).read_text()
    flags = [flag.option for model in models for flag in mechanism.flags(model)]
    assert [f for f in flags if not re.search(rf"[`/]{re.escape(f)}(?![-\w])", text)] == []


def test_every_environment_variable_of_the_gateway_and_operator_is_documented() -> None:
    for model, doc in (
        (gateway_settings.Settings, "gateway.md"),
        (operator_settings.OperatorSettings, "operator.md"),
    ):
        text = (REPO / "docs" / doc).read_text()
        variables = mechanism.environment(model).values()
        assert [v for v in variables if v not in text] == [], doc
