"""Fixture `cluster`: a real etcd + kube-apiserver on loopback for the whole test session.

Same code as `make cluster-up` (mlxfleet_operator.dev.controlplane): CRDs from crds/ installed and
Established, the operator's namespace, ServiceAccount and RBAC from manifests/base applied.
Fixture `bare_cluster`: another one per test module with nothing installed, for installers (helm)
that must own every object they create and may delete the CRDs others rely on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from mlxfleet_operator.dev import controlplane, credentials


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.ControlPlane]:
    root = tmp_path_factory.mktemp("control-plane") / "cp"
    with controlplane.running(root) as plane:
        yield plane


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.ControlPlane]:
    root = tmp_path_factory.mktemp("bare-control-plane")
    plane = controlplane.start(root / "cp", bare=True, die_with_parent=True)
    try:
        yield plane
    finally:
        controlplane.stop(root / "cp")


PROVIDER_KEYS_ROLE = "mlxfleet-operator-provider-keys"


def allow_provider_keys(plane: controlplane.ControlPlane, *names: str) -> None:
    """What `helm upgrade --set operator.providerKeySecrets={...}` does (or a kustomize patch of
    manifests/base/rbac.yaml): let the operator look at these provider-key Secrets of its
    namespace too, by name; waits until its identity may."""
    namespace = credentials.OPERATOR_NAMESPACE
    got = plane.kubectl("get", "role", PROVIDER_KEYS_ROLE, "-n", namespace, "-o", "json")
    listed = json.loads(got.stdout)["rules"][0]["resourceNames"]
    patch = [
        {"op": "replace", "path": "/rules/0/resourceNames", "value": sorted({*listed, *names})}
    ]
    plane.kubectl(
        "patch", "role", PROVIDER_KEYS_ROLE, "-n", namespace, "--type=json", "-p", json.dumps(patch)
    )
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            can = plane.kubectl(
                "auth", "can-i", "get", f"secrets/{name}", "-n", namespace, as_operator=True,
                check=False,
            )  # fmt: skip
            if can.stdout.strip() == "yes":
                break
            assert time.monotonic() < deadline, f"the operator still may not get {name}"
            time.sleep(0.2)
