"""The gateway's shipped RBAC and manifests on the real API server, as its own identity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlxfleet_operator.dev import controlplane

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[3]
SYSTEM = "mlxfleet-system"
ALL = "--all-namespaces"


def _p(verb: str, resource: str, *extra: str) -> Any:
    return pytest.param(verb, resource, extra, id=" ".join((verb, resource, *extra)))


ALLOWED = [
    *(
        _p(v, r, ALL)
        for r in ("modeldeployments.mlxfleet.io", "modelroutes.mlxfleet.io")
        for v in ("get", "list", "watch")
    ),
    *(_p(v, "secrets", "-n", SYSTEM) for v in ("get", "list", "watch")),
]
DENIED = [
    _p("patch", "modeldeployments.mlxfleet.io", "-n", "default"),
    _p("update", "modelroutes.mlxfleet.io", "--subresource=status", "-n", "default"),
    _p("list", "inferencenodes.mlxfleet.io"),
    _p("list", "swapplans.mlxfleet.io", ALL),
    _p("get", "secrets", "-n", "default"),
    _p("create", "secrets", "-n", SYSTEM),
    _p("list", "endpointslices.discovery.k8s.io", ALL),
    _p("create", "events", "-n", SYSTEM),
    _p("get", "pods", "-n", SYSTEM),
]


def _can(
    cluster: controlplane.ControlPlane, verb: str, resource: str, extra: tuple[str, ...]
) -> str:
    out = cluster.kubectl("auth", "can-i", verb, resource, *extra, as_gateway=True, check=False)
    return out.stdout.strip()


@pytest.mark.parametrize(("verb", "resource", "extra"), ALLOWED)
def test_allowed(
    cluster: controlplane.ControlPlane, verb: str, resource: str, extra: tuple[str, ...]
) -> None:
    assert _can(cluster, verb, resource, extra) == "yes"


@pytest.mark.parametrize(("verb", "resource", "extra"), DENIED)
def test_denied(
    cluster: controlplane.ControlPlane, verb: str, resource: str, extra: tuple[str, ...]
) -> None:
    assert _can(cluster, verb, resource, extra) == "no"


def test_gateway_manifests_pass_server_validation_and_pod_security(
    cluster: controlplane.ControlPlane,
) -> None:
    rendered = cluster.kubectl("kustomize", str(REPO / "manifests" / "gateway")).stdout
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(rendered) if d)
    assert kinds == ["Deployment", "PodDisruptionBudget", "Service"]
    proc = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=rendered, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "PodSecurity" not in proc.stderr, proc.stderr
    for example in sorted((REPO / "manifests" / "gateway" / "examples").glob("*.yaml")):
        proc = cluster.kubectl(
            "apply", "--server-side", "--dry-run=server", "-f", str(example), check=False
        )
        assert proc.returncode == 0, f"{example.name}: {proc.stderr}"
