"""The report CronJobs and the Grafana dashboard ConfigMap are accepted by a real API server."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxfleet_operator.dev import controlplane

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("folder", ["cronjobs", "grafana"])
def test_kustomization_passes_server_side_dry_run(
    cluster: controlplane.ControlPlane, folder: str
) -> None:
    proc = cluster.kubectl(
        "apply", "--dry-run=server", "-k", str(REPO / "manifests" / folder), check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "(server dry run)" in proc.stdout
