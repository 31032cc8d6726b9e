"""`mlxfleet-agent systemd-unit` / `launchd-plist` as a person runs them: environment options,
the result checked by systemd's own `systemd-analyze verify` and by plistlib, clear errors."""

from __future__ import annotations

import os
import plistlib
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.agent.test_serve_options import _agent_cli


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_systemd_unit_with_an_environment_file_passes_systemd_analyze(tmp_path: Path) -> None:
    env_file = tmp_path / "agent.env"
    env_file.write_text("MLXFLEET_TELEMETRY_ACCESS_KEY_ID=k\n")
    user = pwd.getpwuid(os.geteuid()).pw_name
    made = _agent_cli(
        "systemd-unit",
        "--program", sys.executable,
        "--user", user,
        "--env", "HF_HOME=/var/lib/mlxfleet/hf",
        "--env-file", str(env_file),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert f"EnvironmentFile={env_file}" in made.stdout.splitlines()
    unit = tmp_path / "mlxfleet-agent.service"
    unit.write_text(made.stdout)
    verified = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False
    )
    assert verified.returncode == 0, verified.stderr
    assert [line for line in verified.stderr.splitlines() if unit.name in line] == []


def test_launchd_plist_copies_the_environment_file_and_env_wins(tmp_path: Path) -> None:
    env_file = tmp_path / "agent.env"
    env_file.write_text("# keys\nMLXFLEET_TELEMETRY_SECRET_ACCESS_KEY=s3cret\nHF_HOME=/a\n")
    made = _agent_cli(
        "launchd-plist",
        "--program", "/opt/mlxfleet/bin/mlxfleet-agent",
        "--user", "_mlxfleet",
        "--env-file", str(env_file),
        "--env", "HF_HOME=/var/lib/mlxfleet/hf",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    plist = plistlib.loads(made.stdout.encode())
    assert plist["EnvironmentVariables"] == {
        "PYTHONUNBUFFERED": "1",
        "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY": "s3cret",
        "HF_HOME": "/var/lib/mlxfleet/hf",
    }
    assert plist["UserName"] == "_mlxfleet"


@pytest.mark.parametrize(
    ("args", "names"),
    [
        pytest.param(["systemd-unit", "--env", "1X=y"], "--env: '1X=y'", id="bad-env"),
        pytest.param(["systemd-unit", "--env-file", "agent.env"], "absolute", id="relative-file"),
        pytest.param(
            ["launchd-plist", "--env-file", "/nonexistent/agent.env"],
            "/nonexistent/agent.env",
            id="missing-file",
        ),
    ],
)
def test_bad_environment_options_exit_2_naming_them(args: list[str], names: str) -> None:
    done = _agent_cli(*args)
    assert done.returncode == 2
    assert names in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
