"""manifests/flux: accepted by Flux's own CRDs on the real API server, and every path, source and
health check it names exists in this repository."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlxfleet_operator.dev import controlplane
from tests.support.tools import build

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[3]
FLUX = REPO / "manifests" / "flux"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FLUX / name).read_text()) if d]


def test_flux_objects_pass_server_side_validation(cluster: controlplane.ControlPlane) -> None:
    crds = build("flux-crds")
    cluster.kubectl("apply", "--server-side", f"--filename={crds}")
    cluster.wait_established(
        "kustomizations.kustomize.toolkit.fluxcd.io", "gitrepositories.source.toolkit.fluxcd.io"
    )
    cluster.kubectl("create", "namespace", "flux-system", check=False)
    proc = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", f"--filename={FLUX}", check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("(server dry run)") == 5, proc.stdout


def test_paths_sources_and_health_checks_exist(cluster: controlplane.ControlPlane) -> None:
    platform = docs("mlxfleet.yaml")
    (source,) = [d for d in platform if d["kind"] == "GitRepository"]
    kustomizations = {
        d["metadata"]["name"]: d["spec"] for d in platform if d["kind"] != source["kind"]
    }
    assert set(kustomizations) == {"mlxfleet-crds", "mlxfleet-operator"}
    kept = [
        line[2:].strip("/") for line in source["spec"]["ignore"].splitlines() if line[:1] == "!"
    ]
    for spec in kustomizations.values():
        assert spec["sourceRef"] == {"kind": "GitRepository", "name": source["metadata"]["name"]}
        path = spec["path"].removeprefix("./")
        assert (REPO / path).is_dir()
        assert path in kept, f"{path} is ignored by the GitRepository"
    assert kustomizations["mlxfleet-crds"]["prune"] is False  # never delete the CRDs
    assert kustomizations["mlxfleet-operator"]["dependsOn"] == [{"name": "mlxfleet-crds"}]
    rendered = cluster.kubectl("kustomize", str(REPO / "manifests" / "base")).stdout
    objects = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
        for d in yaml.safe_load_all(rendered)
        if d
    }
    for check in kustomizations["mlxfleet-operator"]["healthChecks"]:
        assert (check["kind"], check["namespace"], check["name"]) in objects
    models = {d["kind"]: d for d in docs("models.yaml")}
    assert models["Kustomization"]["spec"]["wait"] is True
    assert models["Kustomization"]["spec"]["dependsOn"] == [{"name": "mlxfleet-operator"}]
