"""The operator manifests render with kustomize and pass the real API server's validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[3]


def test_base_renders_and_passes_server_validation_and_pod_security(cluster: Any) -> None:
    rendered = cluster.kubectl("kustomize", str(REPO / "manifests" / "base")).stdout
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(rendered) if d)
    assert kinds == [
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "Deployment",
        "Namespace",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "ServiceAccount",
        "ServiceAccount",
    ]
    proc = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=rendered, check=False
    )
    assert proc.returncode == 0, proc.stderr
    # The namespace enforces the `restricted` Pod Security level; a violation would warn here.
    assert "PodSecurity" not in proc.stderr, proc.stderr
    assert "deployment.apps/mlxfleet-operator serverside-applied (server dry run)" in proc.stdout


def test_samples_kustomization_renders_every_sample(cluster: Any) -> None:
    rendered = cluster.kubectl("kustomize", str(REPO / "manifests" / "samples")).stdout
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(rendered) if d)
    assert kinds == ["InferenceNode", "ModelDeployment", "ModelRoute", "Secret", "SwapPlan"]
