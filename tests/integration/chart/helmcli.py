"""The real helm binary, run against a chart (and a control plane's kubeconfig when given).

Helm's own config, cache and data go to a private folder, never the user's home.
May import: the standard library, PyYAML, tests.support. Called by: tests/integration/chart.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlxfleet_operator.dev import controlplane

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "mlxfleet"
NAMESPACE = "mlxfleet-system"
RELEASE = "mlxfleet"


@dataclass(frozen=True)
class Helm:
    binary: Path
    home: Path
    plane: controlplane.ControlPlane | None = None

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.binary), *args]
        if self.plane is not None:
            cmd.append(f"--kubeconfig={self.plane.kubeconfig}")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        for name in ("CACHE", "CONFIG", "DATA"):
            env[f"HELM_{name}_HOME"] = str(self.home / name.lower())
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def on(self, plane: controlplane.ControlPlane) -> Helm:
        return Helm(self.binary, self.home, plane)

    def template(self, *args: str, chart: Path = CHART) -> list[dict[str, Any]]:
        out = self("template", RELEASE, str(chart), f"--namespace={NAMESPACE}", *args).stdout
        return objects(out)


def objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return found


def chart_copy(dest: Path, *, leader_election: bool = False, gateway: bool = False) -> Path:
    """A copy of the chart whose Chart.yaml says the image has Lease election / the gateway,
    as the chart will once issues 13 and 9 land (the branches that are refused today)."""
    chart = dest / "mlxfleet"
    shutil.copytree(CHART, chart)
    text = (chart / "Chart.yaml").read_text()
    if leader_election:
        text = text.replace(
            'mlxfleet.io/operator-leader-election: "false"',
            'mlxfleet.io/operator-leader-election: "true"',
        )
    if gateway:
        text = text.replace('mlxfleet.io/gateway: "false"', 'mlxfleet.io/gateway: "true"')
    (chart / "Chart.yaml").write_text(text)
    return chart
