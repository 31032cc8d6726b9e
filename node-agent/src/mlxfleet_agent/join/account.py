"""The unprivileged account the agent's service runs as, made or named by join.

`--user NAME` (default `_mlxfleet` on macOS, `mlxfleet` on Linux): an existing account is used as
it is; a missing one is created as a hidden system account without a login shell or a home of
its own (macOS: `dseditgroup` + `dscl`, the way installers create role accounts, with the lowest
free id from 450 down to 300; Linux: `useradd --system --user-group`), unless --no-create-user.
The commands are decided purely (`create_commands`, unit-tested) and run by `ensure`; a dry run
prints them. `Ownership` says which files the account owns: its state, models and log folders,
and the secrets it reads (token, TLS key, Hugging Face token), 0600; the configuration is root's
and only readable by the account's group.
May import: the standard library. Called by: join.command.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

MAC_USER = "_mlxfleet"
LINUX_USER = "mlxfleet"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,31}$")
# below 500: hidden from the login window, as role accounts are
MAC_IDS: list[int] = list(range(450, 299, -1))


class AccountError(ValueError):
    """The account cannot be used or made; the message names the flag."""


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    group: str


def default_name(*, mac: bool) -> str:
    return MAC_USER if mac else LINUX_USER


def check_name(name: str) -> str:
    if _NAME.fullmatch(name) is None or name == "root":
        raise AccountError(
            f"--user {name!r}: an account name (letters, digits, '_' and '-', at most 32, "
            "starting with a letter or '_'), not root: the agent runs unprivileged"
        )
    return name


def lookup(name: str) -> Account | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    try:
        group = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        group = str(entry.pw_gid)
    if entry.pw_uid == 0:
        raise AccountError(f"--user {name}: uid 0 is root; name an unprivileged account")
    return Account(name, entry.pw_uid, entry.pw_gid, group)


def free_mac_id(used: Iterable[int]) -> int:
    taken = set(used)
    for candidate in MAC_IDS:
        if candidate not in taken:
            return candidate
    raise AccountError("--user: no free id from 450 down to 300 for a role account")


def dscl_ids(text: str) -> set[int]:
    """The ids of `dscl . -list /Users UniqueID` (or /Groups PrimaryGroupID) output."""
    out = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-1].lstrip("-").isdigit():
            out.add(int(parts[-1]))
    return out


def create_commands(name: str, *, mac: bool, free_id: int | str | None = None) -> list[list[str]]:
    """The commands that create `name` (group of the same name, no shell, no home)."""
    if not mac:
        return [["useradd", "--system", "--user-group", "--no-create-home",
                 "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                 "--comment", "mlxfleet agent", name]]  # fmt: skip
    if free_id is None:
        raise AccountError("--user: no id chosen for the new macOS account")
    user = f"/Users/{name}"
    return [
        ["dseditgroup", "-o", "create", "-r", "mlxfleet agent", "-i", str(free_id), name],
        ["dscl", ".", "-create", user],
        ["dscl", ".", "-create", user, "UniqueID", str(free_id)],
        ["dscl", ".", "-create", user, "PrimaryGroupID", str(free_id)],
        ["dscl", ".", "-create", user, "UserShell", "/usr/bin/false"],
        ["dscl", ".", "-create", user, "NFSHomeDirectory", "/var/empty"],
        ["dscl", ".", "-create", user, "RealName", "mlxfleet agent"],
        ["dscl", ".", "-create", user, "IsHidden", "1"],
        ["dscl", ".", "-create", user, "Password", "*"],
    ]


def _mac_free_id(*, dry_run: bool) -> int | str:
    used: set[int] = set()
    for args in (["/Users", "UniqueID"], ["/Groups", "PrimaryGroupID"]):
        try:
            proc = subprocess.run(["dscl", ".", "-list", *args], capture_output=True, text=True,
                                  check=False)  # fmt: skip
        except OSError:
            if dry_run:  # a Mac's dry run shown on another system
                return "<free id>"
            raise AccountError("--user: dscl is missing (is this macOS? see --os)") from None
        used |= dscl_ids(proc.stdout)
    return free_mac_id(used)


def ensure(
    name: str,
    *,
    mac: bool,
    create: bool,
    dry_run: bool,
    say: Callable[[str], None],
) -> Account | None:
    """The account, created when missing (and allowed). A dry run returns None for an account
    it would create, after saying how."""
    check_name(name)
    found = lookup(name)
    if found is not None:
        say(f"the agent runs as {name} (uid {found.uid}, group {found.group})")
        return found
    if not create:
        raise AccountError(
            f"--user {name}: no such account (leave out --no-create-user to have join create it)"
        )
    free_id = _mac_free_id(dry_run=dry_run) if mac else None
    commands = create_commands(name, mac=mac, free_id=free_id)
    if dry_run:
        say(f"would create the account {name}:")
        for cmd in commands:
            say("  " + shlex.join(cmd))
        return None
    if os.geteuid() != 0:
        raise AccountError(f"--user {name}: creating an account needs root (run join with sudo)")
    for cmd in commands:
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            raise AccountError(
                f"--user {name}: `{' '.join(cmd)}` failed: {detail.strip()}"
            ) from None
    made = lookup(name)
    if made is None:  # pragma: no cover - the commands succeeded
        raise AccountError(f"--user {name}: created, but the system does not know it")
    say(f"created the account {name} (uid {made.uid}) for the agent")
    return made


@dataclass(frozen=True)
class Ownership:
    """Owner and mode of each path join makes: (uid, gid, mode); None: root's, as written."""

    account: Account | None
    admin_uid: int = 0  # who owns the configuration: root (join runs as root), else the caller

    def folder(self) -> tuple[int, int, int] | None:
        """State, models and log folders: the account's, 0750."""
        return None if self.account is None else (self.account.uid, self.account.gid, 0o750)

    def secret(self) -> tuple[int, int, int] | None:
        """Files only the agent reads (token, TLS key, Hugging Face token): the account's, 0600."""
        return None if self.account is None else (self.account.uid, self.account.gid, 0o600)

    def config(self) -> tuple[int, int, int] | None:
        """agent.yaml: root's, readable by the account's group (0640)."""
        return None if self.account is None else (self.admin_uid, self.account.gid, 0o640)


def apply(path: Path, owner: tuple[int, int, int] | None) -> None:
    """chown + chmod `path` (as root); a no-op when `owner` is None or it already matches."""
    if owner is None:
        return
    uid, gid, mode = owner
    status = path.stat()
    if (status.st_uid, status.st_gid) != (uid, gid):
        if os.geteuid() != 0 and uid != os.geteuid():
            raise AccountError(f"{path}: giving it to uid {uid} needs root (run join with sudo)")
        os.chown(path, uid, gid)
    if status.st_mode & 0o7777 != mode:
        os.chmod(path, mode)
