"""The operator writes a ModelDeployment's object (not its status) only for its own finalizer
(its handler of watch events leaves no kopf record there): never at every try of a reconcile
that cannot finish now (issue 12: at 500 x 1,000 the steady state made 12 such PATCHes a
second, kopf's persisted retries of the create/update handler and the `touch-dummy` that wakes
them).

A real control plane, the operator as its own identity, one hollow Mac, and one InferenceNode
whose status says Ready while its agent never answers: every reconcile waits for that node's
first poll until `--misses` polls fail, so the create handler cannot finish for seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from benchmarks.scale import observe, run, workload

from mlxfleet_operator.dev import controlplane, processes
from tests.integration.hollow.conftest import HollowFleet

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

NAMESPACE = "writes"
PROGRESS_FREE = {"mlxfleet.io/kopf-managed", "mlxfleet.io/last-handled-configuration"}


def test_a_reconcile_that_cannot_finish_now_writes_nothing_on_the_object(
    tmp_path: Path, hollow_factory: Callable[..., HollowFleet]
) -> None:
    fleet = hollow_factory("--nodes=1", "--load-s=0.2", "--download-s=0.2", "--warm-s=0.1")
    (port, metrics_port) = processes.free_ports(2)
    real = fleet.nodes[0]
    ghost = {**real, "name": "ghost", "url": f"http://127.0.0.1:{port}"}  # nothing listens
    with controlplane.running(tmp_path / "cp") as plane:
        admin = observe.Admin.from_kubeconfig(plane.kubeconfig)
        secrets = f"/api/v1/namespaces/{workload.SECRET_NAMESPACE}/secrets"
        nodes = f"{run.API}/inferencenodes"
        for i, n in enumerate((real, ghost)):
            run.create_all(admin, [(secrets, workload.secret(n))])
            run.create_all(admin, [(nodes, workload.inference_node(n, i))])
        said_ready = {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "AgentReachable",
                        "message": "as an earlier operator saw it",
                        "lastTransitionTime": datetime.now(UTC).isoformat(timespec="seconds"),
                    }
                ]
            }
        }
        with admin.client() as c:
            r = c.patch(
                f"{nodes}/ghost/status",
                content=json.dumps(said_ready),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            r.raise_for_status()
        plane.kubectl("create", "namespace", NAMESPACE)
        deployment = workload.deployments(1, namespace=NAMESPACE)[0]
        deployment["spec"] |= {"replicas": 1, "placement": {"nodes": [real["name"]]}}
        changes = observe.Changes()
        path = f"{run.API}/namespaces/{NAMESPACE}/modeldeployments"
        deps = observe.Watcher(admin, path, on_event=changes.seen("md")).start()
        try:
            run.create_all(admin, [(path, deployment)])  # before the operator: its first sight
            settings = run.Settings(poll_seconds=1.0, misses=6, failover_delay=30.0)
            with run.operator(settings, plane, tmp_path, metrics_port=metrics_port):
                done = run.until(
                    "Ready",
                    lambda: any(run.deployment_ready(o) for o in deps.snapshot().values()),
                    timeout=120,
                )
                time.sleep(3)  # whatever a finished handler still writes
        finally:
            deps.stop()
    log = (tmp_path / "operator.log").read_text()
    assert done, log[-3000:]
    assert "waiting for the first poll of ghost" in log  # the create handler did not finish
    annotations = {
        what.split()[2] for what in changes.snapshot() if what.startswith("md annotation ")
    }
    assert annotations <= PROGRESS_FREE, changes.snapshot()
    assert "md finalizers" in changes.snapshot()  # the watch sees what is written on the object
