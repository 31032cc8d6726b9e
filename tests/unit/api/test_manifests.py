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
        "join.yaml",  # mlxfleet-agent join: the bootstrap identity's RBAC and admission policy
        "pdb.yaml",
        "gateway-rbac.yaml",
    }
    assert {p.name for p in BASE.iterdir()} == expected
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert set(kustomization["resources"]) == expected - {"kustomization.yaml"}
    # no namespace transformer: it would move the agents' Secret Role into the gateway's namespace
    assert "namespace" not in kustomization


def test_join_identity_may_only_create() -> None:
    roles = [d for d in _docs("join.yaml") if d["kind"] in ("ClusterRole", "Role")]
    assert {verb for r in roles for rule in r["rules"] for verb in rule["verbs"]} == {"create"}
    bindings = [d for d in _docs("join.yaml") if d["kind"].endswith("Binding") and "subjects" in d]
    assert {s["name"] for b in bindings for s in b["subjects"]} == {"system:bootstrappers:mlxfleet"}
    binding = _by_kind("join.yaml", "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_namespace_and_service_account() -> None:
    names = [d["metadata"]["name"] for d in _docs("namespace.yaml")]
    assert names == [resources.OPERATOR_NAMESPACE, resources.AGENT_SECRETS_NAMESPACE]
    account = _by_kind("serviceaccount.yaml", "ServiceAccount")["metadata"]
    assert (account["name"], account["namespace"]) == ("mlxfleet-operator", "mlxfleet-system")


def test_deployment_runs_two_hardened_replicas_that_elect_a_leader() -> None:
    deployment = _by_kind("deployment.yaml", "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    # a new pod (a standby) is up before an old one goes: never zero operators
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    [term] = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    assert pod["serviceAccountName"] == resources.OPERATOR_SERVICE_ACCOUNT
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["command"] == ["mlxfleet-operator"]
    assert "--standalone" not in container["args"]  # leader election is on
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}) for e in container["env"]}
    assert env["POD_NAME"] == {"fieldPath": "metadata.name"}  # the Lease holder's identity
    assert env["POD_NAMESPACE"] == {"fieldPath": "metadata.namespace"}  # where the Lease is
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


def test_the_operator_reads_the_fleet_key_from_a_mount_never_through_the_api() -> None:
    """Each approved node's keys derive from the gateway's fleet key: the operator has it as a
    read-only file from an optional Secret volume (no RBAC on that Secret); it starts without."""
    pod = _by_kind("deployment.yaml", "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "--fleet-key-file=/etc/mlxfleet/fleet-key/key" in container["args"]
    assert "--fleet-key-optional" in container["args"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "fleet-key"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/etc/mlxfleet/fleet-key", True)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "fleet-key"]
    assert volume["secret"] == {
        "secretName": "mlxfleet-fleet-key", "defaultMode": 0o400, "optional": True,
    }  # fmt: skip


def test_disruption_budget_keeps_one_operator() -> None:
    pdb = _by_kind("pdb.yaml", "PodDisruptionBudget")
    assert pdb["metadata"]["namespace"] == resources.OPERATOR_NAMESPACE
    assert pdb["spec"]["maxUnavailable"] == 1
    labels = _by_kind("deployment.yaml", "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


SECRETS_ROLE = "mlxfleet-operator-secrets"
PROVIDER_KEYS_ROLE = "mlxfleet-operator-provider-keys"
LEADER_ROLE = "mlxfleet-operator-leader-election"


def _named(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in _docs("rbac.yaml") if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _rules(kind: str, name: str = "mlxfleet-operator") -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = _named(kind, name)["rules"]
    return rules


def _grants(kind: str, name: str = "mlxfleet-operator") -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in _rules(kind, name)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_has_no_wildcards() -> None:
    roles = [(d["kind"], d["metadata"]["name"]) for d in _docs("rbac.yaml") if "rules" in d]
    assert sorted(roles) == [
        ("ClusterRole", "mlxfleet-operator"),
        ("Role", LEADER_ROLE),
        ("Role", PROVIDER_KEYS_ROLE),
        ("Role", SECRETS_ROLE),
    ]
    for kind, name in roles:
        for rule in _rules(kind, name):
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], (kind, rule)
            if name not in (LEADER_ROLE, PROVIDER_KEYS_ROLE):  # these name their objects
                assert "resourceNames" not in rule
            else:
                assert rule.get("resourceNames") != [], (kind, rule)  # [] would mean all names
            assert "nonResourceURLs" not in rule


def test_leases_only_the_operators_own_in_its_namespace() -> None:
    assert not any(r == "leases" for _, r, _ in _grants("ClusterRole"))
    role = _named("Role", LEADER_ROLE)
    assert role["metadata"]["namespace"] == resources.OPERATOR_NAMESPACE
    rules = {
        (tuple(r["verbs"]), tuple(r.get("resourceNames", ()))): (r["apiGroups"], r["resources"])
        for r in role["rules"]
    }
    lease = (["coordination.k8s.io"], ["leases"])
    # create cannot be limited by name; everything else only on the one Lease
    assert rules == {(("create",), ()): lease, (("get", "update"), ("mlxfleet-operator",)): lease}


OPERATED = [r for r in resources.ALL if r is not resources.MODEL_DEMAND]  # the gateways write it


def test_cluster_role_grants_exactly_what_the_operator_needs() -> None:
    expected = (
        {
            ("mlxfleet.io", r.plural, v)
            for r in OPERATED
            for v in ("get", "list", "watch", "patch", "update")
        }
        | {("mlxfleet.io", "swapplans", v) for v in ("create", "delete")}
        | {
            ("mlxfleet.io", f"{r.plural}/status", v)
            for r in OPERATED
            for v in ("get", "patch", "update")
        }
        # the gateways' held requests: read only (it wakes deployments by their annotation)
        | {("mlxfleet.io", "modeldemands", v) for v in ("get", "list", "watch")}
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
    role = _named("Role", SECRETS_ROLE)
    # not the operator's (and gateway's) namespace: the gateway may read every Secret there
    assert role["metadata"]["namespace"] == resources.AGENT_SECRETS_NAMESPACE
    assert _grants("Role", SECRETS_ROLE) == {("", "secrets", "get")}  # by name, not list
    # the provider-key Secrets routes name, in the gateway's namespace: by name too (table rows),
    # and only the names listed (issue 22 item 9: a plain `get` there read the fleet key)
    keys = _named("Role", PROVIDER_KEYS_ROLE)
    assert keys["metadata"]["namespace"] == resources.OPERATOR_NAMESPACE
    assert _grants("Role", PROVIDER_KEYS_ROLE) == {("", "secrets", "get")}
    (rule,) = keys["rules"]
    example = yaml.safe_load(
        (REPO / "manifests/gateway/examples/provider-key-secret.yaml").read_text()
    )
    assert rule["resourceNames"] == [example["metadata"]["name"]] == ["openai"]
    fleet_key = yaml.safe_load(
        (REPO / "manifests/gateway/examples/fleet-key-secret.yaml").read_text()
    )
    assert fleet_key["metadata"]["name"] not in rule["resourceNames"]


def test_the_gateway_egress_policy_is_rendered_apart_and_off_by_default() -> None:
    """Issue 22 item 9: an egress NetworkPolicy for the gateway, not applied by the gateway's own
    kustomization (off by default), in manifests/gateway/egress with example addresses."""
    gateway = yaml.safe_load((REPO / "manifests/gateway/kustomization.yaml").read_text())
    assert not any("egress" in r or "networkpolicy" in r for r in gateway["resources"])
    egress = yaml.safe_load((REPO / "manifests/gateway/egress/kustomization.yaml").read_text())
    assert egress["resources"] == ["networkpolicy.yaml"]
    (policy,) = yaml.safe_load_all(
        (REPO / "manifests/gateway/egress/networkpolicy.yaml").read_text()
    )
    assert policy["kind"] == "NetworkPolicy"
    assert policy["spec"]["policyTypes"] == ["Egress"]
    deployment = yaml.safe_load((REPO / "manifests/gateway/deployment.yaml").read_text())
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    ports = [[p["port"] for p in rule["ports"]] for rule in policy["spec"]["egress"]]
    assert ports == [[53, 53], [6443], [8471], [443]]  # DNS, API server, agents, providers
    providers = policy["spec"]["egress"][-1]["to"][0]["ipBlock"]
    assert "169.254.0.0/16" in providers["except"]  # no cloud metadata through a route


@pytest.mark.parametrize(
    ("kind", "role_kind", "name"),
    [
        pytest.param("ClusterRoleBinding", "ClusterRole", "mlxfleet-operator", id="cluster"),
        pytest.param("RoleBinding", "Role", SECRETS_ROLE, id="secrets"),
        pytest.param("RoleBinding", "Role", PROVIDER_KEYS_ROLE, id="provider-keys"),
        pytest.param("RoleBinding", "Role", LEADER_ROLE, id="leader-election"),
    ],
)
def test_bindings_name_the_operator_service_account(kind: str, role_kind: str, name: str) -> None:
    binding = _named(kind, name)
    assert binding["roleRef"]["kind"] == role_kind
    assert binding["roleRef"]["name"] == name
    assert binding["metadata"].get("namespace") == _named(role_kind, name)["metadata"].get(
        "namespace"
    )
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": resources.OPERATOR_SERVICE_ACCOUNT,
            "namespace": resources.OPERATOR_NAMESPACE,
        }
    ]
