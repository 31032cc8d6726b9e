"""The macOS doctor's InferenceNode conditions (pure): what the agent read from the Mac, judged.

One condition per check, True when the Mac is set up in a way that takes a headless Mac down
(Kubernetes' node conditions read the same way: MemoryPressure, DiskPressure):

| condition | True (finding) | False | read from |
| --- | --- | --- | --- |
| SleepEnabled | SystemSleepEnabled, DisplaySleepEnabled | SleepDisabled | `pmset -g` |
| AutoRestartDisabled | AutoRestartOff | AutoRestartOn | pmset autorestart, systemsetup |
| FileVaultEnabled | FileVaultOn | FileVaultOff | `fdesetup status` |
| DiskPressure | ModelStoreDiskLow | ModelStoreDiskOK | the models dir's free disk |
| UpdatePending | RestartUpdatePending | NoUpdatePending | `softwareupdate -l` |
| ThunderboltBridgeMissing | ThunderboltBridgeAbsent | ThunderboltBridgePresent | networksetup |

ThunderboltBridgeMissing applies only to a node labelled with a Thunderbolt fabric.

A check the agent could not read is Unknown (DoctorCheckFailed, its error in the message); a
check that does not apply (its command is missing, as on Linux; no fabric label) has no
condition. They are warnings: Ready, Reconciling and Stalled do not depend on them (kstatus and
the Argo CD health check read those only), and placement ignores them. Every message names the
fix and its docs/troubleshooting.md section; it is written when the reason changes and kept
while it stays (free disk moves on every poll).
May import: the standard library, `api`, the agent `contract`, `core.kit.conditions`,
`core.fleet.groupplacement` (the fabric label). Called by: `core.node.status`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from mlxfleet_agent import contract
from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.core.fleet import groupplacement
from mlxfleet_operator.core.kit import conditions

T = cond.ConditionType
R = cond.Reason
DOCS = "docs/troubleshooting.md"
CHECK_OF = {  # condition type -> the agent's check (contract.DOCTOR_CHECKS)
    T.SLEEP_ENABLED: "sleep",
    T.AUTO_RESTART_DISABLED: "auto-restart",
    T.FILEVAULT_ENABLED: "filevault",
    T.UPDATE_PENDING: "os-update",
    T.THUNDERBOLT_BRIDGE_MISSING: "thunderbolt-bridge",
}
TYPES = (
    T.SLEEP_ENABLED,
    T.AUTO_RESTART_DISABLED,
    T.FILEVAULT_ENABLED,
    T.DISK_PRESSURE,
    T.UPDATE_PENDING,
    T.THUNDERBOLT_BRIDGE_MISSING,
)
# the reasons of a finding (True), each message naming its fix
FINDINGS = (
    R.SYSTEM_SLEEP_ENABLED,
    R.DISPLAY_SLEEP_ENABLED,
    R.AUTO_RESTART_OFF,
    R.FILEVAULT_ON,
    R.MODEL_STORE_DISK_LOW,
    R.RESTART_UPDATE_PENDING,
    R.THUNDERBOLT_BRIDGE_ABSENT,
)
# every reason a doctor condition can give (docs/troubleshooting.md has a section for each)
REASONS = (
    R.SYSTEM_SLEEP_ENABLED,
    R.DISPLAY_SLEEP_ENABLED,
    R.SLEEP_DISABLED,
    R.AUTO_RESTART_OFF,
    R.AUTO_RESTART_ON,
    R.FILEVAULT_ON,
    R.FILEVAULT_OFF,
    R.MODEL_STORE_DISK_LOW,
    R.MODEL_STORE_DISK_OK,
    R.RESTART_UPDATE_PENDING,
    R.NO_UPDATE_PENDING,
    R.THUNDERBOLT_BRIDGE_ABSENT,
    R.THUNDERBOLT_BRIDGE_PRESENT,
    R.DOCTOR_CHECK_FAILED,
)


@dataclass(frozen=True)
class Finding:
    """One check's verdict: True (a finding), False (all clear) or None (Unknown)."""

    status: bool | None
    reason: R
    message: str


def fix(reason: R) -> str:
    """Where the fix of `reason` is written down."""
    return f"{DOCS}#{reason.value.lower()}"


def conditions_of(
    current: Sequence[cond.Condition],
    report: contract.DoctorReport | None,
    *,
    disk: contract.DiskInfo,
    labels: Mapping[str, str],
    generation: int | None,
    now: datetime,
) -> list[cond.Condition]:
    """The doctor's conditions in `current`, from the agent's last report (None: an agent
    without a doctor, or before its first examination: the conditions written stay)."""
    if report is None:
        return list(current)
    out = list(current)
    for kind in TYPES:
        found = judge(kind, report, disk=disk, labels=labels)
        if found is None:
            out = conditions.drop_condition(out, kind)
            continue
        out = conditions.set_reading(
            out,
            kind=kind,
            status=cond.ConditionStatus.UNKNOWN if found.status is None else found.status,
            reason=found.reason,
            message=found.message,
            generation=generation,
            now=now,
        )
    return out


def judge(
    kind: cond.ConditionType,
    report: contract.DoctorReport,
    *,
    disk: contract.DiskInfo,
    labels: Mapping[str, str],
) -> Finding | None:
    """The verdict of one check (None: it does not apply to this node)."""
    if kind is T.THUNDERBOLT_BRIDGE_MISSING and not wants_bridge(labels):
        return None
    check = CHECK_OF.get(kind)
    if check is not None and check in report.errors:
        reason = R.DOCTOR_CHECK_FAILED
        return Finding(None, reason, f"the agent could not read it: {report.errors[check]} "
                       f"({fix(reason)})")  # fmt: skip
    if kind is T.SLEEP_ENABLED:
        return _sleep(report)
    if kind is T.AUTO_RESTART_DISABLED:
        return _auto_restart(report)
    if kind is T.FILEVAULT_ENABLED:
        return _filevault(report)
    if kind is T.DISK_PRESSURE:
        return _disk(report, disk)
    if kind is T.UPDATE_PENDING:
        return _updates(report)
    return _bridge(report, labels)


def wants_bridge(labels: Mapping[str, str]) -> bool:
    """A node labelled with a fabric (`topology.mlxfleet.io/fabric`: its Thunderbolt ring for
    sharded groups) needs its Thunderbolt Bridge, unless the fabric says it is Ethernet
    (`topology.mlxfleet.io/fabric-link: ethernet`)."""
    return bool(labels.get(groupplacement.FABRIC_LABEL)) and (
        labels.get(groupplacement.FABRIC_LINK_LABEL, "thunderbolt").lower() != "ethernet"
    )


def _sleep(report: contract.DoctorReport) -> Finding | None:
    if report.sleep_minutes is None:
        return None
    if report.sleep_minutes > 0:
        held = (
            f" (held off now by {', '.join(report.sleep_prevented_by)}, only while they run)"
            if report.sleep_prevented_by
            else ""
        )
        reason = R.SYSTEM_SLEEP_ENABLED
        return Finding(
            True,
            reason,
            f"the Mac goes to sleep after {report.sleep_minutes} min idle{held}: a sleeping Mac "
            f"misses its heartbeat and serves nothing; fix: `sudo pmset -a sleep 0` "
            f"({fix(reason)})",
        )
    if report.display_sleep_minutes:
        reason = R.DISPLAY_SLEEP_ENABLED
        return Finding(
            True,
            reason,
            f"the display sleeps after {report.display_sleep_minutes} min idle (pmset "
            "displaysleep): a Mac that serves unattended should have every sleep timer at 0; "
            f"fix: `sudo pmset -a displaysleep 0` ({fix(reason)})",
        )
    return Finding(False, R.SLEEP_DISABLED, "pmset sleep 0 and displaysleep 0: the Mac stays awake")


def _auto_restart(report: contract.DoctorReport) -> Finding | None:
    if report.auto_restart is None:
        return None
    if not report.auto_restart:
        reason = R.AUTO_RESTART_OFF
        return Finding(
            True,
            reason,
            "the Mac stays off after a power failure (pmset autorestart 0) until someone "
            f"presses its power button; fix: `sudo pmset -a autorestart 1` ({fix(reason)})",
        )
    return Finding(False, R.AUTO_RESTART_ON, "the Mac starts up by itself after a power failure")


def _filevault(report: contract.DoctorReport) -> Finding | None:
    if report.filevault is None:
        return None
    if report.filevault in ("on", "encrypting"):
        reason = R.FILEVAULT_ON
        return Finding(
            True,
            reason,
            f"FileVault is {report.filevault}: after an unattended restart (a power failure, "
            "an OS update) the Mac waits at the unlock screen and the agent does not start; "
            "fix: `sudo fdesetup disable`, or restart with `sudo fdesetup authrestart` "
            f"({fix(reason)})",
        )
    return Finding(False, R.FILEVAULT_OFF, f"FileVault is {report.filevault}")


def _disk(report: contract.DoctorReport, disk: contract.DiskInfo) -> Finding | None:
    floor = report.disk_min_free_bytes
    if floor is None or disk.total_bytes <= 0:
        return None
    have = f"{_gib(disk.free_bytes)} free of {_gib(disk.total_bytes)}"
    if disk.free_bytes < floor:
        reason = R.MODEL_STORE_DISK_LOW
        return Finding(
            True,
            reason,
            f"the model store's disk has {have} (below {_gib(floor)}): new weights may not fit "
            "and downloads fail; fix: evict cached models or free space on that volume "
            f"({fix(reason)})",
        )
    return Finding(False, R.MODEL_STORE_DISK_OK, f"the model store's disk has {have}")


def _updates(report: contract.DoctorReport) -> Finding | None:
    if report.updates_checked_at is None:
        return None
    if report.restart_updates:
        shown = ", ".join(report.restart_updates[:5])
        more = (
            f" and {len(report.restart_updates) - 5} more"
            if len(report.restart_updates) > 5
            else ""
        )
        reason = R.RESTART_UPDATE_PENDING
        return Finding(
            True,
            reason,
            f"softwareupdate lists updates that restart the Mac: {shown}{more}; macOS may "
            "install them and restart at night, unattended; fix: drain the node, install, "
            f"uncordon ({fix(reason)})",
        )
    return Finding(False, R.NO_UPDATE_PENDING, "no update that restarts the Mac is pending")


def _bridge(report: contract.DoctorReport, labels: Mapping[str, str]) -> Finding | None:
    if report.thunderbolt_bridge is None:
        return None
    fabric = labels.get(groupplacement.FABRIC_LABEL, "")
    if not report.thunderbolt_bridge:
        reason = R.THUNDERBOLT_BRIDGE_ABSENT
        return Finding(
            True,
            reason,
            f"the node is labelled {groupplacement.FABRIC_LABEL}={fabric} but the Mac has no "
            "Thunderbolt Bridge network service: ranks of a sharded group cannot reach it "
            f"over the ring; fix: add the Thunderbolt Bridge service back ({fix(reason)})",
        )
    return Finding(False, R.THUNDERBOLT_BRIDGE_PRESENT, "the Thunderbolt Bridge service is there")


def _gib(value: int) -> str:
    return f"{value / 2**30:.1f} GiB"
