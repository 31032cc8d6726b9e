"""`Publisher.publish` writes the Service and EndpointSlices only when the endpoints changed
(issue 12: 32 of 47 API writes per second at steady state were unchanged re-publishes), and again
after the key's own resync period (`publishing.resync_after`: an edit by someone else is
repaired). Real API server, operator identity.
"""

from __future__ import annotations

import json
import math
import secrets
import uuid
from typing import Any

import pytest

from mlxfleet_operator.adapters import kube, kubeapi, publishing
from mlxfleet_operator.api import resources
from mlxfleet_operator.core.kit import naming
from mlxfleet_operator.dev import controlplane, credentials
from tests.integration.api.conftest import Run

pytestmark = pytest.mark.cluster
NS = credentials.OPERATOR_NAMESPACE


def _slices(cluster: controlplane.ControlPlane, service: str) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "-n",
        NS,
        "get",
        "endpointslices",
        "-l",
        f"kubernetes.io/service-name={service}",
        "-o",
        "json",
    )
    return list(json.loads(out.stdout)["items"])


def _ready_by_port(cluster: controlplane.ControlPlane, service: str) -> dict[int, bool]:
    """Each slice's port and the readiness of its (one) endpoint."""
    return {
        s["ports"][0]["port"]: s["endpoints"][0]["conditions"]["ready"]
        for s in _slices(cluster, service)
    }


def _deployment(cluster: controlplane.ControlPlane) -> tuple[dict[str, Any], str]:
    """A ModelDeployment body (never created: publish needs only its metadata), its Service."""
    cluster.kubectl("create", "namespace", NS, check=False)
    name = f"pub-{secrets.token_hex(3)}"
    deployment = {
        "apiVersion": resources.API_VERSION,
        "kind": resources.MODEL_DEPLOYMENT.kind,
        "metadata": {"name": name, "namespace": NS, "uid": str(uuid.uuid4())},
    }
    return deployment, naming.service_name(name)


def test_unchanged_endpoints_are_not_written_again(
    cluster: controlplane.ControlPlane, run: Run
) -> None:
    deployment, service = _deployment(cluster)
    one = [publishing.Endpoint("n1", "10.1.0.1", 9000, ready=True)]
    two = [*one, publishing.Endpoint("n2", "10.1.0.2", 9000, ready=False)]
    clock = [0.0]
    due = math.ceil(publishing.resync_after((NS, service), 300))  # whole seconds: exact clocks
    k = kube.Kube(run(kubeapi.connect(str(cluster.operator_kubeconfig))))
    p = publishing.Publisher(k, resync=300, clock=lambda: clock[0])

    async def publish(endpoints: list[publishing.Endpoint]) -> None:
        await p.publish(deployment, endpoints)

    try:
        run(publish(one))
        (made,) = _slices(cluster, service)
        cluster.kubectl("-n", NS, "delete", "endpointslice", made["metadata"]["name"])
        clock[0] = due - 1
        run(publish(one))  # the same endpoints: nothing read, listed or written
        assert _slices(cluster, service) == []
        run(publish(two))  # changed: written
        (changed,) = _slices(cluster, service)
        assert [e["conditions"]["ready"] for e in changed["endpoints"]] == [True, False]
        cluster.kubectl("-n", NS, "delete", "endpointslice", changed["metadata"]["name"])
        clock[0] = due - 1 + due - 1
        run(publish(two))  # not yet its resync: the deleted slice stays deleted
        assert _slices(cluster, service) == []
        clock[0] = due - 1 + due
        run(publish(two))  # resync: applied again, the deleted slice comes back
        assert len(_slices(cluster, service)) == 1
        run(p.unpublish(deployment))
        assert _slices(cluster, service) == []
        run(publish(two))  # after unpublish nothing is remembered
        assert len(_slices(cluster, service)) == 1
    finally:
        run(p.unpublish(deployment))
        run(k.aclose())


class _Counting:
    """The operator's client, every request it makes recorded by the name the `kubernetes`
    client gives that call (`read_namespaced_service`, `list_namespaced_endpoint_slice`), then
    made."""

    KINDS = {"services": "service", "endpointslices": "endpoint_slice"}
    VERBS = {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "replace"}

    def __init__(self, inner: kubeapi.Client, calls: list[str]) -> None:
        self._inner, self._calls = inner, calls

    async def call(self, method: str, path: str, **kw: Any) -> Any:
        parts = path.split("/")
        at = parts.index("namespaces") + 2
        named = len(parts) > at + 1
        verb = ("read" if named else "list") if method == "GET" else self.VERBS[method]
        self._calls.append(f"{verb}_namespaced_{self.KINDS[parts[at]]}")
        return await self._inner.call(method, path, **kw)

    async def aclose(self) -> None:
        await self._inner.aclose()


def test_changed_endpoints_of_objects_it_wrote_cost_one_apply(
    cluster: controlplane.ControlPlane, run: Run
) -> None:
    """At 100 x 300 the publish calls (read Service, apply it, read slice, apply it, list
    slices) were a third of the operator's samples; when only the endpoints changed, the slice
    this process wrote is applied again by uid and nothing else is called. A slice replaced by
    someone else's is still found and left alone."""
    deployment, service = _deployment(cluster)
    one = [publishing.Endpoint("n1", "10.1.0.1", 9000, ready=True)]
    two = [*one, publishing.Endpoint("n2", "10.1.0.2", 9000, ready=False)]
    three = [*one, publishing.Endpoint("n2", "10.1.0.2", 9000, ready=True)]
    k = kube.Kube(run(kubeapi.connect(str(cluster.operator_kubeconfig))))
    p = publishing.Publisher(k)
    calls: list[str] = []
    k.client = _Counting(k.client, calls)  # type: ignore[assignment]
    try:
        run(p.publish(deployment, one))
        assert "list_namespaced_endpoint_slice" in calls  # the first time: the full path
        calls.clear()
        run(p.publish(deployment, two))
        assert calls == ["patch_namespaced_endpoint_slice"]
        (slice_,) = _slices(cluster, service)
        assert [e["conditions"]["ready"] for e in slice_["endpoints"]] == [True, False]
        cluster.kubectl("-n", NS, "delete", "endpointslice", slice_["metadata"]["name"])
        foreign = {**slice_, "metadata": {"name": slice_["metadata"]["name"], "namespace": NS}}
        foreign["metadata"]["labels"] = {"kubernetes.io/service-name": service}
        cluster.kubectl("apply", "-f", "-", input=json.dumps(foreign))
        with pytest.raises(publishing.ServiceConflict):  # replaced by someone else's: not applied
            run(p.publish(deployment, three))
        (kept,) = _slices(cluster, service)
        assert len(kept["endpoints"]) == 2
    finally:
        run(p.unpublish(deployment))
        run(k.aclose())


def test_the_resync_of_unchanged_objects_reads_them_and_writes_only_an_edited_one(
    cluster: controlplane.ControlPlane, run: Run
) -> None:
    """Every resync period the full path runs again to repair edits by others: it applied
    the Service and every slice of every deployment again (at 1,000 deployments over 2,000
    write requests every 5 minutes with nothing changed). Now an object already as it would be
    written is only read; one edited by someone else is applied again."""
    deployment, service = _deployment(cluster)
    endpoints = [
        publishing.Endpoint("n1", "10.1.0.1", 9000, ready=True),
        publishing.Endpoint("n2", "10.1.0.2", 9000, ready=False),
    ]
    clock = [0.0]
    due = math.ceil(publishing.resync_after((NS, service), 300))  # whole seconds: exact clocks
    k = kube.Kube(run(kubeapi.connect(str(cluster.operator_kubeconfig))))
    p = publishing.Publisher(k, resync=300, clock=lambda: clock[0])
    calls: list[str] = []
    k.client = _Counting(k.client, calls)  # type: ignore[assignment]
    try:
        run(p.publish(deployment, endpoints))
        calls.clear()
        clock[0] = due - 1
        run(p.publish(deployment, endpoints))  # not yet its resync: nothing called
        assert calls == []
        clock[0] = due
        run(p.publish(deployment, endpoints))  # the resync: read, nothing written
        assert "read_namespaced_service" in calls
        assert "read_namespaced_endpoint_slice" in calls
        assert not [c for c in calls if c.startswith(("patch_", "create_", "delete_"))], calls
        (made,) = _slices(cluster, service)
        edit = [{"op": "replace", "path": "/endpoints/0/conditions/ready", "value": False}]
        cluster.kubectl(
            "-n", NS, "patch", "endpointslice", made["metadata"]["name"],
            "--type=json", "-p", json.dumps(edit),
        )  # fmt: skip
        calls.clear()
        clock[0] = 2 * due - 1
        run(p.publish(deployment, endpoints))  # not yet the next resync: the edit stays
        assert calls == []
        clock[0] = 2 * due
        run(p.publish(deployment, endpoints))  # edited by someone: applied again
        assert calls.count("patch_namespaced_endpoint_slice") == 1, calls
        assert "patch_namespaced_service" not in calls
        (repaired,) = _slices(cluster, service)
        assert [e["conditions"]["ready"] for e in repaired["endpoints"]] == [True, False]
    finally:
        run(p.unpublish(deployment))
        run(k.aclose())


def test_a_new_deployment_costs_one_request_per_object_and_a_list(
    cluster: controlplane.ControlPlane, run: Run
) -> None:
    """Issue 12, at 500 x 1,000: a new deployment's first publish read the Service and each
    slice before creating it (404, then POST), and every later change applied every slice again,
    even those whose endpoints had not changed. Then the slices of loading replicas were POSTed
    and applied again when they turned ready (issue 27: 1,819 applies of 14,000 requests while
    converging). Now: the Service's POST and the stale-slice LIST; each slice's POST once one of
    its endpoints is ready; then one apply per slice that changed, ready or not."""
    deployment, service = _deployment(cluster)
    a = publishing.Endpoint("n1", "10.1.0.1", 9000, ready=False)
    b = publishing.Endpoint("n2", "10.1.0.2", 9001, ready=False)  # another port: its own slice
    a_up, b_up = (publishing.Endpoint(e.node, e.host, e.port, ready=True) for e in (a, b))
    k = kube.Kube(run(kubeapi.connect(str(cluster.operator_kubeconfig))))
    p = publishing.Publisher(k)
    calls: list[str] = []
    k.client = _Counting(k.client, calls)  # type: ignore[assignment]
    try:
        run(p.publish(deployment, [a, b]))  # both loading: nothing to route to yet
        assert calls == ["create_namespaced_service", "list_namespaced_endpoint_slice"]
        assert _slices(cluster, service) == []
        calls.clear()
        run(p.publish(deployment, [a_up, b]))  # one replica Ready: its slice only, no LIST
        assert calls == ["create_namespaced_endpoint_slice"]
        calls.clear()
        run(p.publish(deployment, [a_up, b_up]))
        assert calls == ["create_namespaced_endpoint_slice"]
        assert _ready_by_port(cluster, service) == {9000: True, 9001: True}
        calls.clear()
        run(p.publish(deployment, [a, b_up]))  # a withdrawn: its slice says so at once
        assert calls == ["patch_namespaced_endpoint_slice"]
        assert _ready_by_port(cluster, service) == {9000: False, 9001: True}
        calls.clear()
        run(p.publish(deployment, [b_up]))  # a gone: the LIST finds its slice, which goes
        assert calls == ["list_namespaced_endpoint_slice", "delete_namespaced_endpoint_slice"]
        assert [s["ports"][0]["port"] for s in _slices(cluster, service)] == [9001]
    finally:
        run(p.unpublish(deployment))
        run(k.aclose())


def test_a_new_deployment_whose_names_are_taken_reads_and_never_adopts(
    cluster: controlplane.ControlPlane, run: Run
) -> None:
    """The POST of a new deployment's Service fails on a name that is taken; the object is
    then read: someone else's stays exactly as it was (ServiceConflict, no slice written), and
    later publishes read first. A slice a deployment of that name left behind (ownerReference
    by name) is still found and removed although the Service's POST succeeded: the stale-slice
    LIST of a new deployment is not skipped."""
    deployment, service = _deployment(cluster)
    foreign = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service, "namespace": NS, "labels": {"team": "other"}},
        "spec": {"ports": [{"port": 8080, "protocol": "TCP"}]},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(foreign))
    k = kube.Kube(run(kubeapi.connect(str(cluster.operator_kubeconfig))))
    p = publishing.Publisher(k)
    calls: list[str] = []
    k.client = _Counting(k.client, calls)  # type: ignore[assignment]
    endpoints = [publishing.Endpoint("n1", "10.1.0.1", 9000, ready=True)]
    try:
        with pytest.raises(publishing.ServiceConflict):
            run(p.publish(deployment, endpoints))
        assert calls == ["create_namespaced_service", "read_namespaced_service"]
        kept = json.loads(cluster.kubectl("-n", NS, "get", "service", service, "-o", "json").stdout)
        assert kept["metadata"].get("ownerReferences") is None
        assert kept["metadata"]["labels"] == {"team": "other"}
        assert _slices(cluster, service) == []
        calls.clear()
        with pytest.raises(publishing.ServiceConflict):  # the name is known taken: read first
            run(p.publish(deployment, endpoints))
        assert calls == ["read_namespaced_service"]
    finally:
        cluster.kubectl("-n", NS, "delete", "service", service, check=False)

    old = publishing.Publisher(k)  # a deployment of that name before, another port
    run(old.publish(deployment, endpoints))
    cluster.kubectl("-n", NS, "delete", "service", service)  # its slice is left behind
    again = {**deployment, "metadata": {**deployment["metadata"], "uid": str(uuid.uuid4())}}
    moved = [publishing.Endpoint("n1", "10.1.0.1", 9001, ready=True)]
    p = publishing.Publisher(k)  # another operator process: no record of either
    calls.clear()
    try:
        run(p.publish(again, moved))  # the Service POST succeeds: the LIST still runs
        assert calls == [
            "create_namespaced_service",
            "create_namespaced_endpoint_slice",
            "list_namespaced_endpoint_slice",
            "delete_namespaced_endpoint_slice",
        ]
        (left,) = _slices(cluster, service)  # the predecessor's 9000 slice is gone
        assert left["ports"][0]["port"] == 9001
        assert left["metadata"]["ownerReferences"][0]["uid"] == again["metadata"]["uid"]
    finally:
        run(p.unpublish(again))
        run(k.aclose())


def test_a_deployment_created_again_takes_its_predecessors_objects_over(
    cluster: controlplane.ControlPlane, run: Run
) -> None:
    """A ModelDeployment deleted and created again under the same name (a new uid) before the
    garbage collector removed its Service and slices takes them back: their ownerReferences
    name only the new deployment (server-side apply alone kept the old controller reference
    beside the new one, and the API server refused two: 422), and the Service keeps its
    cluster IP (clients keep their address)."""
    deployment, service = _deployment(cluster)
    endpoints = [publishing.Endpoint("n1", "10.1.0.1", 9000, ready=True)]
    k = kube.Kube(run(kubeapi.connect(str(cluster.operator_kubeconfig))))
    again = {**deployment, "metadata": {**deployment["metadata"], "uid": str(uuid.uuid4())}}
    new_uid = again["metadata"]["uid"]
    try:
        run(publishing.Publisher(k).publish(deployment, endpoints))
        before = json.loads(
            cluster.kubectl("-n", NS, "get", "service", service, "-o", "json").stdout
        )
        moved = [publishing.Endpoint("n2", "10.1.0.2", 9000, ready=True)]
        run(publishing.Publisher(k).publish(again, moved))  # another operator process
        after = json.loads(
            cluster.kubectl("-n", NS, "get", "service", service, "-o", "json").stdout
        )
        assert [r["uid"] for r in after["metadata"]["ownerReferences"]] == [new_uid]
        assert after["spec"]["clusterIP"] == before["spec"]["clusterIP"]
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        (taken,) = _slices(cluster, service)
        assert [r["uid"] for r in taken["metadata"]["ownerReferences"]] == [new_uid]
        assert [e["addresses"] for e in taken["endpoints"]] == [["10.1.0.2"]]
    finally:
        run(publishing.Publisher(k).unpublish(again))
        run(k.aclose())
