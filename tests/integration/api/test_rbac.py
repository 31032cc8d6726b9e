"""The shipped RBAC, as the operator's identity on the real API server: needed yes, rest no."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlxfleet_operator.api import resources

pytestmark = pytest.mark.cluster

SYSTEM = resources.OPERATOR_NAMESPACE
AGENTS = resources.AGENT_SECRETS_NAMESPACE
ALL = "--all-namespaces"
MD, IN, SWP, MR, DEMAND = (f"{r.plural}.{resources.GROUP}" for r in resources.ALL)
CRUD = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
# Services and EndpointSlices: read one by name (ownership check), create, server-side apply,
# delete its own; list EndpointSlices of one Service to remove stale ones. Nothing else.
SERVICE_VERBS = ("get", "create", "patch", "delete")
SLICE_VERBS = ("get", "list", "create", "patch", "delete")
LEASES, LEASE = "leases.coordination.k8s.io", "mlxfleet-operator"
FLEET_KEY = "mlxfleet-fleet-key"  # gateway.fleetKeySecret


def _p(verb: str, resource: str, *extra: str) -> Any:
    return pytest.param(verb, resource, extra, id=" ".join((verb, resource, *extra)))


ALLOWED = [
    *(_p(v, r, ALL) for r in (MD, SWP, MR) for v in ("get", "list", "watch", "patch", "update")),
    *(_p(v, IN) for v in ("get", "list", "watch", "patch", "update")),
    _p("create", SWP, "-n", "default"),
    _p("delete", SWP, "-n", "default"),
    *(
        _p(v, r, "--subresource=status", ALL)
        for r in (MD, SWP, MR)
        for v in ("get", "patch", "update")
    ),
    *(_p(v, IN, "--subresource=status") for v in ("get", "patch", "update")),
    *(_p(v, "events", ALL) for v in ("create", "patch")),
    *(_p(v, "events.events.k8s.io", ALL) for v in ("create", "patch")),
    *(_p(v, "services", ALL) for v in SERVICE_VERBS),
    *(_p(v, "endpointslices.discovery.k8s.io", ALL) for v in SLICE_VERBS),
    *(_p(v, "customresourcedefinitions.apiextensions.k8s.io") for v in ("get", "list", "watch")),
    _p("list", "namespaces"),
    _p("watch", "namespaces"),
    *(_p(v, DEMAND, ALL) for v in ("get", "list", "watch")),  # gateways' held requests
    _p("get", "secrets", "-n", AGENTS),
    # by name: the provider-key Secrets listed (operator.providerKeySecrets; the base: the
    # example's `openai`), as table rows (routes)
    _p("get", "secrets/openai", "-n", SYSTEM),
    # leader election: one Lease in its own namespace (create cannot be limited by name)
    _p("create", LEASES, "-n", SYSTEM),
    _p("get", f"{LEASES}/{LEASE}", "-n", SYSTEM),
    _p("update", f"{LEASES}/{LEASE}", "-n", SYSTEM),
]

DENIED = [
    _p("get", "secrets", "-n", "default"),
    _p("list", "secrets", ALL),
    _p("list", "secrets", "-n", SYSTEM),  # the gateway's keys: never listed or watched
    _p("watch", "secrets", "-n", SYSTEM),
    # issue 22 item 9: not every Secret there by name, so never the fleet key nor the API keys
    _p("get", "secrets", "-n", SYSTEM),
    _p("get", f"secrets/{FLEET_KEY}", "-n", SYSTEM),
    _p("get", "secrets/team-a-key", "-n", SYSTEM),
    _p("list", "secrets", "-n", AGENTS),  # only Secrets named by an InferenceNode, by name
    _p("watch", "secrets", "-n", AGENTS),
    *(_p(v, "secrets", "-n", AGENTS) for v in ("create", "update", "patch", "delete")),
    *(_p(v, "services", ALL) for v in CRUD if v not in SERVICE_VERBS),
    *(_p(v, "endpointslices.discovery.k8s.io", ALL) for v in CRUD if v not in SLICE_VERBS),
    _p("update", "services", "--subresource=status", "-n", "default"),
    _p("create", "endpoints", "-n", "default"),
    _p("watch", "secrets", "-n", "kube-system"),
    _p("create", "secrets", "-n", SYSTEM),
    _p("update", "secrets", "-n", SYSTEM),
    _p("delete", "secrets", "-n", SYSTEM),
    _p("delete", "customresourcedefinitions.apiextensions.k8s.io"),
    _p("create", "customresourcedefinitions.apiextensions.k8s.io"),
    _p("update", "customresourcedefinitions.apiextensions.k8s.io"),
    _p("create", "pods", "-n", "default"),
    _p("delete", "pods", "-n", SYSTEM),
    _p("get", "pods", "-n", "default"),
    _p("create", "pods", "--subresource=exec", "-n", SYSTEM),
    _p("create", "deployments.apps", "-n", SYSTEM),
    _p("create", MD, "-n", "default"),
    *(_p(v, DEMAND, "-n", SYSTEM) for v in ("create", "update", "patch", "delete")),
    _p("delete", MD, "-n", "default"),
    _p("create", IN),
    _p("delete", IN),
    _p("deletecollection", SWP, "-n", "default"),
    _p("create", MR, "-n", "default"),
    _p("delete", MR, "-n", "default"),
    _p("create", "clusterroles.rbac.authorization.k8s.io"),
    _p("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    _p("create", "rolebindings.rbac.authorization.k8s.io", "-n", SYSTEM),
    _p("escalate", "clusterroles.rbac.authorization.k8s.io"),
    _p("bind", "clusterroles.rbac.authorization.k8s.io"),
    _p("impersonate", "users"),
    _p("create", "serviceaccounts", "--subresource=token", "-n", SYSTEM),
    _p("create", "namespaces"),
    _p("delete", "namespaces"),
    _p("get", "nodes"),
    _p("update", "configmaps", "-n", "kube-system"),
    *(
        _p(v, LEASES, "-n", ns)
        for v in ("create", "get", "update")
        for ns in ("default", "kube-system")
    ),
    *(_p(v, LEASES, ALL) for v in ("create", "get", "list", "watch", "update")),
    *(_p(v, LEASES, "-n", SYSTEM) for v in ("get", "list", "watch", "update", "patch", "delete")),
    *(_p(v, f"{LEASES}/{LEASE}", "-n", SYSTEM) for v in ("patch", "delete")),
    *(_p(v, f"{LEASES}/other", "-n", SYSTEM) for v in ("get", "update")),
    _p("deletecollection", LEASES, "-n", SYSTEM),
    _p("create", "validatingwebhookconfigurations.admissionregistration.k8s.io"),
]


def _can(cluster: Any, verb: str, resource: str, extra: tuple[str, ...]) -> Any:
    return cluster.kubectl("auth", "can-i", verb, resource, *extra, as_operator=True, check=False)


@pytest.mark.parametrize(("verb", "resource", "extra"), ALLOWED)
def test_operator_may(cluster: Any, verb: str, resource: str, extra: tuple[str, ...]) -> None:
    proc = _can(cluster, verb, resource, extra)
    assert proc.stdout.strip() == "yes", proc.stdout + proc.stderr


@pytest.mark.parametrize(("verb", "resource", "extra"), DENIED)
def test_operator_may_not(cluster: Any, verb: str, resource: str, extra: tuple[str, ...]) -> None:
    proc = _can(cluster, verb, resource, extra)
    assert proc.stdout.strip() == "no", proc.stdout + proc.stderr
    assert proc.returncode == 1


def _secret(name: str, namespace: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": {"token": "t0ken"},
        }
    )


def test_operator_reads_agent_tokens_only_in_the_agents_namespace(cluster: Any) -> None:
    """`get` by name in the agents' namespace (and, for provider-key table rows, in the gateway's:
    see ALLOWED / DENIED), nothing elsewhere."""
    cluster.kubectl("apply", "--server-side", "-f", "-", input=_secret("api-rbac-agent", AGENTS))
    for namespace in ("default", SYSTEM):
        cluster.kubectl(
            "apply", "--server-side", "-f", "-", input=_secret("api-rbac-other", namespace)
        )
    own = cluster.kubectl("get", "secret", "api-rbac-agent", "-n", AGENTS, as_operator=True)
    assert "api-rbac-agent" in own.stdout
    other = cluster.kubectl(
        "get", "secret", "api-rbac-other", "-n", "default", as_operator=True, check=False
    )
    assert other.returncode != 0
    assert "Forbidden" in other.stderr


def test_operator_cannot_read_the_fleet_key(cluster: Any) -> None:
    """Issue 22 item 9: the operator's `get` on Secrets of the release namespace reached the fleet
    key (the data-plane credential of every agent); now only the provider keys listed."""
    cluster.kubectl("apply", "--server-side", "-f", "-", input=_secret(FLEET_KEY, SYSTEM))
    cluster.kubectl("apply", "--server-side", "-f", "-", input=_secret("openai", SYSTEM))
    try:
        denied = cluster.kubectl(
            "get", "secret", FLEET_KEY, "-n", SYSTEM, "-o", "json", as_operator=True, check=False
        )
        assert denied.returncode != 0
        assert "Forbidden" in denied.stderr
        assert "t0ken" not in denied.stdout
        listed = cluster.kubectl("get", "secret", "openai", "-n", SYSTEM, as_operator=True)
        assert "openai" in listed.stdout
    finally:  # the session's cluster is shared: the gateway's examples apply these names too
        # (as typed Secrets: a Secret's type cannot change)
        cluster.kubectl("delete", "secret", FLEET_KEY, "openai", "-n", SYSTEM, check=False)


def test_operator_writes_status_but_cannot_create_deployments(cluster: Any) -> None:
    body = {
        "apiVersion": resources.API_VERSION,
        "kind": "ModelDeployment",
        "metadata": {"name": "api-rbac", "namespace": "default"},
        "spec": {"model": {"source": "hf://mlx-community/tiny"}},
    }
    denied = cluster.kubectl(
        "create", "-f", "-", as_operator=True, input=json.dumps(body), check=False
    )
    assert denied.returncode != 0
    assert "Forbidden" in denied.stderr
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(body))
    status = json.dumps({"status": {"observedGeneration": 1, "readyReplicas": 0}})
    cluster.kubectl(
        "patch",
        "mdep",
        "api-rbac",
        "-n",
        "default",
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
        as_operator=True,
    )
    got = cluster.kubectl(
        "get", "mdep", "api-rbac", "-n", "default", "-o", "json", as_operator=True
    )
    assert json.loads(got.stdout)["status"]["observedGeneration"] == 1


def _lease(name: str, namespace: str) -> str:
    return json.dumps(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"holderIdentity": "rbac-test", "leaseDurationSeconds": 1},
        }
    )


def test_operator_writes_only_its_own_lease_in_its_namespace(cluster: Any) -> None:
    for namespace, name in (("default", LEASE), ("kube-system", LEASE), (SYSTEM, "other")):
        denied = cluster.kubectl(
            "create", "-f", "-", as_operator=True, input=_lease(name, namespace), check=False
        )
        if denied.returncode == 0:  # create cannot be limited by name: any name in SYSTEM
            assert namespace == SYSTEM
            reread = cluster.kubectl(
                "get", "lease", name, "-n", namespace, as_operator=True, check=False
            )
            assert "Forbidden" in reread.stderr  # but it can never read or renew it
            cluster.kubectl("delete", "lease", name, "-n", namespace)
        else:
            assert "Forbidden" in denied.stderr
    cluster.kubectl("delete", "lease", LEASE, "-n", SYSTEM, "--ignore-not-found")
    cluster.kubectl("create", "-f", "-", as_operator=True, input=_lease(LEASE, SYSTEM))
    got = cluster.kubectl("get", "lease", LEASE, "-n", SYSTEM, "-o", "json", as_operator=True)
    body = json.loads(got.stdout)
    body["spec"]["holderIdentity"] = "rbac-test-2"
    cluster.kubectl("replace", "-f", "-", as_operator=True, input=json.dumps(body))
    cluster.kubectl("delete", "lease", LEASE, "-n", SYSTEM)
