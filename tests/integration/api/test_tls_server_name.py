"""A kubeconfig's `tls-server-name` holds for both of the operator's sessions to the API server:
its own client (`kubeapi.Client`) and kopf's (`apisession.login`), which before issue 27's last
stop ignored it. The stand-in API server listens on 127.0.0.1 with a certificate that names
only `apiserver.test`: reached by that address, a session that checks the name the kubeconfig
gives gets its answer, one that checks the address is refused, and a wrong name is refused."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import kopf
import pytest
from aiohttp import web

from mlxfleet_agent.join import credentials
from mlxfleet_operator.adapters import apisession, kubeapi

NAME = "apiserver.test"


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for NAME only (no IP address), and its key: the one `join`
    makes for an agent's control API."""
    cert_pem, key_pem = credentials.self_signed(NAME)
    cert_file, key_file = tmp_path / "apiserver.crt", tmp_path / "apiserver.key"
    cert_file.write_text(cert_pem)
    key_file.write_text(key_pem)
    return cert_file, key_file


async def _namespace(request: web.Request) -> web.Response:
    return web.json_response({"kind": "Namespace", "metadata": {"name": "default"}})


def _serve(tmp_path: Path, scenario: Callable[[int, Path], Awaitable[None]]) -> None:
    cert, key = _certificate(tmp_path)

    async def run() -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/default", _namespace)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        try:
            await scenario(runner.addresses[0][1], cert)
        finally:
            await runner.cleanup()

    asyncio.run(run())


def _kubeconfig(tmp_path: Path, port: int, ca: Path, server_name: str | None) -> Path:
    named = f", tls-server-name: {server_name}" if server_name else ""
    path = tmp_path / "kubeconfig"
    path.write_text(
        f"""
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:{port}", certificate-authority: "{ca}"{named}}}
users: [{{name: u, user: {{token: secret-token}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""
    )
    return path


async def _own_client(kubeconfig: Path) -> str:
    client = kubeapi.Client(await kubeapi.configuration(str(kubeconfig)), connections=2)
    try:
        found = await client.call("GET", "/api/v1/namespaces/default")
    finally:
        await client.aclose()
    return str(found["metadata"]["name"])


async def _kopf_session(kubeconfig: Path, port: int) -> str:
    login = await apisession.login(
        kubeconfig=str(kubeconfig),
        logger=logging.getLogger("test"),
        settings=kopf.OperatorSettings(),
    )
    try:
        url = f"https://127.0.0.1:{port}/api/v1/namespaces/default"
        async with login.aiohttp_session.get(url) as answer:
            body = await answer.json()
    finally:
        await login.aiohttp_session.close()
    return str(body["metadata"]["name"])


def test_both_sessions_check_the_name_the_kubeconfig_gives(tmp_path: Path) -> None:
    async def scenario(port: int, ca: Path) -> None:
        kubeconfig = _kubeconfig(tmp_path, port, ca, NAME)
        assert await _own_client(kubeconfig) == "default"
        assert await _kopf_session(kubeconfig, port) == "default"

    _serve(tmp_path, scenario)


@pytest.mark.parametrize("server_name", [None, "elsewhere.test"], ids=["the-address", "wrong"])
def test_a_name_the_certificate_does_not_hold_is_refused_by_both(
    tmp_path: Path, server_name: str | None
) -> None:
    async def scenario(port: int, ca: Path) -> None:
        kubeconfig = _kubeconfig(tmp_path, port, ca, server_name)
        with pytest.raises(kubeapi.ApiError, match=r"Certificate|certificate"):
            await _own_client(kubeconfig)
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await _kopf_session(kubeconfig, port)

    _serve(tmp_path, scenario)
