"""kopf's session to the API server holds at most a bounded number of connections (issue 12: at
500 x 1,000 kopf opened one per request in flight and the API server answered 429 to what
exceeded its limits), with kopf's usual credentials from $KUBECONFIG."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import kopf
import kubernetes
import pytest
from kubernetes.config import kube_config

from mlxfleet_operator.adapters import apisession

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: ns}}]
current-context: x
"""


def test_login_bounds_the_connections_and_keeps_the_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config))  # $KUBECONFIG

    async def login() -> None:
        found = await apisession.login(
            logger=logging.getLogger("test"), settings=kopf.OperatorSettings()
        )
        assert isinstance(found, kopf.AiohttpSession)
        try:
            assert found.server == "https://127.0.0.1:6443"
            session = found.aiohttp_session
            limit = apisession.KUBE_CONNECTIONS + apisession.WATCH_RESERVE
            assert session.connector is not None
            assert session.connector.limit == limit
            assert session.headers["Authorization"] == "Bearer secret-token"
        finally:
            await found.aiohttp_session.close()

    before = kubernetes.client.Configuration.get_default_copy()
    try:
        asyncio.run(login())
    finally:  # kopf's login loads the kubeconfig as the client's default
        kubernetes.client.Configuration.set_default(before)
