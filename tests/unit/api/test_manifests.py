"""The shipped manifests: the kustomize base, a hardened operator Deployment, least privilege."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlxfleet_operator.api import resources

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "manifests" / "base"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((BASE / name).read_text()) if d]


def _by_kind(name: str, kind: str) -> dict[str, Any]:
    (doc,) = [d for d in _docs(name) if d["kind"] == kind]
    return doc


def test_base_holds_exactly_the_expected_files() -> None:
    expected = {
        "kustomization.yaml",
        "namespace.yaml",
        "serviceaccount.yaml",
        "rbac.yaml",
        "deployment.yaml",
        "gateway-rbac.yaml",
    }
    assert {p.name for p in BASE.iterdir()} == expected
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert set(kustomization["resources"]) == expected - {"kustomization.yaml"}
    assert kustomization["namespace"] == resources.OPERATOR_NAMESPACE


def test_namespace_and_service_account() -> None:
    assert _by_kind("namespace.yaml", "Namespace")["metadata"]["name"] == "mlxfleet-system"
    account = _by_kind("serviceaccount.yaml", "ServiceAccount")["metadata"]
    assert (account["name"], account["namespace"]) == ("mlxfleet-operator", "mlxfleet-system")


def test_deployment_runs_one_hardened_replica() -> None:
    deployment = _by_kind("deployment.yaml", "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == resources.OPERATOR_SERVICE_ACCOUNT
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["command"] == ["mlxfleet-operator"]
    assert "--standalone" in container["args"]
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]
    assert "--metrics-port=9090" in container["args"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/tmp" in mounts, "a read-only root filesystem needs a writable /tmp"


def _rules(kind: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = _by_kind("rbac.yaml", kind)["rules"]
    return rules


def _grants(kind: str) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in _rules(kind)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_has_no_wildcards() -> None:
    for kind in ("ClusterRole", "Role"):
        for rule in _rules(kind):
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], (kind, rule)
            assert "resourceNames" not in rule
            assert "nonResourceURLs" not in rule


def test_cluster_role_grants_exactly_what_the_operator_needs() -> None:
    expected = (
        {
            ("mlxfleet.io", r.plural, v)
            for r in resources.ALL
            for v in ("get", "list", "watch", "patch", "update")
        }
        | {("mlxfleet.io", "swapplans", v) for v in ("create", "delete")}
        | {
            ("mlxfleet.io", f"{r.plural}/status", v)
            for r in resources.ALL
            for v in ("get", "patch", "update")
        }
        | {(g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "patch")}
        | {("", "services", v) for v in ("get", "create", "patch", "delete")}
        | {
            ("discovery.k8s.io", "endpointslices", v)
            for v in ("get", "list", "create", "patch", "delete")
        }
        | {
            ("apiextensions.k8s.io", "customresourcedefinitions", v)
            for v in ("get", "list", "watch")
        }
        | {("", "namespaces", v) for v in ("list", "watch")}
    )
    assert _grants("ClusterRole") == expected


def test_secrets_only_through_a_namespaced_role() -> None:
    assert not any(resource == "secrets" for _, resource, _ in _grants("ClusterRole"))
    role = _by_kind("rbac.yaml", "Role")
    assert role["metadata"]["namespace"] == resources.OPERATOR_NAMESPACE
    assert _grants("Role") == {("", "secrets", "get")}  # by name; list would read them all


@pytest.mark.parametrize(
    ("kind", "role_kind"),
    [
        pytest.param("ClusterRoleBinding", "ClusterRole", id="cluster"),
        pytest.param("RoleBinding", "Role", id="namespaced"),
    ],
)
def test_bindings_name_the_operator_service_account(kind: str, role_kind: str) -> None:
    binding = _by_kind("rbac.yaml", kind)
    assert binding["roleRef"]["kind"] == role_kind
    assert binding["roleRef"]["name"] == _by_kind("rbac.yaml", role_kind)["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": resources.OPERATOR_SERVICE_ACCOUNT,
            "namespace": resources.OPERATOR_NAMESPACE,
        }
    ]


def test_dockerfile_builds_a_non_root_operator_image() -> None:
    text = (REPO / "manifests" / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    assert 'pip install ".[operator,gateway]"' in text  # the chart runs the gateway from it
    assert "USER 65532" in text
    assert 'ENTRYPOINT ["mlxfleet-operator"]' in text
