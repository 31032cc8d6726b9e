"""The operator's one asynchronous Kubernetes client: `kubernetes_asyncio` over aiohttp.

`Client` is one connection pool to the API server (at most `CONNECTIONS` requests at once, kept
alive and reused), built from the kubeconfig or the in-cluster ServiceAccount (its token read
again as it rotates). `call` sends one request and answers the JSON the API server sent, as
plain dicts (no client models are built: the operator reads and writes JSON, and building
models of every EndpointSlice and Secret is CPU it does not need); any failure, an HTTP status
outside 2xx or the connection, is an `ApiError` with the status (0: no answer).

Why this and not the sync `kubernetes` client through `asyncio.to_thread`: every call held one
of the default executor's few workers (6 on a 2-core machine) for its whole round trip, so at
500 nodes x 1,000 deployments the operator's calls queued behind each other. Why
kubernetes_asyncio and not lightkube: lightkube cannot delete with a uid precondition or ask for
a Table (the provider-key check), both of which the operator relies on; kubernetes_asyncio
speaks the whole API (docs/operator.md, "Kubernetes clients").

The proxy is decided once, when the pool opens (`proxy_once`): kubernetes_asyncio's session
trusts the environment, and aiohttp then reads the proxy variables and `~/.netrc` again for every
request, in the default executor (a thread hop and a file read per call: 3.6 % of the
operator's samples converging 500 x 1,000, more in the loop's wake-ups).
A pool belongs to the event loop that first uses it (aiohttp): the handlers share the one that
`runtime` builds on kopf's loop; the elector, on a thread and loop of its own so that renewals
never wait for kopf's loop, has a pool of its own, made with the same `connect`.
May import: kubernetes_asyncio, aiohttp, the standard library.
Called by: `kube` (the handlers' calls), `lease` (the election's), `runtime`, `election`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import aiohttp
import aiohttp.helpers
import yarl
from kubernetes_asyncio import client as kclient
from kubernetes_asyncio import config as kconfig

CONNECTIONS = 32  # the operator's own requests at once (kopf's watches and patches: apisession)
# A call whose connection stays silent this long fails (`ApiError`, status 0) instead of holding
# its reconcile, and the object's lock, for ever; the wait for a free connection of the pool is
# not bounded (at scale calls queue there, which is no fault).
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
USER_AGENT = "mlxfleet-operator"
JSON = "application/json"
_ANSWERS = {200: "object", 201: "object", 202: "object"}  # "object": the JSON as it came
JsonDict = dict[str, Any]


class ConfigError(Exception):
    """No usable credentials: the kubeconfig cannot be read, or not running in a pod."""


class ApiError(Exception):
    """A request that failed: `status` is the HTTP status, 0 when no answer came."""

    def __init__(self, status: int, reason: str, body: str = "") -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.body = body


async def configuration(kubeconfig: str | None) -> Any:
    """The connection settings of `kubeconfig` (None: the in-cluster ServiceAccount)."""
    config = kclient.Configuration()
    try:
        if kubeconfig:
            await kconfig.load_kube_config(
                config_file=kubeconfig, client_configuration=config, persist_config=False
            )
        else:
            kconfig.load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
    except (kconfig.ConfigException, OSError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc
    config.connection_pool_maxsize = CONNECTIONS
    return config


def proxy_once(configuration: Any) -> Any:
    """`configuration` with the proxy the environment names for its API server (`HTTPS_PROXY`,
    `HTTP_PROXY`, `NO_PROXY`: aiohttp's own lookup, `get_env_proxy_for_url`, made once instead
    of for each request), unless the kubeconfig named one (`proxy-url`). Read once: a proxy
    changed in the environment of a running process is not seen, as for any other setting."""
    if configuration.proxy or not configuration.host:
        return configuration
    try:
        proxy, _ = aiohttp.helpers.get_env_proxy_for_url(yarl.URL(configuration.host))
    except LookupError:  # none named, or NO_PROXY exempts the server
        return configuration
    configuration.proxy = str(proxy)
    return configuration


class Client:
    """One connection pool to the API server, opened on the first call (in the running loop),
    closed by `aclose`; a call after that fails (`ApiError`, status 0): nothing the operator
    runs after it stopped reaches the API server."""

    def __init__(
        self,
        configuration: Any,
        *,
        user_agent: str = USER_AGENT,
        read_timeout: float = READ_TIMEOUT_S,
    ) -> None:
        self.configuration = configuration
        self._user_agent = user_agent
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=read_timeout
        )
        self._api: Any = None
        self._closed = False

    def _client(self) -> Any:
        if self._closed:
            raise ApiError(0, "the operator's Kubernetes client is closed (stopping)")
        if self._api is None:
            self._api = kclient.ApiClient(proxy_once(self.configuration))
            self._api.user_agent = self._user_agent
            # the environment was read once above: not again for every request
            self._api.rest_client.pool_manager._trust_env = False
        return self._api

    async def aclose(self) -> None:
        api, self._api, self._closed = self._api, None, True
        if api is not None:
            await api.close()

    async def call(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: object = None,
        content_type: str = JSON,
        accept: str = JSON,
        budget: aiohttp.ClientTimeout | None = None,
    ) -> JsonDict:
        """`method` `path` (quoted already) with `body` as JSON; the answer's JSON. `budget`: the
        call's time limits (default: a silent connection fails after the client's read timeout;
        callers bound a whole call with `asyncio.timeout`)."""
        api = self._client()
        try:
            found = await api.call_api(
                path,
                method,
                query_params=list(query),
                header_params={"Accept": accept, "Content-Type": content_type},
                body=body,
                response_types_map=_ANSWERS,
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=budget or self._timeout,
            )
        except kclient.ApiException as exc:
            raise ApiError(int(exc.status or 0), str(exc.reason), str(exc.body or "")) from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ApiError(0, f"{type(exc).__name__}: {exc}") from exc
        return cast(JsonDict, found) if isinstance(found, dict) else {}


async def connect(kubeconfig: str | None, *, user_agent: str = USER_AGENT) -> Client:
    """A client for the API server of `kubeconfig` (None: in-cluster). Raises `ConfigError`."""
    return Client(await configuration(kubeconfig), user_agent=user_agent)
