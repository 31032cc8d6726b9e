"""The operator's one Kubernetes client (`adapters.kubeapi`, issue 27): calls are made on the
event loop, as many at once as the pool allows, not one per worker thread of the default
executor (at most 32, 6 on a 2-core machine: the bottleneck of the synchronous client through
`asyncio.to_thread`); a closed client refuses calls; a connection failure is a `KubeError`.

A stand-in API server on loopback (aiohttp) answers Secrets, so the test can hold every request
until all have arrived: a client that makes fewer at once never gets its answers.
"""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

from mlxfleet_common.kubeconfig import Credentials
from mlxfleet_operator.adapters import kube, kubeapi
from mlxfleet_operator.api import resources

AT_ONCE = 40  # more than the default executor ever has workers (min(32, CPUs + 4))


class _ApiServer:
    """Answers GET of a Secret once `hold` requests are in flight at the same time."""

    def __init__(self, hold: int) -> None:
        self.hold = hold
        self.in_flight = 0
        self.most = 0
        self.tokens: set[str] = set()
        self._all_here = asyncio.Event()

    async def secret(self, request: web.Request) -> web.Response:
        self.tokens.add(request.headers.get("Authorization", ""))
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        if self.in_flight >= self.hold:
            self._all_here.set()
        try:
            await asyncio.wait_for(self._all_here.wait(), 5)
        except TimeoutError:
            return web.json_response({"kind": "Status", "code": 503}, status=503)
        finally:
            self.in_flight -= 1
        name = request.match_info["name"]
        return web.json_response(
            {
                "kind": "Secret",
                "metadata": {
                    "name": name,
                    "namespace": request.match_info["ns"],
                    "labels": {resources.AGENT_CREDENTIALS_LABEL: "true"},
                },
                "data": {"token": base64.b64encode(name.encode()).decode()},
            }
        )


async def _serve(server: _ApiServer, scenario: Callable[[str], Awaitable[None]]) -> None:
    """Run `scenario(host)` against `server` on loopback."""
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/secrets/{name}", server.secret)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        await scenario(f"http://127.0.0.1:{runner.addresses[0][1]}")
    finally:
        await runner.cleanup()


def _client(host: str) -> kubeapi.Client:
    config = Credentials(server=host, token="secret-token")
    return kubeapi.Client(config, connections=kubeapi.CONNECTIONS + AT_ONCE)


def test_calls_are_in_flight_at_once_not_one_per_thread() -> None:
    server = _ApiServer(hold=AT_ONCE)
    found: list[kube.AgentSecret] = []

    async def scenario(host: str) -> None:
        k = kube.Kube(_client(host))
        try:
            async with asyncio.timeout(20):
                found.extend(
                    await asyncio.gather(
                        *(
                            k.agent_credential(namespace="ns", name=f"agent-{i}", key="token")
                            for i in range(AT_ONCE)
                        )
                    )
                )
        finally:
            await k.aclose()

    asyncio.run(_serve(server, scenario))
    assert [f.value for f in found] == [f"agent-{i}" for i in range(AT_ONCE)]
    assert server.most == AT_ONCE
    assert server.tokens == {"Bearer secret-token"}  # the credentials went with every call


def test_a_closed_client_refuses_calls() -> None:
    async def scenario(host: str) -> None:
        k = kube.Kube(_client(host))
        await k.aclose()
        with pytest.raises(kube.KubeError, match="closed"):
            await k.get_deployment("ns", "chat")

    asyncio.run(_serve(_ApiServer(hold=1), scenario))


def test_no_answer_is_a_kube_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def scenario() -> None:
        k = kube.Kube(_client(f"http://127.0.0.1:{port}"))
        try:
            with pytest.raises(kube.KubeError, match=r"get ModelDeployment ns/chat: 0 "):
                await k.get_deployment("ns", "chat")
        finally:
            await k.aclose()

    asyncio.run(scenario())


def test_a_silent_api_server_fails_the_call_instead_of_holding_it() -> None:
    """An API server that takes the request and never answers (a hung apiserver, a half-open
    connection): the call fails as a KubeError after the client's read timeout. Before, the
    handlers' calls had no time limit at all, and a reconcile waited for ever holding the
    object's lock."""
    arrived = asyncio.Event()

    async def silent(request: web.Request) -> web.Response:
        arrived.set()
        await asyncio.sleep(3600)
        return web.json_response({})

    async def scenario() -> None:
        app = web.Application()
        app.router.add_get("/apis/{group}/{version}/namespaces/{ns}/{kind}/{name}", silent)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        config = Credentials(server=f"http://127.0.0.1:{runner.addresses[0][1]}")
        k = kube.Kube(kubeapi.Client(config, read_timeout=0.5))
        try:
            async with asyncio.timeout(10):  # the old client: TimeoutError here, not KubeError
                with pytest.raises(kube.KubeError, match=r"get ModelDeployment ns/chat: 0 "):
                    await k.get_deployment("ns", "chat")
            assert arrived.is_set()
        finally:
            await k.aclose()
            await runner.cleanup()

    asyncio.run(scenario())


def test_the_default_read_timeout_bounds_every_call() -> None:
    client = kubeapi.Client(Credentials(server="http://127.0.0.1:1"))
    assert client._timeout.sock_read == kubeapi.READ_TIMEOUT_S
    assert client._timeout.total is None  # the wait for a pooled connection is not a fault


def test_the_environment_is_read_once_not_for_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp in a session that trusts the environment looks the proxy variables and
    `~/.netrc` up again for every request, on a worker thread of the default executor (3.6 % of
    the operator's samples converging 500 x 1,000): the client decides its proxy once."""
    import aiohttp.client

    looked: list[str] = []
    real_proxy = aiohttp.client.get_env_proxy_for_url  # type: ignore[attr-defined]
    real_netrc = aiohttp.client.netrc_from_env  # type: ignore[attr-defined]

    def proxy(url: object) -> object:
        looked.append("proxy")
        return real_proxy(url)  # type: ignore[arg-type]

    def netrc() -> object:
        looked.append("netrc")
        return real_netrc()

    monkeypatch.setattr(aiohttp.client, "get_env_proxy_for_url", proxy)
    monkeypatch.setattr(aiohttp.client, "netrc_from_env", netrc)
    server = _ApiServer(hold=1)

    async def scenario(host: str) -> None:
        k = kube.Kube(_client(host))
        try:
            for i in range(5):
                await k.agent_credential(namespace="ns", name=f"agent-{i}", key="token")
        finally:
            await k.aclose()

    asyncio.run(_serve(server, scenario))
    assert looked == []
    assert server.tokens == {"Bearer secret-token"}


def test_the_proxy_the_environment_names_is_used_and_no_proxy_is_honoured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Read once, the environment still decides as before: HTTP(S)_PROXY carries the calls to
    an API server it does not exempt (here a name that does not resolve, reached only through
    the proxy), NO_PROXY exempts, and a kubeconfig's own proxy-url wins."""
    server = _ApiServer(hold=1)

    async def scenario(proxy: str) -> None:
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        k = kube.Kube(_client("http://kube-api.invalid:6443"))
        try:
            found = await k.agent_credential(namespace="ns", name="via-proxy", key="token")
        finally:
            await k.aclose()
        assert found.value == "via-proxy"

    asyncio.run(_serve(server, scenario))
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "kube-api.internal")
    assert kubeapi.proxy_once(Credentials(server="http://kube-api.internal:6443")) is None
    named = Credentials(server="http://other:6443", proxy_url="http://from-kubeconfig:8080")
    assert kubeapi.proxy_once(named) == "http://from-kubeconfig:8080"
    assert kubeapi.proxy_once(Credentials(server="http://other:6443")) == (
        "http://proxy.invalid:3128"
    )
