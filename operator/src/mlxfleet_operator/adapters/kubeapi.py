"""The operator's one asynchronous Kubernetes client: plain aiohttp, JSON in and out.

`Client` is one connection pool to the API server (at most `CONNECTIONS` requests at once, kept
alive and reused), built from the kubeconfig or the in-cluster ServiceAccount (its token read
again as it rotates). `call` sends one request and answers the JSON the API server sent, as
plain dicts (no client models are built: the operator reads and writes JSON); any failure, an
HTTP status outside 2xx or the connection, is an `ApiError` with the status (0: no answer).

The credentials come from the shared loader (`mlxfleet_common.kubeconfig`: the kubeconfig's
context, client certificates, token files, exec plugins; the in-cluster ServiceAccount, its
token read again as it rotates); the Authorization header is asked of them at most every
AUTH_REFRESH_S, so a rotated ServiceAccount token or an expired exec token is read again.
No Kubernetes client library is imported: the operator needs a path, a verb, a content type and
an Accept header (a uid precondition on delete is a JSON body; the provider-key check asks for a
Table); `kubernetes_asyncio`, the async client it used before, cost 35 MB of the operator's
memory in imports alone, and the synchronous `kubernetes` package, whose loaders it used
next, another 10 MB (kopf imports that package's whole client whenever it can; the operator's
entry keeps it out: docs/operator.md, "Kubernetes clients").

The proxy is decided once, when the pool opens (`proxy_once`): the session does not trust the
environment, which made aiohttp read the proxy variables and `~/.netrc` again for every request,
in the default executor (3.6 % of the operator's samples converging 500 x 1,000).
A pool belongs to the event loop that first uses it (aiohttp): the handlers share the one that
`runtime` builds on kopf's loop; the elector, on a thread and loop of its own so that renewals
never wait for kopf's loop, has a pool of its own, made with the same `connect`.
May import: mlxfleet_common.kubeconfig, aiohttp, yarl, `netenv`, the standard library.
Called by: `kube` (the handlers' calls), `lease` (the election's), `runtime`, `election`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

import aiohttp
import yarl

from mlxfleet_common import kubeconfig
from mlxfleet_operator.adapters import netenv

CONNECTIONS = 32  # the operator's own requests at once (kopf's watches and patches: apisession)
# A call whose connection stays silent this long fails (`ApiError`, status 0) instead of holding
# its reconcile, and the object's lock, for ever; the wait for a free connection of the pool is
# not bounded (at scale calls queue there, which is no fault).
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
AUTH_REFRESH_S = 5.0  # a rotated or expired token is read again this long after at the latest
USER_AGENT = "mlxfleet-operator"
JSON = "application/json"
JsonDict = dict[str, Any]
Configuration = kubeconfig.Credentials
ConfigError = kubeconfig.ConfigError  # no usable credentials (the file and field named)


class ApiError(Exception):
    """A request that failed: `status` is the HTTP status, 0 when no answer came."""

    def __init__(self, status: int, reason: str, body: str = "") -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.body = body


async def configuration(path: str | None) -> Configuration:
    """The credentials of the kubeconfig at `path` (None: the in-cluster ServiceAccount), read
    in a worker thread (an exec plugin runs once there)."""
    if path:
        return await asyncio.to_thread(kubeconfig.load, path)
    return await asyncio.to_thread(kubeconfig.in_cluster)


def proxy_once(configuration: Configuration) -> str | None:
    """The proxy for `configuration`'s API server: the kubeconfig's own (`proxy-url`), else the
    one the environment names for it (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`: aiohttp's own
    lookup, `get_env_proxy_for_url`, made once instead of for each request); None: direct.
    Read once: a proxy changed in the environment of a running process is not seen, as for
    any other setting."""
    if configuration.proxy_url:
        return configuration.proxy_url
    return netenv.env_proxy(configuration.server)


def connector(configuration: Configuration, *, limit: int) -> aiohttp.TCPConnector:
    """A pool of at most `limit` connections to the API server with `configuration`'s TLS
    (its CA, client certificate, skip-verify; none for a plain-HTTP server): the operator's
    own pool and kopf's session."""
    secure = configuration.server.startswith("https:")
    return aiohttp.TCPConnector(limit=limit, ssl=configuration.ssl_context() if secure else False)


def request_class(configuration: Configuration) -> type[aiohttp.ClientRequest]:
    """aiohttp's request, checking the API server's certificate for the kubeconfig's
    `tls-server-name` when it names one (an API server reached by an address its certificate
    does not name: an IP, a tunnel); one class for the operator's own pool and kopf's session."""
    name = configuration.tls_server_name
    if name is None:
        return aiohttp.ClientRequest

    class _Named(aiohttp.ClientRequest):
        def __init__(self, *args: Any, server_hostname: str | None = None, **kwargs: Any) -> None:
            super().__init__(*args, server_hostname=server_hostname or name, **kwargs)

    return _Named


def _encode(value: object) -> object:
    """JSON for what `json` cannot write itself (times, as kubernetes clients write them)."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class Client:
    """One connection pool to the API server, opened on the first call (in the running loop),
    closed by `aclose`; a call after that fails (`ApiError`, status 0): nothing the operator
    runs after it stopped reaches the API server."""

    def __init__(
        self,
        configuration: Configuration | None,
        *,
        user_agent: str = USER_AGENT,
        read_timeout: float = READ_TIMEOUT_S,
        connections: int = CONNECTIONS,
    ) -> None:
        self.configuration = configuration
        self._connections = connections
        self._user_agent = user_agent
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=read_timeout
        )
        self._session: aiohttp.ClientSession | None = None
        self._base = ""
        self._proxy: str | None = None
        self._auth: tuple[str | None, float] | None = None  # the header, when it was asked
        self._closed = False

    def _open(self) -> aiohttp.ClientSession:
        if self._closed or self.configuration is None:
            raise ApiError(0, "the operator's Kubernetes client is closed (stopping)")
        if self._session is None:
            config = self.configuration
            self._base = config.server
            self._proxy = proxy_once(config)
            try:
                pool = connector(config, limit=self._connections)
            except ConfigError as exc:
                raise ApiError(0, f"credentials: {exc}") from exc
            self._session = aiohttp.ClientSession(
                connector=pool,
                request_class=request_class(config),
                headers={"User-Agent": self._user_agent},
                trust_env=False,  # the environment was read once above, not for every request
            )
        return self._session

    def _authorization(self) -> str | None:
        """The Authorization header, asked of the credentials at most every AUTH_REFRESH_S (a
        token file is read again, an expired exec plugin run again: on the loop, as rarely as
        the plugin's tokens expire); unreadable credentials fail the call (`ApiError`, 0)."""
        now = time.monotonic()
        if self._auth is None or now - self._auth[1] >= AUTH_REFRESH_S:
            assert self.configuration is not None  # `_open` checked
            try:
                self._auth = (self.configuration.authorization(), now)
            except ConfigError as exc:
                raise ApiError(0, f"credentials: {exc}") from exc
        return self._auth[0]

    async def aclose(self) -> None:
        session, self._session, self._closed = self._session, None, True
        if session is not None:
            await session.close()

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
        session = self._open()
        headers = {"Accept": accept}
        if (auth := self._authorization()) is not None:
            headers["Authorization"] = auth
        data = None
        if body is not None:
            data = json.dumps(body, default=_encode).encode()
            headers["Content-Type"] = content_type
        url = yarl.URL(self._base + path, encoded=True)
        if query:
            url = url.update_query(list(query))
        try:
            async with session.request(
                method,
                url,
                data=data,
                headers=headers,
                proxy=self._proxy,
                timeout=budget or self._timeout,
            ) as answer:
                raw = await answer.read()
                if not 200 <= answer.status < 300:
                    text = raw.decode("utf-8", "replace")
                    raise ApiError(answer.status, answer.reason or "", text)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ApiError(0, f"{type(exc).__name__}: {exc}") from exc
        try:
            found = json.loads(raw) if raw else None
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}


async def connect(kubeconfig: str | None, *, user_agent: str = USER_AGENT) -> Client:
    """A client for the API server of `kubeconfig` (None: in-cluster). Raises `ConfigError`."""
    return Client(await configuration(kubeconfig), user_agent=user_agent)
