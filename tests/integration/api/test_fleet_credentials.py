"""The operator reads a node's token Secret once per `credentials_ttl`, not on every poll (issue 12:
500 nodes x one GET per 5 s poll), and reads it again when the node's references change, the TTL
passes or the cache is dropped (a 401 from the agent): `credentials.Cache`, as `fleet.Fleet` builds
it. Real API server, the operator's identity.
"""

from __future__ import annotations

import base64
import json
import secrets

import pytest

from mlxfleet_operator.adapters import fleet, kube, kubeapi
from mlxfleet_operator.api import inferencenode, resources
from mlxfleet_operator.dev import controlplane
from tests.integration.api.conftest import Run

pytestmark = pytest.mark.cluster
NS = resources.AGENT_SECRETS_NAMESPACE


def _secret(cluster: controlplane.ControlPlane, name: str, token: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {resources.AGENT_CREDENTIALS_LABEL: "true"},
        },
        "data": {"token": base64.b64encode(token.encode()).decode()},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def _node(secret: str) -> inferencenode.InferenceNode:
    return inferencenode.InferenceNode.model_validate(
        {
            "apiVersion": resources.API_VERSION,
            "kind": "InferenceNode",
            "metadata": {"name": f"node-{secret}"},
            "spec": {
                "agent": {
                    "url": "http://127.0.0.1:9",
                    "tokenSecretRef": {"name": secret, "namespace": NS},
                }
            },
        }
    )


def test_token_secret_is_read_once_per_ttl(cluster: controlplane.ControlPlane, run: Run) -> None:
    cluster.kubectl("create", "namespace", NS, check=False)
    name = f"creds-{secrets.token_hex(3)}"
    _secret(cluster, name, "first")
    clock = [0.0]
    k = kube.Kube(run(kubeapi.connect(str(cluster.operator_kubeconfig))))

    async def scenario() -> list[str]:
        f = fleet.Fleet(k, credentials_ttl=60, clock=lambda: clock[0])
        node = _node(name)
        seen = [(await f.credentials.get(node)).token]
        _secret(cluster, name, "second")  # rotated on the API server
        clock[0] = 59.0
        seen.append((await f.credentials.get(node)).token)  # cached: no GET within the TTL
        clock[0] = 60.0
        seen.append((await f.credentials.get(node)).token)  # TTL passed: read again
        _secret(cluster, name, "third")
        assert f.credentials.forget(node.metadata.name or "")  # what a 401 does
        seen.append((await f.credentials.get(node)).token)
        _secret(cluster, name, "fourth")
        moved = node.model_copy(deep=True)
        moved.spec.agent.url = "http://127.0.0.1:10"  # another reference: read again
        seen.append((await f.credentials.get(moved)).token)
        return seen

    try:
        assert run(scenario()) == ["first", "first", "second", "third", "fourth"]
    finally:
        run(k.aclose())
        cluster.kubectl("-n", NS, "delete", "secret", name, check=False)
