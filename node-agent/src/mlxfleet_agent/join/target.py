"""The kind of machine join sets up: a Mac (a LaunchDaemon) or Linux (a systemd unit).

Taken from the running system unless `--os` names the other one (a dry run on Linux shows what a
Mac would get; tests render a Mac's files into a temporary root). Only what differs lives here:
the unit's folder and name, the default account, how the service is started and stopped.
May import: the standard library, `service_units`. Called by: join.command.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mlxfleet_agent import service_units


@dataclass(frozen=True)
class Target:
    mac: bool

    @classmethod
    def of(cls, name: str | None) -> Target:
        return cls(mac=(sys.platform == "darwin") if name is None else name == "macos")

    @property
    def unit_dir(self) -> Path:
        return Path("/Library/LaunchDaemons" if self.mac else "/etc/systemd/system")

    @property
    def unit_name(self) -> str:
        return f"{service_units.LABEL}.plist" if self.mac else "mlxfleet-agent.service"

    def unit(
        self,
        argv: list[str],
        *,
        log_dir: str,
        user: str,
        group: str,
        environment: Mapping[str, str],
        environment_files: Sequence[str],
    ) -> str:
        """The service definition; launchd has no environment file, so on a Mac the caller
        passes the values of `environment_files` in `environment` (and the plist is 0600)."""
        if self.mac:
            return service_units.launchd_plist(
                argv, log_dir=log_dir, user=user, group=group, environment=environment
            )
        return service_units.systemd_unit(
            argv, user=user, group=group, environment=environment,
            environment_files=environment_files,
        )  # fmt: skip

    def service(self, action: str, unit: Path) -> None:
        if self.mac:
            cmd = (["launchctl", "bootstrap", "system", str(unit)] if action == "start"
                   else ["launchctl", "bootout", "system", str(unit)])  # fmt: skip
            subprocess.run(cmd, check=action == "start")
        else:
            subprocess.run(["systemctl", "daemon-reload"], check=False)
            verb = ["enable", "--now"] if action == "start" else ["disable", "--now"]
            subprocess.run(["systemctl", *verb, unit.name], check=action == "start")
