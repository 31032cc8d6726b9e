"""launchd/systemd units carry the agent's environment: an env file (systemd reads it at each
start; launchd-plist copies it in), `--env KEY=VALUE`, and bad input names the flag.

Issue 15 item 10: the generated units held only PYTHONUNBUFFERED, so telemetry credentials and
HF_HOME could not reach the agent.
"""

from __future__ import annotations

import plistlib
import shlex

import pytest

from mlxfleet_agent import service_units

ARGV = ["/opt/mlxfleet/bin/mlxfleet-agent", "serve", "--config", "/etc/mlxfleet/agent.yaml"]


def test_systemd_unit_reads_the_environment_file_and_quotes_values() -> None:
    unit = service_units.systemd_unit(
        ARGV,
        user="mlxfleet",
        environment={"HF_HOME": "/var/lib/mlxfleet/hf", "NOTE": 'say "100%" \\ done'},
        environment_files=["/etc/mlxfleet/agent.env"],
    )
    lines = unit.splitlines()
    assert "EnvironmentFile=/etc/mlxfleet/agent.env" in lines
    assert 'Environment="HF_HOME=/var/lib/mlxfleet/hf"' in lines
    assert 'Environment="PYTHONUNBUFFERED=1"' in lines
    note = next(line for line in lines if line.startswith('Environment="NOTE='))
    # systemd: C-style escapes inside double quotes, % doubled (specifiers)
    assert note == 'Environment="NOTE=say \\"100%%\\" \\\\ done"'
    (word,) = shlex.split(note.removeprefix("Environment=").replace("%%", "%"))
    assert word == 'NOTE=say "100%" \\ done'
    assert lines.index("EnvironmentFile=/etc/mlxfleet/agent.env") < lines.index("User=mlxfleet")


def test_systemd_unit_refuses_a_relative_environment_file() -> None:
    with pytest.raises(service_units.UnitError, match="--env-file"):
        service_units.systemd_unit(ARGV, environment_files=["agent.env"])


def test_launchd_plist_carries_the_environment() -> None:
    text = service_units.launchd_plist(
        ARGV,
        user="_mlxfleet",
        environment={"MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY": "s3cr<e>t", "HF_HOME": "/x"},
    )
    plist = plistlib.loads(text.encode())
    assert plist["EnvironmentVariables"] == {
        "PYTHONUNBUFFERED": "1",
        "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY": "s3cr<e>t",
        "HF_HOME": "/x",
    }
    assert plist["UserName"] == "_mlxfleet"


def test_env_file_syntax() -> None:
    text = """
# telemetry
MLXFLEET_TELEMETRY_ACCESS_KEY_ID=abc
export HF_HOME="/var/lib/mlxfleet/hf"
; also a comment
QUOTED='a b=c'
EMPTY=
"""
    assert service_units.env_file(text, origin="agent.env") == {
        "MLXFLEET_TELEMETRY_ACCESS_KEY_ID": "abc",
        "HF_HOME": "/var/lib/mlxfleet/hf",
        "QUOTED": "a b=c",
        "EMPTY": "",
    }


@pytest.mark.parametrize(
    ("text", "names"),
    [
        pytest.param("NOVALUE", "agent.env:2: 'NOVALUE' is not KEY=VALUE", id="no-equals"),
        pytest.param("1X=y", "agent.env:2: '1X=y'", id="digit-first"),
        pytest.param("A-B=y", "agent.env:2: 'A-B=y'", id="dash"),
    ],
)
def test_bad_env_file_lines_name_file_and_line(text: str, names: str) -> None:
    with pytest.raises(service_units.UnitError, match=names):
        service_units.env_file(f"# first\n{text}\n", origin="agent.env")


def test_bad_env_assignment_names_the_flag() -> None:
    with pytest.raises(service_units.UnitError, match="--env: 'x y' is not KEY=VALUE"):
        service_units.env_assignment("x y")
