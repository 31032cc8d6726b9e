"""`mlxfleet-agent serve` options without any backend: config file, TLS on the control API, data
plane API keys, token handling, clean exit, state file; and the service-definition subcommands."""

from __future__ import annotations

import json
import plistlib
import signal
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import trustme

from tests.integration.agent.conftest import Agent


def _agent_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlxfleet_agent.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_config_file_tls_and_data_keys(agent_factory: Callable[..., Agent], tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    (tmp_path / "token").write_text("s3cret-token\n")
    (tmp_path / "keys").write_text("# data plane keys\nkey-one\nkey-two\n")
    (tmp_path / "agent.yaml").write_text(
        f"tlsCert: {tmp_path / 'server.pem'}\n"
        f"tls_key: {tmp_path / 'server.key'}\n"
        f"tokenFile: {tmp_path / 'token'}\n"
        f"dataApiKeysFile: {tmp_path / 'keys'}\n"
        "queueLimit: 3\n"
    )
    agent = agent_factory(extra=["--config", str(tmp_path / "agent.yaml")])
    assert not (agent.state_dir / "token").exists(), "the token file given is used"
    control = agent.control_url.replace("http://", "https://")
    verify = ssl.create_default_context(cafile=None)
    ca.configure_trust(verify)
    ok = httpx.get(
        control + "/v1/state", headers={"Authorization": "Bearer s3cret-token"}, verify=verify
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["dataPort"] == int(agent.data_url.rsplit(":", 1)[1])
    denied = httpx.get(control + "/v1/state", headers={"Authorization": "Bearer x"}, verify=verify)
    assert denied.status_code == 401
    assert denied.headers["www-authenticate"] == "Bearer"
    with pytest.raises(httpx.HTTPError):
        httpx.get(agent.control_url + "/v1/state", timeout=5)  # plain HTTP on a TLS port

    no_key = httpx.get(agent.data_url + "/v1/models")
    assert no_key.status_code == 401
    assert no_key.json()["error"]["code"] == "invalid_api_key"
    with_key = httpx.get(agent.data_url + "/v1/models", headers={"Authorization": "Bearer key-two"})
    assert with_key.status_code == 200
    assert with_key.json() == {"object": "list", "data": []}
    assert agent.stop(signal.SIGINT) == 0


def test_openapi_is_served_and_every_v1_route_needs_the_token(
    agent_factory: Callable[..., Agent],
) -> None:
    agent = agent_factory()
    spec = httpx.get(agent.control_url + "/openapi.json").json()
    routes = [(m.upper(), p) for p, ops in spec["paths"].items() for m in ops]
    assert ("PUT", "/v1/slots/{name}") in routes
    assert ("GET", "/v1/slots/{name}/swaps") in routes
    assert ("POST", "/v1/models/prefetch") in routes
    for method, path in routes:
        if not path.startswith("/v1/"):
            continue
        url = agent.control_url + path.replace("{name}", "x").replace("{model_id}", "x")
        resp = httpx.request(method, url, json={})
        assert resp.status_code == 401, (method, path)
    assert agent.stop() == 0


def test_desired_state_file_is_written_atomically(
    agent_factory: Callable[..., Agent], tmp_path: Path
) -> None:
    models = tmp_path / "models"
    agent = agent_factory()
    resp = agent.put_slot(
        "s",
        {"source": "hf://org/not-here", "servedName": "remote"},
    )
    assert resp.status_code == 202, resp.text
    saved = json.loads((agent.state_dir / "slots.json").read_text())
    assert saved["slots"]["s"]["servedName"] == "remote"
    assert not list(agent.state_dir.glob(".slots.json.*"))
    assert agent.api("DELETE", "/v1/slots/s").status_code == 202
    saved = json.loads((agent.state_dir / "slots.json").read_text())
    assert saved["slots"] == {}
    assert models.exists()
    assert agent.stop() == 0


def test_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text("stateDir: /tmp/x\nmodelsDir: /tmp/y\ncolour: blue\n")
    done = _agent_cli("serve", "--config", str(tmp_path / "agent.yaml"))
    assert done.returncode == 2
    assert "colour" in done.stderr


def test_launchd_plist_and_systemd_unit_commands() -> None:
    plist = _agent_cli(
        "launchd-plist",
        "--program",
        "/usr/local/bin/mlxfleet-agent",
        "--",
        "--state-dir",
        "/var/lib/mlxfleet",
        "--models-dir",
        "/var/lib/mlxfleet/models",
    )
    assert plist.returncode == 0, plist.stderr
    parsed = plistlib.loads(plist.stdout.encode())
    assert parsed["KeepAlive"] is True
    assert parsed["ProgramArguments"] == [
        "/usr/local/bin/mlxfleet-agent",
        "serve",
        "--state-dir",
        "/var/lib/mlxfleet",
        "--models-dir",
        "/var/lib/mlxfleet/models",
    ]
    unit = _agent_cli("systemd-unit", "--program", "/usr/bin/mlxfleet-agent", "--user", "mlx")
    assert unit.returncode == 0, unit.stderr
    assert (
        "ExecStart=/usr/bin/mlxfleet-agent serve --config /etc/mlxfleet/agent.yaml" in unit.stdout
    )
    assert "User=mlx" in unit.stdout


def test_backends_left_by_a_dead_agent_are_killed_on_start(
    agent_factory: Callable[..., Agent], tmp_path: Path
) -> None:
    """The macOS path (no PR_SET_PDEATHSIG): backends.json names survivors; the next agent kills
    them, and only processes that are still the recorded ones (pid + start time + mlx_lm)."""
    from mlxfleet_agent.backends import orphans

    state_dir = tmp_path / "state"
    survivor = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "mlx_lm", "server"],
        start_new_session=True,
    )
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        orphans.record(state_dir, [survivor.pid, bystander.pid])
        agent_factory(state_dir=state_dir)
        assert survivor.wait(timeout=10) == -signal.SIGKILL
        assert bystander.poll() is None, "a process that is not a backend was killed"
        assert (
            not (state_dir / orphans.BACKENDS_FILE).exists()
            or json.loads((state_dir / orphans.BACKENDS_FILE).read_text()) == []
        )
    finally:
        for proc in (survivor, bystander):
            proc.kill()
            proc.wait()


def _serve_fails(tmp_path: Path, *flags: str) -> str:
    done = _agent_cli(
        "serve",
        "--state-dir",
        str(tmp_path / "state"),
        "--models-dir",
        str(tmp_path / "models"),
        "--control-port",
        "0",
        "--data-port",
        "0",
        "--no-caffeinate",
        *flags,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert "[Errno" not in done.stderr, done.stderr
    return done.stderr


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        pytest.param(
            ["--tls-cert", "/nowhere/cert.pem", "--tls-key", "/nowhere/key.pem"],
            ["--tls-cert", "/nowhere/cert.pem", "no such file"],
            id="missing-tls-file",
        ),
        pytest.param(
            ["--tls-cert", "GARBAGE", "--tls-key", "GARBAGE"],
            ["--tls-cert", "GARBAGE", "PEM"],
            id="tls-file-not-pem",
        ),
        pytest.param(
            ["--bind", "203.0.113.7"],
            ["--bind", "203.0.113.7", "address of this machine"],
            id="bind-not-local",
        ),
        pytest.param(["--bind", "no such host!"], ["--bind", "no such host!"], id="bind-garbage"),
        pytest.param(
            ["--token-file", "/nowhere/token"],
            ["--token-file", "/nowhere/token", "does not exist"],
            id="token-file-missing",
        ),
        pytest.param(
            ["--token-file", "DIRECTORY"],
            ["--token-file", "DIRECTORY", "not a readable file"],
            id="token-file-is-a-directory",
        ),
        pytest.param(
            ["--data-api-keys-file", "/nowhere/keys"],
            ["--data-api-keys-file", "/nowhere/keys"],
            id="keys-file-missing",
        ),
        pytest.param(
            ["--data-api-keys-file", "COMMENTS"],
            ["--data-api-keys-file", "COMMENTS", "has no keys"],
            id="keys-file-without-a-key",
        ),
        pytest.param(
            ["--data-api-keys-file", "BINARY"],
            ["--data-api-keys-file", "BINARY", "not UTF-8"],
            id="keys-file-not-text",
        ),
        pytest.param(
            ["--peer-token-file", "COMMENTS"],
            ["--peer-token-file", "COMMENTS", "at least 16"],
            id="peer-token-too-short",
        ),
        pytest.param(
            ["--state-dir", "/proc/mlxfleet-state"],
            ["--state-dir", "/proc/mlxfleet-state"],
            id="state-dir-not-writable",
        ),
    ],
)
def test_startup_errors_name_the_flag_the_value_and_what_to_do(
    tmp_path: Path, flags: list[str], needles: list[str]
) -> None:
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "comments").write_text("# no key here\n\n")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00key\n")
    swap = {
        "GARBAGE": str(tmp_path / "garbage.pem"),
        "DIRECTORY": str(tmp_path / "a-directory"),
        "COMMENTS": str(tmp_path / "comments"),
        "BINARY": str(tmp_path / "binary"),
    }
    stderr = _serve_fails(tmp_path, *[swap.get(f, f) for f in flags])
    for needle in needles:
        assert swap.get(needle, needle) in stderr, stderr


def test_port_in_use_names_the_flag_and_the_port(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        stderr = _serve_fails(tmp_path, "--data-port", str(port))  # the last --data-port wins
    assert f"--data-port {port}" in stderr, stderr
    assert "in use" in stderr
