"""Service definitions that run `mlxfleet-agent serve` at boot: a launchd plist and a systemd unit.

Pure text rendering (unit-tested): the caller passes the serve argv; nothing here touches the
machine. launchd: a LaunchDaemon with KeepAlive and RunAtLoad, stdout/stderr log paths, a
ThrottleInterval. systemd: Restart=always, KillMode=mixed (the agent stops its backends itself;
systemd's final SIGKILL reaches any straggler in the cgroup), TimeoutStopSec above the drain time.
May import: the standard library. Called by: cli (`launchd-plist`, `systemd-unit`).
"""

from __future__ import annotations

import plistlib
import shlex

LABEL = "io.mlxfleet.agent"


def launchd_plist(
    argv: list[str],
    *,
    label: str = LABEL,
    log_dir: str = "/var/log/mlxfleet",
    user: str | None = None,
    working_dir: str | None = None,
) -> str:
    """A LaunchDaemon plist (install in /Library/LaunchDaemons/<label>.plist)."""
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
        "EnvironmentVariables": {"PYTHONUNBUFFERED": "1"},
        "SoftResourceLimits": {"NumberOfFiles": 65536},
    }
    if user:
        plist["UserName"] = user
    if working_dir:
        plist["WorkingDirectory"] = working_dir
    return plistlib.dumps(plist, sort_keys=False).decode()


def systemd_unit(argv: list[str], *, user: str | None = None, stop_timeout_s: int = 90) -> str:
    """A systemd service unit (install as /etc/systemd/system/mlxfleet-agent.service)."""
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
        "Environment=PYTHONUNBUFFERED=1",
        "LimitNOFILE=65536",
    ]
    if user:
        lines.append(f"User={user}")
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)
