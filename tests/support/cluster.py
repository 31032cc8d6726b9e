"""Fixture `cluster`: a real etcd + kube-apiserver on loopback for the whole test session.

Same code as `make cluster-up` (mlxfleet_operator.dev.controlplane): CRDs from crds/ installed and
Established, the operator's namespace, ServiceAccount and RBAC from manifests/base applied.
Fixture `bare_cluster`: another one per test module with nothing installed, for installers (helm)
that must own every object they create and may delete the CRDs others rely on.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mlxfleet_operator.dev import controlplane


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
