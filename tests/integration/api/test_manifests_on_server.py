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
        *["ClusterRole"] * 3,  # operator, join's bootstrap identity, gateway
        *["ClusterRoleBinding"] * 3,
        "Deployment",
        *["Namespace"] * 2,  # mlxfleet-system, mlxfleet-agents (the agents' token Secrets)
        "PodDisruptionBudget",
        *["Role"] * 6,  # operator: Lease, agent tokens, provider keys; join; gateway: keys, demand
        *["RoleBinding"] * 6,
        *["ServiceAccount"] * 2,  # operator, gateway
        "ValidatingAdmissionPolicy",  # join.yaml: what a bootstrap token may create
        "ValidatingAdmissionPolicyBinding",
    ]
    proc = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=rendered, check=False
    )
    assert proc.returncode == 0, proc.stderr
    # The namespace enforces the `restricted` Pod Security level; a violation would warn here.
    assert "PodSecurity" not in proc.stderr, proc.stderr
    assert "deployment.apps/mlxfleet-operator serverside-applied (server dry run)" in proc.stdout


def test_the_gateway_egress_policy_passes_server_validation(cluster: Any) -> None:
    """Issue 22 item 9: manifests/gateway/egress (off unless applied) is a valid NetworkPolicy
    for the gateway's pods in its namespace."""
    rendered = cluster.kubectl("kustomize", str(REPO / "manifests" / "gateway" / "egress")).stdout
    (policy,) = [d for d in yaml.safe_load_all(rendered) if d]
    assert (policy["kind"], policy["metadata"]["namespace"]) == ("NetworkPolicy", "mlxfleet-system")
    proc = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=rendered, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "networkpolicy.networking.k8s.io/mlxfleet-gateway-egress serverside-applied" in (
        proc.stdout
    )


# The exact commands docs/install.md gives (a unit of its text is checked below).
NODE_COMMAND = "kubectl apply -k manifests/samples/node"
WORKLOADS_COMMAND = "kubectl apply -k manifests/samples/workloads -n {namespace}"


def test_samples_apply_server_side_with_the_documented_commands(cluster: Any) -> None:
    """Issue 15 item 9: `kubectl apply -k manifests/samples -n <ns>` failed (a Secret of
    mlxfleet-system, now mlxfleet-agents, and a cluster-scoped node in one bundle with namespaced
    workloads)."""
    namespace = "samples-team"
    cluster.kubectl("create", "namespace", namespace, check=False)
    secret_example = REPO / "manifests" / "samples" / "node" / "agent-secret.example.yaml"
    proc = cluster.kubectl("apply", "--server-side", "-f", str(secret_example), check=False)
    assert proc.returncode == 0, proc.stderr
    for command in (NODE_COMMAND, WORKLOADS_COMMAND.format(namespace=namespace)):
        args = command.split()[1:]
        args[args.index("-k") + 1] = str(REPO / args[args.index("-k") + 1])
        proc = cluster.kubectl(*args[:1], "--server-side", *args[1:], check=False)
        assert proc.returncode == 0, f"{command}: {proc.stderr}"
    node = cluster.kubectl("get", "inode", "mac-studio-1", "-o", "yaml").stdout
    assert yaml.safe_load(node)["spec"]["agent"]["url"] == "https://mac-studio-1.lan:8470"
    secret = yaml.safe_load(
        cluster.kubectl("get", "secret", "mac-studio-1-agent", "-n", "mlxfleet-agents", "-o",
                        "yaml").stdout
    )  # fmt: skip
    assert secret["metadata"]["labels"]["mlxfleet.io/agent-credentials"] == "true"
    assert set(secret["data"]) == {"token", "ca.crt"}
    names = cluster.kubectl("get", "mdep,swp", "-n", namespace, "-o", "name").stdout.split()
    assert sorted(names) == [
        "modeldeployment.mlxfleet.io/llama-70b",  # the sharded sample
        "modeldeployment.mlxfleet.io/qwen3-8b",
        "swapplan.mlxfleet.io/qwen3-8b-to-2025-06",
    ]


def test_install_docs_give_the_commands_the_suite_runs() -> None:
    text = (REPO / "docs" / "install.md").read_text()
    assert NODE_COMMAND in text
    assert WORKLOADS_COMMAND.format(namespace="<namespace>") in text


def test_sample_route_applies_server_side(cluster: Any) -> None:
    namespace = "samples-routes"
    cluster.kubectl("create", "namespace", namespace, check=False)
    routes = REPO / "manifests" / "samples" / "routes"
    proc = cluster.kubectl(
        "apply", "--server-side", "-k", str(routes), "-n", namespace, check=False
    )
    assert proc.returncode == 0, proc.stderr
    names = cluster.kubectl("get", "modelroutes", "-n", namespace, "-o", "name").stdout.split()
    assert names == ["modelroute.mlxfleet.io/chat"]
