"""`mlxfleet-operator` flags: bad values exit 2 naming the flag, never a traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mlxfleet_operator import main


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        pytest.param(["--misses", "0"], "--misses", id="zero-misses"),
        pytest.param(["--poll-seconds", "-1"], "--poll-seconds", id="negative-poll"),
        pytest.param(["--misses", "many"], "--misses", id="not-a-number"),
        pytest.param(["--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig", id="no-file"),
        pytest.param(["-A", "-n", "team"], "not allowed with", id="scope-conflict"),
        pytest.param(
            ["--provider-keys-namespace", "x" * 64], "--provider-keys-namespace", id="long-ns"
        ),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    argv: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main.parse(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert names in err
    assert "Traceback" not in err


def test_good_flags(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    settings = main.parse(
        ["--kubeconfig", str(kubeconfig), "-n", "a", "-n", "b", "--misses", "2", "--standalone"]
    )
    assert settings.kubeconfig == str(kubeconfig)
    assert settings.namespaces == ("a", "b")
    assert settings.misses == 2
    assert settings.standalone


def test_swap_prefetch_is_on_unless_turned_off() -> None:
    assert main.parse([]).swap_prefetch
    assert main.parse(["--swap-prefetch"]).swap_prefetch
    assert not main.parse(["--no-swap-prefetch"]).swap_prefetch


def test_provider_keys_are_looked_for_in_the_pod_namespace_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert main.parse([]).provider_keys_namespace == "ops"
    assert main.parse(["--provider-keys-namespace", "gw"]).provider_keys_namespace == "gw"


def test_election_is_on_by_default_with_pod_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "mlxfleet-operator-7d9f-abcde")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    settings, election = main.parse_all([])
    assert not settings.standalone
    assert election.identity.startswith("mlxfleet-operator-7d9f-abcde_")
    assert election.namespace == "ops"
    assert election.lease_name == "mlxfleet-operator"
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (3, 2, 0.5)
    _, other = main.parse_all([])
    assert other.identity != election.identity  # a restarted container is a new candidate


def test_standalone_means_no_election() -> None:
    settings, election = main.parse_all(["--standalone", "--lease-name", "other"])
    assert settings.standalone
    assert election.lease_name == "other"  # only to check that no elected leader runs


def test_election_flags() -> None:
    _, election = main.parse_all(
        [
            "--leader-election-namespace", "mlx", "--lease-name", "ops-lease",
            "--identity", "me", "--lease-duration", "15", "--renew-deadline", "10",
            "--retry-period", "2",
        ]
    )  # fmt: skip
    assert (election.namespace, election.lease_name, election.identity) == (
        "mlx",
        "ops-lease",
        "me",
    )
    assert election.timing.margin == 5


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        pytest.param(["--renew-deadline", "3"], "--renew-deadline", id="deadline-not-below-lease"),
        pytest.param(["--retry-period", "2"], "--retry-period", id="retry-not-below-deadline"),
        pytest.param(["--lease-duration", "0"], "--lease-duration", id="zero-lease"),
        pytest.param(["--lease-duration", "2.5"], "--lease-duration", id="not-whole-seconds"),
        pytest.param(["--leader-election-namespace", ""], "--leader-election-namespace", id="ns"),
    ],
)
def test_bad_election_flags_exit_2_naming_the_flag(
    argv: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main.parse_all(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert names in err
    assert "Traceback" not in err


def test_kopf_peering_flags_are_deprecated_not_fatal(capsys: pytest.CaptureFixture[str]) -> None:
    settings, _ = main.parse_all(["--priority", "100", "--peering-name", "old"])
    assert not settings.standalone
    assert "deprecated and ignored" in capsys.readouterr().err


def test_an_unusable_kubeconfig_exits_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # main sets KUBECONFIG and configures logging: keep both from leaking into other tests
    monkeypatch.setenv("KUBECONFIG", "unset-by-this-test")
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)
    httpx_log = logging.getLogger("httpx")
    monkeypatch.setattr(httpx_log, "level", httpx_log.level)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")  # readable, but no cluster, user or context
    with pytest.raises(SystemExit) as exit_info:
        main.main(["--kubeconfig", str(kubeconfig), "--standalone"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--kubeconfig {kubeconfig}" in err
    assert "Traceback" not in err
