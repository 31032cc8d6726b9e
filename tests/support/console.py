"""Kubernetes identities and RBAC for the console's tests, on the session's real control plane.

`console_rbac(cluster)` applies the gateway's console RBAC as shipped (manifests/console/rbac.yaml,
rendered from the chart) for the test and removes it afterwards, so other modules see the
gateway's RBAC without it. `identity(cluster, name, rules=...)` makes a ServiceAccount in a
namespace of its own with a ClusterRole of the rules given (and Roles per namespace), and returns a
token from `kubectl create token`: a real Kubernetes identity the API server reviews.
May import: the standard library, yaml, the dev control plane. Called by: the console tests.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mlxfleet_operator.dev import controlplane

REPO = Path(__file__).resolve().parents[2]
CONSOLE_RBAC = REPO / "manifests" / "console" / "rbac.yaml"


@contextlib.contextmanager
def console_rbac(cluster: controlplane.ControlPlane) -> Iterator[None]:
    cluster.kubectl("apply", "-f", str(CONSOLE_RBAC))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            can = cluster.kubectl(
                "auth", "can-i", "create", "tokenreviews.authentication.k8s.io",
                as_gateway=True, check=False,
            )  # fmt: skip
            if can.stdout.strip() == "yes":
                break
            time.sleep(0.2)
        yield
    finally:
        cluster.kubectl("delete", "-f", str(CONSOLE_RBAC), "--ignore-not-found", check=False)


def rbac_documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(CONSOLE_RBAC.read_text()) if d]


@dataclass
class Identity:
    name: str
    namespace: str
    token: str
    objects: list[tuple[str, str, str]] = field(default_factory=list)  # kind, name, namespace

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def identity(
    cluster: controlplane.ControlPlane,
    name: str,
    *,
    rules: list[dict[str, Any]] | None = None,
    namespaced: dict[str, list[dict[str, Any]]] | None = None,
) -> Identity:
    """A ServiceAccount with `rules` cluster-wide and `namespaced` rules per namespace."""
    suffix = uuid.uuid4().hex[:6]
    ns = f"who-{name}-{suffix}"
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("create", "serviceaccount", name, "-n", ns)
    who = Identity(name, ns, "")
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
    role_name = f"console-test-{name}-{suffix}"
    docs: list[dict[str, Any]] = []
    if rules:
        docs += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role_name},
                "rules": rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role_name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role_name,
                },
                "subjects": subject,
            },
        ]
        who.objects += [("clusterrole", role_name, ""), ("clusterrolebinding", role_name, "")]
    for where, rs in (namespaced or {}).items():
        docs += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": role_name, "namespace": where},
                "rules": rs,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": role_name, "namespace": where},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": role_name,
                },
                "subjects": subject,
            },
        ]
        who.objects += [("role", role_name, where), ("rolebinding", role_name, where)]
    if docs:
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
        )
    who.token = cluster.kubectl("create", "token", name, "-n", ns, "--duration=2h").stdout.strip()
    return who


def remove(cluster: controlplane.ControlPlane, who: Identity) -> None:
    for kind, name, ns in who.objects:
        where = ["-n", ns] if ns else []
        cluster.kubectl("delete", kind, name, *where, "--ignore-not-found", check=False)
    cluster.kubectl("delete", "namespace", who.namespace, "--wait=false", check=False)
