"""The macOS doctor's parsers against recorded outputs of the real tools (tests/fixtures/host,
SOURCES.md says where each comes from), and one examination over recorded outputs."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mlxfleet_agent.doctor import parse, probe, watch

MACOS = Path(__file__).resolve().parents[2] / "fixtures" / "host" / "macos"
NOW = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
BY_NAME = {c.argv[0]: c for c in probe.COMMANDS}


def text(name: str) -> str:
    return (MACOS / name).read_text()


@pytest.mark.parametrize(
    ("name", "sleep", "display", "held", "restart"),
    [
        pytest.param("pmset-g-laptop.txt", 1, 10, ("bluetoothd", "coreaudiod"), None, id="laptop"),
        pytest.param(
            "pmset-g-macmini-sonoma-REFORMATTED.txt",
            10,
            10,
            ("sharingd", "powerd", "bluetoothd"),
            True,
            id="mac-mini",
        ),
        pytest.param("pmset-g-headless-ready-CONSTRUCTED.txt", 0, 0, (), True, id="ready"),
        pytest.param("pmset-g-autorestart-off-CONSTRUCTED.txt", 0, 0, (), False, id="no-restart"),
    ],
)
def test_pmset_settings_in_use(
    name: str, sleep: int, display: int, held: tuple[str, ...], restart: bool | None
) -> None:
    got = parse.pmset(text(name))
    assert (got.sleep_minutes, got.display_sleep_minutes) == (sleep, display)
    assert got.sleep_prevented_by == held
    assert got.auto_restart is restart


def test_pmset_ignores_the_system_wide_flags() -> None:
    """`SleepDisabled 0` sits above `Currently in use:` on the laptop; it is not a setting."""
    assert parse.pmset(text("pmset-g-laptop.txt")).sleep_minutes == 1
    with pytest.raises(parse.Unreadable, match="Currently in use"):
        parse.pmset("pmset: command failed\n")


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        pytest.param(
            "softwareupdate-l-update-available-scan.txt", ("macOS Ventura 13.3.1-22E261",), id="one"
        ),
        pytest.param(
            "softwareupdate-l-multiple-updates-available-noscan.txt",
            ("macOS Ventura 13.4 Beta-22F5027f",),  # Command Line Tools need no restart
            id="mixed",
        ),
        pytest.param("softwareupdate-l-no-update-available-scan.txt", (), id="none"),
    ],
)
def test_updates_that_restart_the_mac(name: str, labels: tuple[str, ...]) -> None:
    assert parse.restart_updates(text(name)) == labels


def test_a_failed_scan_is_unreadable_and_says_why() -> None:
    with pytest.raises(parse.Unreadable, match="Scan finished with error"):
        parse.restart_updates(text("softwareupdate-l-error-scan.txt"))


def test_filevault_and_the_thunderbolt_bridge() -> None:
    assert parse.filevault(text("fdesetup-status-on.txt")) == "on"
    assert parse.filevault(text("fdesetup-status-off.txt")) == "off"
    with pytest.raises(parse.Unreadable):
        parse.filevault("Error: unable to get status\n")
    assert parse.thunderbolt_bridge(text("networksetup-listallhardwareports-mbp.txt"))
    bare = text("networksetup-listallhardwareports-no-bridge-CONSTRUCTED.txt")
    assert not parse.thunderbolt_bridge(bare)
    assert parse.restart_power_failure("Restart After Power Failure: On\n")
    with pytest.raises(parse.Unreadable):
        parse.restart_power_failure("You need administrator access to run this tool... exiting!\n")


def outputs(tmp: Path, **files: str) -> Path:
    """An outputs dir: command file name -> fixture name."""
    tmp.mkdir(parents=True, exist_ok=True)
    for command, fixture in files.items():
        shutil.copy(MACOS / fixture, tmp / BY_NAME[command].file)
    return tmp


def test_an_examination_of_a_laptop_set_up_badly(tmp_path: Path) -> None:
    found = probe.examine(
        probe.recorded(
            outputs(
                tmp_path,
                pmset="pmset-g-laptop.txt",
                fdesetup="fdesetup-status-on.txt",
                softwareupdate="softwareupdate-l-update-available-scan.txt",
                networksetup="networksetup-listallhardwareports-no-bridge-CONSTRUCTED.txt",
            )
        ),
        now=NOW,
        updates=True,
        disk_min_free_bytes=1,
    )
    assert (found.sleep_minutes, found.display_sleep_minutes) == (1, 10)
    assert found.sleep_prevented_by == ["bluetoothd", "coreaudiod"]
    assert found.auto_restart is None  # no pmset line, no systemsetup output: does not apply
    assert found.filevault == "on"
    assert found.restart_updates == ["macOS Ventura 13.3.1-22E261"]
    assert found.updates_checked_at == NOW
    assert found.thunderbolt_bridge is False
    assert (found.disk_min_free_bytes, found.errors) == (1, {})


def test_on_linux_no_check_applies_and_nothing_fails(tmp_path: Path) -> None:
    found = probe.examine(probe.recorded(tmp_path), now=NOW, updates=True)
    assert found.model_dump(exclude={"checked_at", "errors"}, exclude_defaults=True) == {}
    assert found.errors == {}


def test_unreadable_outputs_are_errors_of_their_check(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / probe.PMSET.file).write_text("pmset: bad option\n")
    (tmp_path / probe.SOFTWAREUPDATE.file).write_text(text("softwareupdate-l-error-scan.txt"))
    found = probe.examine(probe.recorded(tmp_path), now=NOW, updates=True)
    assert set(found.errors) == {"sleep", "auto-restart", "os-update"}
    assert "Scan finished with error" in found.errors["os-update"]
    assert found.sleep_minutes is None


def test_softwareupdate_runs_on_its_own_interval_and_is_carried_over(tmp_path: Path) -> None:
    outputs(tmp_path, softwareupdate="softwareupdate-l-update-available-scan.txt")
    clock = iter([0.0, 60.0, 22_000.0])
    doctor = watch.Doctor(
        outputs_dir=tmp_path, updates_interval_s=21_600, clock=lambda: next(clock)
    )
    first = doctor.examine()
    assert first.restart_updates == ["macOS Ventura 13.3.1-22E261"]
    shutil.copy(
        MACOS / "softwareupdate-l-no-update-available-scan.txt",
        tmp_path / probe.SOFTWAREUPDATE.file,
    )
    second = doctor.examine()  # a minute later: softwareupdate is not asked again
    assert second.restart_updates == first.restart_updates
    assert second.updates_checked_at == first.updates_checked_at
    third = doctor.examine()  # six hours later it is
    assert third.restart_updates == []
    assert doctor.report() == third


def test_a_command_that_outlasts_its_timeout_is_an_error() -> None:
    def slow(command: probe.Command) -> str | None:
        if command is probe.FDESETUP:
            raise probe.Failed("`fdesetup status` took over 10 s")
        return None

    found = probe.examine(slow, now=NOW, updates=False)
    assert found.errors == {"filevault": "`fdesetup status` took over 10 s"}


def test_outputs_larger_than_the_report_allows_are_cut_never_refused(tmp_path: Path) -> None:
    """Thirty processes holding sleep off, sixty updates to restart for: the report keeps what
    its fields hold (bad input never stops the examination)."""
    held = ", ".join(f"proc{i}" for i in range(30))
    (tmp_path / probe.PMSET.file).write_text(
        f"Currently in use:\n sleep                5 (sleep prevented by {held})\n"
    )
    updates = "".join(
        f"* Label: Update {i}\n\tTitle: Update {i}, Version: 1, Size: 1K, Action: restart, \n"
        for i in range(60)
    )
    (tmp_path / probe.SOFTWAREUPDATE.file).write_text(
        "Software Update Tool\n\n"
        f"Software Update found the following new or updated software:\n{updates}"
    )
    found = probe.examine(probe.recorded(tmp_path), now=NOW, updates=True)
    assert (len(found.sleep_prevented_by), len(found.restart_updates)) == (20, 50)
    assert found.errors == {}
