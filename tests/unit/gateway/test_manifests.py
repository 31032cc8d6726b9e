"""The gateway's manifests: 2 hardened replicas with probes and a PDB, secure by default, and RBAC
that reads only what the gateway needs (three kinds cluster-wide, Secrets of its own namespace)
and writes only its own ModelDemand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mlxfleet_operator.api import resources

REPO = Path(__file__).resolve().parents[3]
GATEWAY = REPO / "manifests" / "gateway"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _one(path: Path, kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [
        d
        for d in _docs(path)
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    return doc


def test_kustomization_lists_the_gateway() -> None:
    k = yaml.safe_load((GATEWAY / "kustomization.yaml").read_text())
    assert set(k["resources"]) == {"deployment.yaml", "service.yaml", "pdb.yaml"}
    assert k["namespace"] == resources.OPERATOR_NAMESPACE


def test_two_hardened_replicas_with_probes_and_no_anonymous_access() -> None:
    dep = _one(GATEWAY / "deployment.yaml", "Deployment")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == resources.GATEWAY_SERVICE_ACCOUNT
    (c,) = pod["containers"]
    assert c["command"] == ["mlxfleet-gateway"]
    args = c["args"]
    assert "--listen=0.0.0.0:8080" in args
    assert "--peers=2" in args
    assert not any(a.startswith("--allow-anonymous") for a in args)
    assert not any(a.startswith("--allow-open-data-plane") for a in args)
    assert "--fleet-key-file=/etc/mlxfleet/fleet-key/key" in args
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    pdb = _one(GATEWAY / "pdb.yaml", "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == dep["spec"]["selector"]
    svc = _one(GATEWAY / "service.yaml", "Service")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def _grants(kind: str, name: str | None = None) -> set[tuple[str, str, str]]:
    rules = _one(REPO / "manifests" / "base" / "gateway-rbac.yaml", kind, name)["rules"]
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_rbac_is_read_only_and_least_privilege() -> None:
    """Reads three kinds cluster-wide and the Secrets of its namespace; its one write is its own
    ModelDemand in its namespace (requests held for sleeping deployments), by name only."""
    assert _grants("ClusterRole") == {
        ("mlxfleet.io", r, v)
        for r in ("modeldeployments", "modelroutes", "inferencenodes")  # which are approved
        for v in ("get", "list", "watch")
    }
    rbac = REPO / "manifests" / "base" / "gateway-rbac.yaml"
    names = sorted(d["metadata"]["name"] for d in _docs(rbac) if d["kind"] == "Role")
    assert names == ["mlxfleet-gateway-demand", "mlxfleet-gateway-keys"]
    keys = "mlxfleet-gateway-keys"
    assert _grants("Role", keys) == {("", "secrets", v) for v in ("get", "list", "watch")}
    demand = "mlxfleet-gateway-demand"
    assert _grants("Role", demand) == {
        ("mlxfleet.io", "modeldemands", v) for v in ("get", "create", "patch", "delete")
    }
    for name in names:
        role = _one(rbac, "Role", name)
        assert role["metadata"]["namespace"] == resources.OPERATOR_NAMESPACE
        binding = _one(rbac, "RoleBinding", name)
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": resources.GATEWAY_SERVICE_ACCOUNT,
                "namespace": resources.OPERATOR_NAMESPACE,
            }
        ]


def test_examples_parse() -> None:
    kinds = {d["type"] for p in (GATEWAY / "examples").glob("*.yaml") for d in _docs(p)}
    assert kinds == {"Opaque", "mlxfleet.io/api-key", "mlxfleet.io/provider-key"}


def test_the_example_api_key_is_a_valid_key_secret() -> None:
    from mlxfleet_gateway.core import keys

    secret = _one(GATEWAY / "examples" / "api-key-secret.yaml", "Secret")
    assert secret["type"] == keys.SECRET_TYPE
    key = keys.from_secret(secret["metadata"]["name"], secret["stringData"])
    assert key.spec.team == "search"
