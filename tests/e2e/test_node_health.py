"""Heat and the macOS doctor on the real control plane, operator and agents: a Mac whose heat
sampler reads powermetrics at thermal pressure Heavy gets no new replica and its InferenceNode
says why (the replica comes once it cools down); a Mac whose `pmset -g` says it sleeps when idle
shows the doctor's SleepEnabled condition with the fix. The agents read recorded outputs of the
real tools (tests/fixtures/host, SOURCES.md) through `--thermal-file` and `--doctor-outputs-dir`:
the real parsers, the real /v1/state, the real operator."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx
import pytest

from mlxfleet_operator.core.kit import naming
from tests.e2e.conftest import E2E, Agents, Operator, condition, is_true, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]

MACOS = Path(__file__).resolve().parents[1] / "fixtures" / "host" / "macos"
HEAVY = MACOS / "powermetrics-thermal-heavy-CONSTRUCTED.txt"
NOMINAL = MACOS / "powermetrics-thermal-nominal-macos26.txt"


def test_a_hot_mac_gets_no_new_replica_and_says_why(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, tmp_path: Path
) -> None:
    thermal = tmp_path / "powermetrics.txt"
    shutil.copy(HEAVY, thermal)
    mac = agents.start("a", flags=["--thermal-file", str(thermal)])
    name = e2e.register(mac)
    hot = wait_for(
        "ThermalPressure True",
        lambda: (
            (c := condition(e2e.get("inode", name, namespaced=False), "ThermalPressure"))
            and c.get("status") == "True"
            and c
        ),
    )
    assert hot["reason"] == "ThermalSerious"
    assert (
        "agent reports thermal pressure serious: powermetrics thermal pressure Heavy"
        in hot["message"]
    )
    assert "no new replicas are placed here until it cools down" in hot["message"]
    node = e2e.get("inode", name, namespaced=False)
    assert node["status"]["thermal"]["level"] == "serious"
    assert node["status"]["thermal"]["powerSource"] == "powermetrics"
    wide = e2e.kubectl("get", "inode", name, "-o", "wide")
    assert "THERMAL" in wide.splitlines()[0]
    assert "serious" in wide.splitlines()[1]
    metrics = httpx.get(f"{mac.url}/metrics", timeout=5).text
    assert re.search(r'^mlxfleet_agent_thermal_pressure\{level="serious"\} 1\.0$', metrics, re.M)
    assert is_true(node, "Ready")  # a hot Mac still serves what it has

    e2e.apply(e2e.deployment("chat", model_a, replicas=1))
    ready = wait_for(
        "chat waiting, naming the heat",
        lambda: (
            (c := condition(e2e.get("mdep", "chat"), "Ready"))
            and "agent reports thermal pressure serious" in c.get("message", "")
            and c
        ),
    )
    assert ready["reason"] == "WaitingForCapacity", ready
    assert naming.slot_name(e2e.namespace, "chat") not in {s["name"] for s in mac.state()["slots"]}

    shutil.copy(NOMINAL, thermal)  # it cools down: the replica goes there
    wait_for("chat Ready", lambda: is_true(e2e.get("mdep", "chat"), "Ready"))
    cool = condition(e2e.get("inode", name, namespaced=False), "ThermalPressure")
    assert (cool["status"], cool["reason"]) == ("False", "ThermalNominal")
    operator.assert_alive()


def test_a_mac_with_sleep_enabled_shows_the_doctor_condition_with_the_fix(
    e2e: E2E, agents: Agents, operator: Operator, tmp_path: Path
) -> None:
    outputs = tmp_path / "doctor"
    outputs.mkdir()
    shutil.copy(MACOS / "pmset-g-laptop.txt", outputs / "pmset-g.txt")  # sleep 1
    shutil.copy(MACOS / "fdesetup-status-off.txt", outputs / "fdesetup-status.txt")
    mac = agents.start(
        "a", flags=["--doctor-outputs-dir", str(outputs), "--doctor-interval-s", "1"]
    )
    name = e2e.register(mac)
    asleep = wait_for(
        "SleepEnabled True",
        lambda: (
            (c := condition(e2e.get("inode", name, namespaced=False), "SleepEnabled"))
            and c.get("status") == "True"
            and c
        ),
    )
    assert asleep["reason"] == "SystemSleepEnabled"
    assert "the Mac goes to sleep after 1 min idle" in asleep["message"]
    assert "fix: `sudo pmset -a sleep 0`" in asleep["message"]
    assert "docs/troubleshooting.md#systemsleepenabled" in asleep["message"]
    node = e2e.get("inode", name, namespaced=False)
    assert is_true(node, "Ready")  # a warning: the node serves
    assert condition(node, "FileVaultEnabled")["reason"] == "FileVaultOff"
    assert not condition(node, "UpdatePending")  # no softwareupdate output: does not apply
    assert mac.state()["doctor"]["sleepMinutes"] == 1

    shutil.copy(MACOS / "pmset-g-headless-ready-CONSTRUCTED.txt", outputs / "pmset-g.txt")
    fixed = wait_for(
        "SleepEnabled False",
        lambda: (
            (c := condition(e2e.get("inode", name, namespaced=False), "SleepEnabled"))
            and c.get("status") == "False"
            and c
        ),
    )
    assert fixed["reason"] == "SleepDisabled"
    operator.assert_alive()
