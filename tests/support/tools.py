"""Fixtures `helm`, `kstatus`, `promtool`, `prometheus_crds`: real Go tools (Go module proxy).

Built once and cached outside the repo keyed by version by scripts/build-tools.sh (helm v3 with
`go install`; kstatus = scripts/kstatus/main.go on sigs.k8s.io/cli-utils, whose status.Compute is
what Flux's health checks run; Prometheus's promtool; the Prometheus Operator's own
ServiceMonitor/PodMonitor/PrometheusRule CRDs).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.support.helm import Helm

REPO = Path(__file__).resolve().parents[2]


def build(tool: str) -> Path:
    """Path printed by `scripts/build-tools.sh TOOL` (builds it the first time)."""
    proc = subprocess.run(
        [str(REPO / "scripts" / "build-tools.sh"), tool],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/build-tools.sh {tool} failed with {proc.returncode}")
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def helm() -> Path:
    return build("helm")


@pytest.fixture(scope="session")
def promtool() -> Path:
    return build("promtool")


@pytest.fixture(scope="session")
def prometheus_crds() -> Path:
    return build("prometheus-crds")


class Kstatus:
    """Flux's verdict on objects: `judge(obj)` -> {"status": "Current"|"InProgress"|..., ...}."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary

    def judge_all(self, *objects: dict[str, Any]) -> list[dict[str, Any]]:
        proc = subprocess.run(
            [str(self.binary)],
            input="\n".join(json.dumps(o) for o in objects),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return [json.loads(line) for line in proc.stdout.splitlines()]

    def judge(self, obj: dict[str, Any]) -> dict[str, Any]:
        (verdict,) = self.judge_all(obj)
        return verdict


@pytest.fixture(scope="session")
def kstatus() -> Kstatus:
    return Kstatus(build("kstatus"))


@pytest.fixture(scope="session")
def helm_cli(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The real helm with a private home (imported late: tests/support/helm.py uses e2e helpers)."""
    from tests.support.helm import Helm

    return Helm(binary=helm, home=tmp_path_factory.mktemp("helm-home"))
