"""The per-deployment Service works through kube-proxy: EndpointSlices carry IP addresses.

The operator's publishing adapter publishes against the real API server: a name is resolved
(real getaddrinfo) on every publish, an IP stays an IP, loopback (a development machine) falls
back to the `loopback.localhost` FQDN the API server accepts, and a name that does not resolve
keeps the old FQDN form rather than failing the reconcile.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from mlxfleet_operator.adapters import kube, kubeapi, publishing
from mlxfleet_operator.dev import controlplane

pytestmark = pytest.mark.cluster
NAMESPACE = "endpoint-addresses"


def test_names_resolve_and_ips_stay() -> None:
    assert asyncio.run(publishing.resolve_host("192.0.2.7")) == "192.0.2.7"
    assert asyncio.run(publishing.resolve_host("[2001:db8::5]")) == "2001:db8::5"
    assert asyncio.run(publishing.resolve_host("localhost")) == "127.0.0.1"
    assert asyncio.run(publishing.resolve_host("no-such-host.invalid")) == "no-such-host.invalid"


def _slices(cluster: controlplane.ControlPlane, name: str) -> dict[str, Any]:
    out = cluster.kubectl(
        "get",
        "endpointslices",
        "-n",
        NAMESPACE,
        "-o",
        "json",
        "-l",
        f"mlxfleet.io/deployment={name}",
    ).stdout
    return {s["addressType"]: s for s in json.loads(out)["items"]}


def test_published_slices_carry_ip_addresses(cluster: controlplane.ControlPlane) -> None:
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    body = {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "svc", "namespace": NAMESPACE},
        "spec": {"model": {"source": "file:///models/tiny"}},
    }
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(body))
    deployment = json.loads(
        cluster.kubectl("get", "mdep", "svc", "-n", NAMESPACE, "-o", "json").stdout
    )

    async def publish(*endpoints: publishing.Endpoint) -> None:
        api = kube.Kube(await kubeapi.connect(str(cluster.kubeconfig)))
        try:
            await publishing.Publisher(api).publish(deployment, list(endpoints))
        finally:
            await api.aclose()

    asyncio.run(
        publish(
            publishing.Endpoint("mac-1", "192.0.2.7", 8471, ready=True),
            publishing.Endpoint("mac-2", "localhost", 8471, ready=True),
        )
    )
    slices = _slices(cluster, "svc")
    assert set(slices) == {"IPv4", "FQDN"}
    assert [e["addresses"] for e in slices["IPv4"]["endpoints"]] == [["192.0.2.7"]]
    assert [e["addresses"] for e in slices["FQDN"]["endpoints"]] == [["loopback.localhost"]]
    # the address changes (DHCP, a moved Mac): the next publish follows, the stale slice goes
    asyncio.run(publish(publishing.Endpoint("mac-1", "192.0.2.9", 8471, ready=True)))
    slices = _slices(cluster, "svc")
    assert set(slices) == {"IPv4"}
    assert [e["addresses"] for e in slices["IPv4"]["endpoints"]] == [["192.0.2.9"]]
