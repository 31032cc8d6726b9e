"""Service definitions that run `mlxfleet-agent serve` at boot: a launchd plist and a systemd unit.

Pure text rendering (unit-tested): the caller passes the serve argv; nothing here touches the
machine. launchd: a LaunchDaemon with KeepAlive and RunAtLoad, stdout/stderr log paths, a
ThrottleInterval. systemd: Restart=always, KillMode=mixed (the agent stops its backends itself;
systemd's final SIGKILL reaches any straggler in the cgroup), TimeoutStopSec above the drain time.
Environment (telemetry credentials, HF_HOME, ...): systemd reads `EnvironmentFile=` itself at
each start, so secrets stay in that root-only file; launchd has no such file, so the values are
written into the plist's EnvironmentVariables (install it 0600 when they are secret).
`env_assignment` / `env_file` parse `KEY=VALUE` text (systemd's EnvironmentFile syntax: comments,
blank lines, optional `export`, single or double quotes) and name what is wrong.
May import: the standard library. Called by: cli (`launchd-plist`, `systemd-unit`).
"""

from __future__ import annotations

import plistlib
import re
import shlex
from collections.abc import Mapping, Sequence

LABEL = "io.mlxfleet.agent"
BASE_ENVIRONMENT = {"PYTHONUNBUFFERED": "1"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UnitError(ValueError):
    """An environment setting that cannot go into a unit; the message names it and says why."""


def env_assignment(text: str, *, origin: str = "--env") -> tuple[str, str]:
    """`KEY=VALUE` -> (KEY, VALUE); VALUE may be quoted ('...' or "...") as in an env file."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if name.startswith("export "):
        name = name.removeprefix("export ").strip()
    if not sep or not _ENV_NAME.fullmatch(name):
        raise UnitError(
            f"{origin}: {text!r} is not KEY=VALUE (KEY: letters, digits and _, "
            "not starting with a digit)"
        )
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    if "\n" in value or "\0" in value:
        raise UnitError(f"{origin}: the value of {name} holds a newline or NUL")
    return name, value


def env_file(text: str, *, origin: str) -> dict[str, str]:
    """The variables of an environment file (`KEY=VALUE` lines, `#` comments)."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        name, value = env_assignment(stripped, origin=f"{origin}:{number}")
        out[name] = value
    return out


def _systemd_quote(name: str, value: str) -> str:
    """One `Environment=` word: quoted, with systemd's escapes (and % doubled: specifiers)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{name}={escaped}"'


def launchd_plist(
    argv: list[str],
    *,
    label: str = LABEL,
    log_dir: str = "/var/log/mlxfleet",
    user: str | None = None,
    group: str | None = None,
    working_dir: str | None = None,
    environment: Mapping[str, str] | None = None,
) -> str:
    """A LaunchDaemon plist (install in /Library/LaunchDaemons/<label>.plist); `environment`
    is added to PYTHONUNBUFFERED=1 (and written into the file as is)."""
    plist: dict[str, object] = {
        "Label": label,
        "ProgramArguments": list(argv),
        "RunAtLoad": True,
        "KeepAlive": True,
        "ThrottleInterval": 10,
        "ExitTimeOut": 60,
        "ProcessType": "Interactive",
        "StandardOutPath": f"{log_dir}/agent.log",
        "StandardErrorPath": f"{log_dir}/agent.err.log",
        "EnvironmentVariables": {**BASE_ENVIRONMENT, **(environment or {})},
        "SoftResourceLimits": {"NumberOfFiles": 65536},
    }
    if user:
        plist["UserName"] = user
    if group:
        plist["GroupName"] = group
    if working_dir:
        plist["WorkingDirectory"] = working_dir
    return plistlib.dumps(plist, sort_keys=False).decode()


def systemd_unit(
    argv: list[str],
    *,
    user: str | None = None,
    group: str | None = None,
    stop_timeout_s: int = 90,
    environment: Mapping[str, str] | None = None,
    environment_files: Sequence[str] = (),
) -> str:
    """A systemd service unit (install as /etc/systemd/system/mlxfleet-agent.service).
    `environment_files` are read by systemd at each start (absolute paths; must exist)."""
    for path in environment_files:
        if not path.startswith("/") or "\n" in path:
            raise UnitError(f"--env-file: {path!r} must be an absolute path")
    env = {**BASE_ENVIRONMENT, **(environment or {})}
    lines = [
        "[Unit]",
        "Description=mlxfleet node agent (mlx-lm backends, control API, data plane)",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={shlex.join(argv)}",
        "Restart=always",
        "RestartSec=5",
        "KillSignal=SIGTERM",
        "KillMode=mixed",
        f"TimeoutStopSec={stop_timeout_s}",
        *(f"Environment={_systemd_quote(k, v)}" for k, v in env.items()),
        *(f"EnvironmentFile={path}" for path in environment_files),
        "LimitNOFILE=65536",
    ]
    if user:
        lines.append(f"User={user}")
    if group:
        lines.append(f"Group={group}")
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)
