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
