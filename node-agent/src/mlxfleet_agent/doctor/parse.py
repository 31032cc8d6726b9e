"""What the doctor's commands print, parsed (pure). Each parser raises `Unreadable` when the output
is not the tool's (the check is then reported as failed, never guessed), and tells only what the
output says (None: it does not say).

Tested against recorded outputs of the real tools (tests/fixtures/host/macos, SOURCES.md there).
May import: the standard library only. Called by: doctor.probe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class Unreadable(ValueError):
    """The output is not what the tool prints; says what was expected."""


@dataclass(frozen=True, slots=True)
class Power:
    """`pmset -g`: the settings in use (minutes; 0 never)."""

    sleep_minutes: int | None
    display_sleep_minutes: int | None
    sleep_prevented_by: tuple[str, ...]
    auto_restart: bool | None  # absent on Macs without the setting (laptops)


_SETTING = re.compile(r"^ (\S.*?)\s{2,}(\S.*)$|^ (\S+) (\S.*)$")
_PREVENTED = re.compile(r"\((?:sleep|display sleep) prevented by ([^)]*)\)")


def pmset(text: str) -> Power:
    """`pmset -g`: settings are lines indented one space, `name   value [(note)]`, under
    "Currently in use:" (the "System-wide power settings:" lines above it are global flags)."""
    lines = text.splitlines()
    if "Currently in use:" not in (line.strip() for line in lines):
        raise Unreadable("pmset -g printed no `Currently in use:` section")
    settings: dict[str, str] = {}
    in_use = False
    for line in lines:
        if line.strip() == "Currently in use:":
            in_use = True
            continue
        if not line.startswith(" "):
            in_use = line.strip() == "Currently in use:"
            continue
        if not in_use:
            continue
        found = _SETTING.match(line.rstrip())
        if found is None:
            continue
        name = (found.group(1) or found.group(3)).strip()
        settings[name] = (found.group(2) or found.group(4)).strip()
    sleep_value = settings.get("sleep", "")
    prevented = _PREVENTED.search(sleep_value)
    return Power(
        sleep_minutes=_minutes(sleep_value),
        display_sleep_minutes=_minutes(settings.get("displaysleep", "")),
        sleep_prevented_by=tuple(p.strip() for p in prevented.group(1).split(",") if p.strip())
        if prevented
        else (),
        auto_restart=_flag(settings.get("autorestart")),
    )


def _minutes(value: str) -> int | None:
    found = re.match(r"^(\d+)", value)
    return int(found.group(1)) if found else None


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    found = re.match(r"^([01])\b", value)
    return found.group(1) == "1" if found else None


_RESTART_POWER = re.compile(r"Restart After Power Failure:\s*(On|Off)", re.IGNORECASE)


def restart_power_failure(text: str) -> bool:
    """`systemsetup -getrestartpowerfailure`: `Restart After Power Failure: On` (or Off). It
    needs administrator rights: anything else is unreadable."""
    found = _RESTART_POWER.search(text)
    if found is None:
        raise Unreadable(f"systemsetup printed {text.strip()[:120]!r}")
    return found.group(1).lower() == "on"


def filevault(text: str) -> str:
    """`fdesetup status`: on, off, encrypting or decrypting."""
    first = text.strip()
    if first.startswith("FileVault is On"):
        return "on"
    if first.startswith("FileVault is Off"):
        return "off"
    if "Encryption in progress" in first:
        return "encrypting"
    if "Decryption in progress" in first:
        return "decrypting"
    raise Unreadable(f"fdesetup status printed {first[:120]!r}")


_UPDATE = re.compile(r"^\s*\* Label: (.+)$")
_ACTION = re.compile(r"Action: ([^,]+)")


def restart_updates(text: str) -> tuple[str, ...]:
    """`softwareupdate -l`: the labels of the updates whose install restarts the Mac
    (`Action: restart`, or `shut down`); none when it found no new software."""
    if "No new software available" in text:
        return ()
    if "Software Update found the following" not in text:
        said = [line for line in text.splitlines() if "error" in line.lower()] or [text.strip()]
        raise Unreadable(f"softwareupdate -l: {said[0].strip()[:200]}")
    out: list[str] = []
    label: str | None = None
    for line in text.splitlines():
        if (found := _UPDATE.match(line)) is not None:
            label = found.group(1).strip()
            continue
        if label is not None and "Title:" in line:
            action = _ACTION.search(line)
            if action is not None and action.group(1).strip().lower() in ("restart", "shut down"):
                out.append(label)
            label = None
    return tuple(out)


def thunderbolt_bridge(text: str) -> bool:
    """`networksetup -listallhardwareports`: whether a `Thunderbolt Bridge` port is listed."""
    ports = re.findall(r"^Hardware Port: (.+)$", text, re.MULTILINE)
    if not ports:
        raise Unreadable("networksetup listed no hardware ports")
    return any(p.strip() == "Thunderbolt Bridge" for p in ports)
