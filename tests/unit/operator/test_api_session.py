"""kopf's session to the API server holds at most a bounded number of connections (issue 12: at
500 x 1,000 kopf opened one per request in flight and the API server answered 429 to what
exceeded its limits), with the credentials of the kubeconfig the operator was given (the loaders
of its own client, `kubeapi.configuration`), never its import-time environment."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import kopf
import pytest

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
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "elsewhere"))  # not read: the flag's file is

    async def login() -> None:
        found = await apisession.login(
            kubeconfig=str(config),
            logger=logging.getLogger("test"),
            settings=kopf.OperatorSettings(),
        )
        assert isinstance(found, kopf.AiohttpSession)
        try:
            assert found.server == "https://127.0.0.1:6443"
            session = found.aiohttp_session
            limit = apisession.KUBE_CONNECTIONS + apisession.WATCH_RESERVE
            assert session.connector is not None
            assert session.connector.limit == limit
            assert session.headers["Authorization"] == "Bearer secret-token"
            assert session.trust_env is False  # no proxy or ~/.netrc lookup per request
        finally:
            await found.aiohttp_session.close()

    asyncio.run(login())


def test_no_credentials_is_a_login_error_naming_the_file(tmp_path: Path) -> None:
    async def login() -> None:
        await apisession.login(kubeconfig=str(tmp_path / "missing"))

    with pytest.raises(kopf.LoginError, match="missing"):
        asyncio.run(login())
