"""The gateway's shipped RBAC and manifests on the real API server, as its own identity."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlxfleet_operator.api import resources
from mlxfleet_operator.dev import controlplane, demoobjects

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[3]
SYSTEM = "mlxfleet-system"
AGENTS = resources.AGENT_SECRETS_NAMESPACE
ALL = "--all-namespaces"
DEMAND = f"{resources.MODEL_DEMAND.plural}.{resources.GROUP}"


def _p(verb: str, resource: str, *extra: str) -> Any:
    return pytest.param(verb, resource, extra, id=" ".join((verb, resource, *extra)))


ALLOWED = [
    *(
        _p(v, r, ALL)
        for r in (
            "modeldeployments.mlxfleet.io",
            "modelroutes.mlxfleet.io",
            "inferencenodes.mlxfleet.io",  # only approved nodes get requests
        )
        for v in ("get", "list", "watch")
    ),
    *(_p(v, "secrets", "-n", SYSTEM) for v in ("get", "list", "watch")),
    # its own ModelDemand (requests held for sleeping deployments): server-side apply, delete
    *(_p(v, DEMAND, "-n", SYSTEM) for v in ("get", "create", "patch", "delete")),
]
DENIED = [
    _p("patch", "modeldeployments.mlxfleet.io", "-n", "default"),
    _p("update", "modelroutes.mlxfleet.io", "--subresource=status", "-n", "default"),
    *(_p(v, "inferencenodes.mlxfleet.io") for v in ("create", "patch", "update", "delete")),
    _p("patch", "inferencenodes.mlxfleet.io", "--subresource=status"),
    _p("list", "swapplans.mlxfleet.io", ALL),
    _p("get", "secrets", "-n", "default"),
    *(_p(v, "secrets", "-n", AGENTS) for v in ("get", "list", "watch")),  # agents' tokens
    _p("create", "secrets", "-n", SYSTEM),
    _p("list", "endpointslices.discovery.k8s.io", ALL),
    _p("create", "events", "-n", SYSTEM),
    _p("get", "pods", "-n", SYSTEM),
    # ModelDemands: only in its own namespace, only by name, never another's wholesale
    *(_p(v, DEMAND, "-n", SYSTEM) for v in ("list", "watch", "update", "deletecollection")),
    *(_p(v, DEMAND, "-n", "default") for v in ("get", "create", "patch", "delete")),
    # it wakes deployments only through its ModelDemand: never their spec, status or scale
    _p("patch", "modeldeployments.mlxfleet.io", "--subresource=status", ALL),
    _p("update", "modeldeployments.mlxfleet.io", "--subresource=scale", ALL),
    _p("patch", "modeldeployments.mlxfleet.io", "--subresource=scale", ALL),
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


def _sample_agent_secret() -> dict[str, Any]:
    path = REPO / "manifests" / "samples" / "node" / "agent-secret.example.yaml"
    return dict(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize(
    "made_by",
    [
        pytest.param(lambda: demoobjects.agent_secret("mac-mini-1", "t0ken"), id="demo"),
        pytest.param(_sample_agent_secret, id="install-sample"),
    ],
)
def test_gateway_cannot_read_an_agent_token_that_the_operator_reads(
    cluster: controlplane.ControlPlane, made_by: Any
) -> None:
    """The attack: the internet-facing gateway's identity may read every Secret of its own
    namespace, so an agent token stored there (where the demo and the install docs put them)
    gave whoever took the gateway every Mac's control API. Where they go now it is refused, and
    the operator still reads it (by name)."""
    secret = made_by()
    name = f"{secret['metadata']['name']}-{secrets.token_hex(3)}"
    namespace = secret["metadata"]["namespace"]
    secret["metadata"]["name"] = name
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(secret))
    try:
        args = ("get", "secret", name, "-n", namespace, "-o", "jsonpath={.data.token}")
        stolen = cluster.kubectl(*args, as_gateway=True, check=False)
        assert stolen.returncode != 0, f"the gateway read {namespace}/{name}: {stolen.stdout}"
        assert "Forbidden" in stolen.stderr, stolen.stderr
        listed = cluster.kubectl("get", "secrets", "-n", namespace, as_gateway=True, check=False)
        assert listed.returncode != 0
        assert name not in listed.stdout
        assert cluster.kubectl(*args, as_operator=True).stdout  # the operator still can
    finally:
        cluster.kubectl("delete", "secret", name, "-n", namespace, check=False)


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


def test_gateway_writes_its_model_demand_as_the_gateway_does(
    cluster: controlplane.ControlPlane,
) -> None:
    """The writes `mlxfleet_gateway.demand` makes, made with the gateway's own identity: a
    server-side apply that creates, another that changes it, a delete; the same object in
    another namespace is refused."""
    from datetime import UTC, datetime

    from mlxfleet_gateway.core import coldstart

    now = datetime.now(UTC)
    gateway = f"gw-rbac-{secrets.token_hex(3)}"
    held = [coldstart.Entry("team-a", "coder", 2, now)]
    body = coldstart.demand(held, gateway=gateway, namespace=SYSTEM, now=now)
    assert body is not None
    name = coldstart.object_name(gateway)
    apply = ("apply", "--server-side", "--field-manager=mlxfleet-gateway", "-f", "-")
    try:
        cluster.kubectl(*apply, input=json.dumps(body), as_gateway=True)
        body["spec"]["deployments"][0]["waiting"] = 3  # type: ignore[index]
        cluster.kubectl(*apply, input=json.dumps(body), as_gateway=True)
        got = json.loads(cluster.kubectl("get", DEMAND, name, "-n", SYSTEM, "-o", "json").stdout)
        assert got["spec"]["deployments"][0]["waiting"] == 3
        elsewhere = json.loads(json.dumps(body))
        elsewhere["metadata"]["namespace"] = "default"
        refused = cluster.kubectl(*apply, input=json.dumps(elsewhere), as_gateway=True, check=False)
        assert refused.returncode != 0
        assert "forbidden" in refused.stderr.lower()
        cluster.kubectl("delete", DEMAND, name, "-n", SYSTEM, as_gateway=True)
    finally:
        cluster.kubectl("delete", DEMAND, name, "-n", SYSTEM, "--ignore-not-found", check=False)
