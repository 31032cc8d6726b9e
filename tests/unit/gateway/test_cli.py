"""`mlxfleet-gateway` flags: secure by default, a bad flag exits 2 naming it, `new-key` prints a
key once and a Secret that holds only its hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxfleet_gateway import cli
from mlxfleet_gateway.core import keys


def test_the_documented_command_line_parses_secure_by_default(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    cfg = cli.parse(["--kubeconfig", str(kubeconfig), "--listen", "127.0.0.1:8080"])
    assert (cfg.kubeconfig, cfg.listen, cfg.allow_anonymous) == (
        str(kubeconfig),
        ("127.0.0.1", 8080),
        False,
    )
    assert cfg.metrics_listen is None
    assert cfg.affinity
    assert cli.parse(["--listen", "[::1]:0", "--allow-anonymous"]).allow_anonymous


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        pytest.param(["--listen", "nope"], "--listen", id="listen"),
        pytest.param(
            ["--listen", ":1", "--metrics-listen", "x:99999"], "--metrics-listen", id="metrics"
        ),
        pytest.param(
            ["--listen", ":1", "--kubeconfig", "/no/such/file"], "--kubeconfig", id="kubeconfig"
        ),
        pytest.param(
            ["--listen", ":1", "--fleet-key-file", "/no/such/key"],
            "--fleet-key-file",
            id="key-file",
        ),
        pytest.param(["--listen", ":1", "--max-attempts", "0"], "--max-attempts", id="attempts"),
        pytest.param([], "--listen", id="missing"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.parse(argv)
    assert info.value.code == 2
    assert named in capsys.readouterr().err


def test_the_fleet_key_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "fleet-key"
    path.write_text("# the fleet credential\nsecret-value\n")
    assert cli.parse(["--listen", ":1", "--fleet-key-file", str(path)]).fleet_key == "secret-value"


def test_new_key_prints_the_key_once_and_a_secret_with_its_hash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        cli.main(
            [
                "new-key",
                "--name",
                "app",
                "--namespaces",
                "team-a",
                "--team",
                "t",
                "--requests-per-minute",
                "5",
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    key = err.split(": ", 1)[1].strip()
    secret = json.loads(out)
    assert secret["type"] == keys.SECRET_TYPE
    assert secret["stringData"]["keyHash"] == keys.hash_key(key)
    assert key not in out
    parsed = keys.from_secret("app", secret["stringData"])
    assert (parsed.spec.team, parsed.spec.requests_per_minute) == ("t", 5)
