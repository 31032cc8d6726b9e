"""What the operator sees of a ModelRoute's provider-key Secret: its type and annotations, never
its data (`kube.Kube.provider_key_seen` asks for a table row). Real API server, the operator's
own identity and shipped RBAC (`get` by name of the provider-key Secrets listed, in its
namespace only: `allow_provider_keys` lists them as the chart value does)."""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any

import pytest

from mlxfleet_operator.adapters import kube, kubeapi
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.core.modelroute import status as routestatus
from mlxfleet_operator.dev import controlplane, credentials
from tests.integration.api.conftest import Run
from tests.support.cluster import allow_provider_keys

pytestmark = pytest.mark.cluster
NS = credentials.OPERATOR_NAMESPACE
KEY = "sk-" + secrets.token_hex(16)
URLS = "https://api.openai.com/v1"


def _secret(
    cluster: controlplane.ControlPlane, name: str, *, type_: str, allowed: str, verb: str
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": type_,
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {
                mroute.PROVIDER_KEY_NAMESPACES: allowed,
                mroute.PROVIDER_KEY_URLS: URLS,
                "example.com/other": "dropped",
            },
        },
        "data": {"apiKey": base64.b64encode(KEY.encode()).decode()},
    }
    cluster.kubectl(verb, "-f", "-", input=json.dumps(body))


def test_the_operator_sees_type_and_annotations_never_the_key(
    cluster: controlplane.ControlPlane, run: Run
) -> None:
    cluster.kubectl("create", "namespace", NS, check=False)
    name = f"openai-{secrets.token_hex(3)}"
    _secret(cluster, name, type_=mroute.PROVIDER_KEY_TYPE, allowed="team-a", verb="create")
    unlisted = f"unlisted-{secrets.token_hex(3)}"
    _secret(cluster, unlisted, type_=mroute.PROVIDER_KEY_TYPE, allowed="*", verb="create")
    absent = f"absent-{secrets.token_hex(3)}"
    allow_provider_keys(cluster, name, absent)
    k = kube.Kube(run(kubeapi.connect(str(cluster.operator_kubeconfig))))
    bodies: list[bytes] = []
    call = k.client.call

    async def spy(*args: Any, **kwargs: Any) -> Any:
        answer = await call(*args, **kwargs)
        bodies.append(json.dumps(answer).encode())
        return answer

    k.client.call = spy  # type: ignore[method-assign]

    async def scenario() -> list[routestatus.KeySeen | None]:
        return [
            await k.provider_key_seen(namespace=NS, name=name),
            await k.provider_key_seen(namespace=NS, name=absent),
            await k.provider_key_seen(namespace="default", name=name),  # no RBAC there
            await k.provider_key_seen(namespace=NS, name=unlisted),  # not listed: not seen
        ]

    try:
        found, missing, elsewhere, hidden = run(scenario())
    finally:
        run(k.aclose())
    assert found == routestatus.KeySeen(
        type=mroute.PROVIDER_KEY_TYPE,
        annotations={mroute.PROVIDER_KEY_NAMESPACES: "team-a", mroute.PROVIDER_KEY_URLS: URLS},
    )
    assert missing is None
    assert hidden is not None
    assert hidden.error is not None
    assert "403" in hidden.error
    assert "operator.providerKeySecrets" in hidden.error  # says what to do
    assert elsewhere is not None
    assert elsewhere.error is not None
    assert "403" in elsewhere.error
    encoded = base64.b64encode(KEY.encode())
    assert bodies
    assert not any(KEY.encode() in b or encoded in b for b in bodies)


def test_a_key_copied_into_last_applied_configuration_is_not_kept(
    cluster: controlplane.ControlPlane, run: Run
) -> None:
    """A client-side `kubectl apply` puts the whole Secret (key included) into an annotation:
    the operator keeps only the allowed-namespaces annotation."""
    cluster.kubectl("create", "namespace", NS, check=False)
    name = f"applied-{secrets.token_hex(3)}"
    _secret(cluster, name, type_="Opaque", allowed="*", verb="apply")
    allow_provider_keys(cluster, name)
    k = kube.Kube(run(kubeapi.connect(str(cluster.operator_kubeconfig))))
    try:
        seen = run(k.provider_key_seen(namespace=NS, name=name))
    finally:
        run(k.aclose())
    assert seen == routestatus.KeySeen(
        type="Opaque",
        annotations={mroute.PROVIDER_KEY_NAMESPACES: "*", mroute.PROVIDER_KEY_URLS: URLS},
    )
