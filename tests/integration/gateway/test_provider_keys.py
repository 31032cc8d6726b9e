"""A team allowed to use a provider key cannot steal it: the attack, through a real gateway.

The API server holds a provider-key Secret that team A may use and that may be sent only to
https://api.openai.com/v1; team A's route points its external backend at a listener of its own on
loopback. The gateway (its own ServiceAccount, real watches) must answer 503 backend_unusable and
never connect there. Then the Secret's owner allows the listener's URL, and the key arrives: the
same path, so the refusal above is the URL pin and not something else.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxfleet_operator.dev import controlplane
from tests.support import gateway as gws

pytestmark = pytest.mark.cluster
PROVIDER_KEY = "sk-fleet-provider-secret"
ANSWER = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()


class Listener:
    """An attacker's OpenAI-compatible server on loopback: records each request's head."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.heads: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                    data += chunk
                self.heads.append(data.split(b"\r\n\r\n")[0])
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(ANSWER), ANSWER)
                )

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


def provider_secret(name: str, namespace: str, urls: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "mlxfleet.io/provider-key",
        "metadata": {
            "name": name,
            "namespace": "mlxfleet-system",
            "annotations": {
                "mlxfleet.io/allowed-namespaces": namespace,
                "mlxfleet.io/allowed-urls": urls,
            },
        },
        "stringData": {"apiKey": PROVIDER_KEY},
    }


def test_a_route_cannot_send_the_provider_key_to_its_own_listener(
    cluster: controlplane.ControlPlane, tmp_path: Path, listener: Listener
) -> None:
    label = f"pk{uuid.uuid4().hex[:8]}"
    namespace = f"team-{label}"

    def apply(manifest: dict[str, Any]) -> None:
        cluster.kubectl(
            "apply", "--server-side", "--field-manager=test", "-f", "-", input=json.dumps(manifest)
        )

    cluster.kubectl("create", "namespace", namespace)
    secret = f"{label}-openai"
    apply(provider_secret(secret, namespace, "https://api.openai.com/v1"))
    key, key_secret = gws.api_key_secret(f"{label}-a", namespaces=namespace)
    apply(key_secret)
    backend = {
        "external": {
            "url": listener.url,
            "model": "gpt-4o-mini",
            "apiKeySecretRef": {"name": secret, "key": "apiKey"},
        }
    }
    apply(
        {
            "apiVersion": "mlxfleet.io/v1alpha1",
            "kind": "ModelRoute",
            "metadata": {"name": "steal", "namespace": namespace},
            "spec": {"rules": [{"name": "d", "backends": [backend]}]},
        }
    )
    gw = gws.start_gateway(cluster.gateway_kubeconfig, tmp_path / "gateway")
    try:
        body = {"model": "steal", "messages": [{"role": "user", "content": "hi"}]}
        headers = {"authorization": f"Bearer {key}"}

        def ask() -> httpx.Response:
            return httpx.post(gw.base_url + "/chat/completions", json=body, headers=headers)

        refused = gw.wait_for("the route is known", lambda: (r := ask()).status_code != 404 and r)
        assert refused.status_code == 503
        error = refused.json()["error"]
        assert error["code"] == "backend_unusable"
        assert f"provider-key Secret {secret} may not be sent to {listener.url}" in error["message"]
        assert listener.heads == []  # never called: neither the key nor the request left
        assert f"may not be sent to {listener.url}" in gw.log()

        apply(provider_secret(secret, namespace, f"https://api.openai.com/v1,{listener.url}"))
        allowed = gw.wait_for("the owner's new pin", lambda: (r := ask()).status_code == 200 and r)
        assert allowed.json()["id"] == "x"
        assert f"authorization: bearer {PROVIDER_KEY}".encode() in listener.heads[-1].lower()
    finally:
        gw.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        for name in (secret, f"{label}-a"):
            cluster.kubectl("-n", "mlxfleet-system", "delete", "secret", name, check=False)
