"""`mlxfleet-gateway` flags: secure by default, a bad flag exits 2 naming it, `new-key` prints a
key once and a Secret that holds only its hash."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mlxfleet_gateway import cli
from mlxfleet_gateway.core import keys

FLEET_KEY = "a" * 32


def fleet_key_file(tmp_path: Path, text: str = FLEET_KEY + "\n") -> str:
    path = tmp_path / "fleet-key"
    path.write_text(text)
    return str(path)


def test_the_documented_command_line_parses_secure_by_default(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    key = ["--fleet-key-file", fleet_key_file(tmp_path)]
    cfg = cli.parse(["--kubeconfig", str(kubeconfig), "--listen", "127.0.0.1:8080", *key])
    assert (cfg.kubeconfig, cfg.listen, cfg.allow_anonymous) == (
        str(kubeconfig),
        ("127.0.0.1", 8080),
        False,
    )
    assert cfg.metrics_listen is None
    assert cfg.affinity
    limits = (cfg.max_header_bytes, cfg.header_timeout_s, cfg.body_timeout_s, cfg.max_connections)
    assert limits == (32 * 1024, 10.0, 60.0, 4096)
    assert cli.parse(["--listen", "[::1]:0", "--allow-anonymous", *key]).allow_anonymous


def test_without_a_fleet_key_it_runs_only_when_told_agents_are_open(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No fleet key: agents would get requests without a credential; refused unless
    --allow-open-data-plane says their data planes take them."""
    with pytest.raises(SystemExit) as info:
        cli.parse(["--listen", ":1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--fleet-key-file" in err
    assert "--allow-open-data-plane" in err
    assert cli.parse(["--listen", ":1", "--allow-open-data-plane"]).fleet_key is None


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
        pytest.param(
            ["--listen", ":1", "--allow-open-data-plane", "--max-attempts", "0"],
            "--max-attempts",
            id="attempts",
        ),
        pytest.param([], "--listen", id="missing"),
        *(
            pytest.param(
                ["--listen", ":1", "--allow-open-data-plane", flag, "0"], flag, id=flag[2:]
            )
            for flag in (
                "--max-header-bytes",
                "--header-timeout-s",
                "--body-timeout-s",
                "--max-connections",
            )
        ),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.parse(argv)
    assert info.value.code == 2
    assert named in capsys.readouterr().err


def test_the_fleet_key_file_is_read_and_its_first_key_is_current(tmp_path: Path) -> None:
    text = f"# the fleet key\n{FLEET_KEY}\n{'b' * 40}\n"
    cfg = cli.parse(["--listen", ":1", "--fleet-key-file", fleet_key_file(tmp_path, text)])
    assert cfg.fleet_key == FLEET_KEY
    assert FLEET_KEY not in repr(cfg)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param("", "no key in the file", id="empty"),
        pytest.param("# only a comment\n", "no key in the file", id="comment"),
        pytest.param("short\n", "at least 32", id="short"),
        pytest.param("a b" * 20 + "\n", "without spaces", id="spaces"),
        pytest.param("\n".join(["c" * 32] * 5), "at most 4", id="too-many"),
        pytest.param(b"\xff\xfe" * 20, "not UTF-8", id="binary"),
    ],
)
def test_a_malformed_fleet_key_file_exits_2_naming_it(
    tmp_path: Path, text: str | bytes, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "fleet-key"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(SystemExit) as info:
        cli.parse(["--listen", ":1", "--fleet-key-file", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"--fleet-key-file {path}" in err
    assert said in err


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


@pytest.mark.parametrize(
    ("flags", "named", "allowed"),
    [
        pytest.param(
            ["--expires-at", "2020-01-01T00:00:00Z"], "--expires-at", "in the future", id="expired"
        ),
        pytest.param(
            ["--namespaces", "Team A,default"], "--namespaces: 'Team A'", "DNS-1123", id="ns-space"
        ),
        pytest.param(["--namespaces", "team_a"], "--namespaces: 'team_a'", "DNS-1123", id="ns-_"),
        pytest.param(["--namespaces", "a" * 64], "--namespaces", "at most 63", id="ns-long"),
        pytest.param(["--name", "Bad_Name"], "--name: 'Bad_Name'", "DNS-1123", id="name"),
        pytest.param(["--name", "x" * 254], "--name", "at most 253", id="name-long"),
        pytest.param(["--name", "app-"], "--name: 'app-'", "ending with", id="name-dash"),
        pytest.param(
            ["--secret-namespace", "Keys"], "--secret-namespace: 'Keys'", "DNS-1123", id="secret-ns"
        ),
        pytest.param(["--requests-per-minute", "0"], "--requests-per-minute", "1", id="rpm"),
        pytest.param(["--expires-at", "2027-01-01"], "--expires-at", "time zone", id="no-zone"),
    ],
)
def test_new_key_refuses_bad_input_before_printing_a_key(
    flags: list[str], named: str, allowed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """New-user test: an expired key, a namespace that cannot exist and a name the API server
    refuses were all minted; the key was printed, then `kubectl apply` failed or nothing matched."""
    base = {"--name": "app", "--namespaces": "team-a"}
    base.update(dict(zip(flags[::2], flags[1::2], strict=True)))
    argv = ["new-key", *(x for kv in base.items() for x in kv)]
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert keys.KEY_PREFIX not in err
    assert "API key" not in err
    error = err.strip().splitlines()[-1]  # after the usage, which lists every option
    assert error.startswith("mlxfleet-gateway new-key: error: ")
    assert named in error
    assert allowed in error


def test_new_key_takes_every_kind_of_good_input(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["new-key", "--name", "search-app.v2", "--namespaces", "team-a, shared,*"]
    argv += ["--secret-namespace", "keys", "--expires-at", "2999-12-31T00:00:00+01:00"]
    assert cli.main(argv) == 0
    secret = json.loads(capsys.readouterr().out)
    assert secret["metadata"] == {"name": "search-app.v2", "namespace": "keys"}


def test_minted_checks_against_the_given_clock() -> None:
    """Pure: `now_utc` is the caller's; a Secret written before (the watch) is not re-judged."""
    data = {"keyHash": "0" * 64, "namespaces": "team-a", "expiresAt": "2026-06-01T00:00:00Z"}
    before = datetime(2026, 5, 31, tzinfo=UTC)
    assert keys.minted("app", data, namespace="ns", now_utc=before).name == "app"
    with pytest.raises(keys.InvalidKey) as info:
        keys.minted("app", data, namespace="ns", now_utc=datetime(2026, 6, 1, tzinfo=UTC))
    assert [field for field, _ in info.value.problems] == ["expiresAt"]
    assert "API-key Secret app: expiresAt: " in str(info.value)
    old = {**data, "namespaces": "Team A,default"}
    assert keys.from_secret("app", old).scope == ("Team A", "default")
