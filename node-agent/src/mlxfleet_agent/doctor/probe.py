"""Runs the doctor's commands (each with a timeout) and folds their parsed outputs into one
`contract.DoctorReport`.

A missing command means the check does not apply here (Linux has no pmset): its figure stays
absent, never a failure. A command that fails, times out or prints something else is reported
in `errors` under its check. `outputs_dir` replaces running the commands with reading their
recorded outputs, one file per command (`COMMANDS` names them; a missing file: the command is
missing): tests drive the doctor with it, and a Mac where the agent's user may not run a command
(`softwareupdate -l` wants the network, `systemsetup` wants an administrator) can have a root
job write the output there instead.
May import: the standard library, contract, doctor.parse. Called by: doctor.watch.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from mlxfleet_agent import contract
from mlxfleet_agent.doctor import parse


@dataclass(frozen=True, slots=True)
class Command:
    argv: tuple[str, ...]
    file: str  # its recorded output's name in `outputs_dir`
    timeout_s: float


PMSET = Command(("pmset", "-g"), "pmset-g.txt", 10.0)
SYSTEMSETUP = Command(
    ("systemsetup", "-getrestartpowerfailure"), "systemsetup-getrestartpowerfailure.txt", 10.0
)
FDESETUP = Command(("fdesetup", "status"), "fdesetup-status.txt", 10.0)
SOFTWAREUPDATE = Command(("softwareupdate", "-l"), "softwareupdate-l.txt", 180.0)
NETWORKSETUP = Command(
    ("networksetup", "-listallhardwareports"), "networksetup-listallhardwareports.txt", 10.0
)
COMMANDS = (PMSET, SYSTEMSETUP, FDESETUP, SOFTWAREUPDATE, NETWORKSETUP)


class Failed(Exception):
    """The command ran but gave no usable answer (exit status, timeout); says which."""


Runner = Callable[[Command], str | None]  # the output; None: the command is missing


def run(command: Command) -> str | None:
    """Run it: its stdout; None when it is not installed; Failed otherwise."""
    if shutil.which(command.argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            list(command.argv),
            capture_output=True,
            text=True,
            timeout=command.timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise Failed(f"`{' '.join(command.argv)}` took over {command.timeout_s:.0f} s") from None
    except OSError as exc:
        raise Failed(f"`{' '.join(command.argv)}` could not run: {exc.strerror}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise Failed(
            f"`{' '.join(command.argv)}` exited {done.returncode}"
            + (f": {said[-1][:200]}" if said else "")
        )
    return done.stdout


def recorded(outputs_dir: Path) -> Runner:
    """A runner reading `<outputs_dir>/<command.file>` (a missing file: the command is missing)."""

    def read(command: Command) -> str | None:
        try:
            with (outputs_dir / command.file).open("rb") as f:
                return f.read(MAX_OUTPUT).decode("utf-8", errors="replace")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise Failed(f"{outputs_dir / command.file}: {exc.strerror}") from None

    return read


def examine(
    runner: Runner,
    *,
    now: datetime,
    updates: bool,
    previous: contract.DoctorReport | None = None,
    disk_min_free_bytes: int | None = None,
) -> contract.DoctorReport:
    """One report. `updates`: run softwareupdate this time (it is slow and asks Apple's
    servers: the watcher runs it less often); otherwise its last answer is carried over."""
    errors: dict[str, str] = {}

    def ask(check: str, command: Command) -> str | None:
        try:
            return runner(command)
        except Failed as exc:
            errors[check] = str(exc)
            return None

    fields: dict[str, object] = {}
    if (out := ask("sleep", PMSET)) is not None:
        try:
            power = parse.pmset(out)
        except parse.Unreadable as exc:
            errors["sleep"] = errors["auto-restart"] = str(exc)
        else:
            fields |= {
                "sleep_minutes": power.sleep_minutes,
                "display_sleep_minutes": power.display_sleep_minutes,
                "sleep_prevented_by": [p[:100] for p in power.sleep_prevented_by[:20]],
                "auto_restart": power.auto_restart,
            }
    # no autorestart line in pmset (laptops): systemsetup knows, as an administrator
    if (
        fields.get("auto_restart") is None
        and "auto-restart" not in errors
        and (out := ask("auto-restart", SYSTEMSETUP)) is not None
    ):
        _read(errors, "auto-restart", fields, "auto_restart", parse.restart_power_failure, out)
    if (out := ask("filevault", FDESETUP)) is not None:
        _read(errors, "filevault", fields, "filevault", parse.filevault, out)
    if (out := ask("thunderbolt-bridge", NETWORKSETUP)) is not None:
        _read(
            errors,
            "thunderbolt-bridge",
            fields,
            "thunderbolt_bridge",
            parse.thunderbolt_bridge,
            out,
        )
    if updates:
        if (out := ask("os-update", SOFTWAREUPDATE)) is not None and _read(
            errors,
            "os-update",
            fields,
            "restart_updates",
            _labels,
            out,
        ):
            fields["updates_checked_at"] = now
    elif previous is not None and previous.updates_checked_at is not None:
        fields["restart_updates"] = previous.restart_updates
        fields["updates_checked_at"] = previous.updates_checked_at
        if "os-update" in previous.errors:
            errors["os-update"] = previous.errors["os-update"]
    elif previous is not None and "os-update" in previous.errors:
        errors["os-update"] = previous.errors["os-update"]
    return contract.DoctorReport.model_validate(
        {
            **fields,
            "checked_at": now,
            "disk_min_free_bytes": disk_min_free_bytes,
            "errors": errors,
        }
    )


MAX_OUTPUT = 1 << 20  # a recorded output is read up to 1 MiB (what the tools print is far less)


def _labels(text: str) -> list[str]:
    return [label[:200] for label in parse.restart_updates(text)[:50]]


def _read(
    errors: dict[str, str],
    check: str,
    fields: dict[str, object],
    field: str,
    parser: Callable[[str], object],
    out: str,
) -> bool:
    try:
        fields[field] = parser(out)
    except parse.Unreadable as exc:
        errors[check] = str(exc)[:300]
        return False
    return True
