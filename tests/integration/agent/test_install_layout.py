"""docs/agent.md "Install", run as written in a temporary root, then the agent run by its unit.

Issue 15 item 10: `pip install "mlxfleet[agent]"` could not work (not published), the documented
directories and token were root's while the units run as a service user ("Permission denied"),
and nothing could pass telemetry credentials or HF_HOME through the generated units.

Here: the wheel is built from this checkout and installed into a fresh venv; the layout is made
by the documented `install` commands (paths moved under a temporary root, `sudo` dropped); the
systemd unit and the launchd plist come from the installed `mlxfleet-agent`; then the agent is
started the way systemd would start that unit (its ExecStart, Environment= and EnvironmentFile=,
as its User when the suite runs as root: `nobody`), answers over TLS with the token, and ships
telemetry to a real S3 bucket with the keys from the environment file.
"""

from __future__ import annotations

import grp
import json
import os
import plistlib
import pwd
import shlex
import shutil
import signal
import ssl
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mlxfleet_agent import service_units
from mlxfleet_operator.dev import processes
from tests.support import docs
from tests.support import s3 as s3support

pytestmark = [pytest.mark.slow, pytest.mark.s3]
REPO = Path(__file__).resolve().parents[3]
SYSTEM_PYTHON = Path("/usr/bin/python3.11")  # world-readable, unlike a pyenv under /root
NODE = "mac-studio-1"


@pytest.fixture
def root() -> Iterator[Path]:
    """A temporary `/`, traversable by another user (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="mlxfleet-install-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _account() -> tuple[str, str, str]:
    """(user, group, python for the venv): `nobody` as root (a real service user), else us."""
    if os.geteuid() == 0 and SYSTEM_PYTHON.exists():
        user = pwd.getpwnam("nobody")
        return user.pw_name, grp.getgrgid(user.pw_gid).gr_name, str(SYSTEM_PYTHON)
    me = pwd.getpwuid(os.geteuid())
    return me.pw_name, grp.getgrgid(os.getegid()).gr_name, sys.executable


def _moved(root: Path) -> dict[str, str]:
    """The documented absolute paths, under `root`."""
    return {
        p: f"{root}{p}"
        for p in (
            "/opt/mlxfleet",
            "/etc/mlxfleet",
            "/var/lib/mlxfleet",
            "/var/log/mlxfleet",
            "/etc/systemd/system",
            "/Library/LaunchDaemons",
        )
    }


def _unit_environment(unit: str) -> tuple[list[str], dict[str, str]]:
    """ExecStart argv and the environment systemd would give it (Environment=, EnvironmentFile=)."""
    argv: list[str] = []
    env: dict[str, str] = {}
    for line in unit.splitlines():
        key, _, value = line.partition("=")
        if key == "ExecStart":
            argv = shlex.split(value)
        elif key == "Environment":
            for word in shlex.split(value.replace("%%", "%")):
                env.update([service_units.env_assignment(word)])
        elif key == "EnvironmentFile":
            env |= service_units.env_file(Path(value).read_text(), origin=value)
    return argv, env


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"agent exited {proc.returncode}:\n{log.read_text()}")
        for line in log.read_text(errors="replace").splitlines():
            if '"agent ready"' in line:
                ready: dict[str, Any] = json.loads(line)
                return ready
        time.sleep(0.1)
    raise AssertionError(f"agent never became ready:\n{log.read_text()}")


def test_documented_install_runs_the_agent_as_its_service_user(
    s3_server: s3support.S3Server, root: Path
) -> None:
    user, group, python = _account()
    work = root / "admin"  # the admin's working directory: wheel, credentials, config, env
    work.mkdir()
    for folder in ("/etc/systemd/system", "/Library/LaunchDaemons"):
        Path(f"{root}{folder}").mkdir(parents=True)

    # the wheel, from this checkout, copied "to the Mac"
    dist = root / "dist"
    built = docs.run_block(
        "agent.md", "agent-wheel", cwd=REPO, replace={"python3.11": sys.executable,
                                                      "--wheel-dir dist": f"--wheel-dir {dist}"}
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("*.whl")
    shutil.copy(wheel, work / wheel.name)

    # the Mac's credentials (install.md step 2), its config and its environment file
    made = docs.run_block(
        "install.md", "credentials", cwd=work,
        replace={"mac-studio-1.lan": "localhost", "192.168.1.20": "127.0.0.1"},
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    bucket = s3_server.make_bucket()
    moved = _moved(root)
    config_text = (REPO / "manifests" / "agent" / "agent.yaml").read_text()
    for old, new in moved.items():
        config_text = config_text.replace(old, new)
    config = yaml.safe_load(config_text)
    assert config["nodeName"] == NODE
    control_port, data_port = processes.free_ports(2)
    config |= {
        "bind": "127.0.0.1",
        "controlPort": control_port,
        "dataPort": data_port,
        "allowedRoots": [],
        "caffeinate": False,
        "telemetryBucket": bucket,
        "telemetryPrefix": "fleet",
        "telemetryEndpointUrl": s3_server.endpoint_url,
        "telemetryRegion": s3_server.region,
        "telemetryIntervalS": 1,
    }
    (work / "agent.yaml").write_text(yaml.safe_dump(config))
    env_example = (REPO / "manifests" / "agent" / "agent.env.example").read_text()
    env_text = env_example.replace(
        "MLXFLEET_TELEMETRY_ACCESS_KEY_ID=replace-me",
        f"MLXFLEET_TELEMETRY_ACCESS_KEY_ID={s3_server.access_key}",
    ).replace(
        "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY=replace-me",
        f"MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY={s3_server.secret_key}",
    )
    for old, new in moved.items():
        env_text = env_text.replace(old, new)
    (work / "agent.env").write_text(env_text)

    # the layout and both units, as documented
    replace = {
        "sudo sh -c": "sh -c",
        "sudo ": "",
        "python3.11": python,
        "AGENT_USER=mlxfleet AGENT_GROUP=mlxfleet": f"AGENT_USER={user} AGENT_GROUP={group}",
        **moved,
    }
    done = docs.run_block(
        "agent.md", ("agent-layout", "agent-systemd", "agent-launchd"), cwd=work, replace=replace
    )
    assert done.returncode == 0, done.stdout + done.stderr

    etc, state = Path(moved["/etc/mlxfleet"]), Path(moved["/var/lib/mlxfleet"])
    uid = pwd.getpwnam(user).pw_uid
    for path, owner, mode in [
        (etc / "token", uid, 0o600),
        (etc / "tls.key", uid, 0o600),
        (etc / "agent.env", os.geteuid(), 0o600),
        (state, uid, 0o750),
        (state / "models", uid, 0o750),
        (Path(moved["/var/log/mlxfleet"]), uid, 0o750),
    ]:
        st = path.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (owner, mode), path

    unit_path = Path(moved["/etc/systemd/system"]) / "mlxfleet-agent.service"
    unit = unit_path.read_text()
    assert f"User={user}" in unit
    assert f"EnvironmentFile={etc}/agent.env" in unit
    if shutil.which("systemd-analyze"):
        verified = subprocess.run(
            ["systemd-analyze", "verify", str(unit_path)], capture_output=True, text=True
        )
        assert verified.returncode == 0, verified.stderr
        complaints = [
            line
            for line in verified.stderr.splitlines()
            if "mlxfleet-agent.service" in line and "Special user nobody" not in line  # stand-in
        ]
        assert complaints == [], verified.stderr

    plist_path = Path(moved["/Library/LaunchDaemons"]) / "io.mlxfleet.agent.plist"
    assert stat.S_IMODE(plist_path.stat().st_mode) == 0o600  # it holds the telemetry keys
    plist = plistlib.loads(plist_path.read_bytes())
    assert plist["UserName"] == user
    assert plist["ProgramArguments"][0] == f"{moved['/opt/mlxfleet']}/bin/mlxfleet-agent"
    assert plist["EnvironmentVariables"]["MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY"] == (
        s3_server.secret_key
    )
    assert plist["EnvironmentVariables"]["HF_HOME"] == f"{state}/hf"

    # start it the way systemd starts that unit
    argv, env = _unit_environment(unit)
    assert argv == plist["ProgramArguments"]
    assert argv[1:] == ["serve", "--config", "/etc/mlxfleet/agent.yaml"]  # the default
    argv[-1] = f"{etc}/agent.yaml"  # moved, like every documented path
    log = root / "agent.log"
    as_user: dict[str, Any] = {}
    if os.geteuid() != uid:
        as_user = {"user": uid, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            env={"PATH": "/usr/bin:/bin", **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd="/",
            **as_user,
        )
    try:
        ready = _wait_ready(proc, log)
        assert ready["control_port"] == control_port
        verify = ssl.create_default_context(cafile=str(work / "mlxfleet-ca.crt"))
        token = (etc / "token").read_text().strip()
        answer = httpx.get(
            f"https://localhost:{control_port}/v1/state",
            headers={"Authorization": f"Bearer {token}"},
            verify=verify,
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        environ = Path(f"/proc/{proc.pid}/environ")
        if environ.exists():
            assert f"HF_HOME={state}/hf".encode() in environ.read_bytes().split(b"\0")
        client = s3_server.client()
        keys: list[str] = []
        deadline = time.monotonic() + 30
        while not keys and time.monotonic() < deadline:
            listed = client.list_objects_v2(Bucket=bucket, Prefix="fleet/")
            keys = [o["Key"] for o in listed.get("Contents", [])]
            time.sleep(0.2)
        assert keys, f"no telemetry shipped:\n{log.read_text()}"
        assert all(f"/node={NODE}/" in k for k in keys), keys
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    assert rc == 0, log.read_text()
    assert "Permission denied" not in log.read_text()
    written = [p for p in state.rglob("*") if p.is_file()]
    assert written, "the agent wrote no state"
    assert {p.stat().st_uid for p in written} == {uid}
