"""kopf's HTTP session to the API server, with a bound on its concurrent connections.

kopf's own session opens a connection for every request in flight (aiohttp `limit=0`): at 500
nodes x 1,000 deployments its timers sent hundreds of status patches at the same moment, each on
a new TLS connection, and the API server refused (429) what exceeded its in-flight limits; kopf
retried after backoff, so heartbeats were written seconds late. With `KUBE_CONNECTIONS` the
requests above the bound wait in the client for a free connection (kept alive and reused),
in the order they came; long-lived watch streams hold one connection each (`WATCH_RESERVE`).
The credentials are those of the operator's own calls (`kubeapi.configuration`: the kubeconfig
the operator was given, else the in-cluster ServiceAccount), read again at each login: kopf
logs in again when the API server answers 401 (a rotated token). The proxy is decided once
(`kubeapi.proxy_once`) and the session does not read the environment for each request. Its TLS
is the operator's own client's (`kubeapi.connector`, `kubeapi.request_class`), so a kubeconfig's
`tls-server-name` holds for kopf's requests too.

May import: kopf, aiohttp, `kubeapi`. Called by: handlers.lifecycle (the `on.login` handler).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import kopf

from mlxfleet_operator.adapters import kubeapi

KUBE_CONNECTIONS = 48  # requests (patches, posts, reads) at once
WATCH_RESERVE = 16  # connections held by watch streams (one per watched kind and namespace)


async def login(*, kubeconfig: str | None, **_: Any) -> kopf.AiohttpSession:
    """kopf's session to the API server of `kubeconfig` (None: in-cluster), bounded to
    KUBE_CONNECTIONS + WATCH_RESERVE connections. Async: the session belongs to kopf's event
    loop. Raises `kopf.LoginError` when no credentials can be read (kopf then stops)."""
    try:
        config = await kubeapi.configuration(kubeconfig)
        info = connection(config)
        pool = session(info, config, limit=KUBE_CONNECTIONS + WATCH_RESERVE)
    except kubeapi.ConfigError as exc:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "in-cluster config"
        raise kopf.LoginError(f"no Kubernetes credentials in {where}: {exc}") from exc
    return kopf.AiohttpSession(
        server=info.server,
        priority=info.priority,
        default_namespace=info.default_namespace,
        expiration=info.expiration,
        aiohttp_session=pool,
    )


def connection(config: kubeapi.Configuration) -> kopf.ConnectionInfo:
    """kopf's connection settings from the credentials (as `kopf.login_via_client` reads them);
    an exec plugin's token carries its expiry, so kopf logs in again before it lapses."""
    header = config.authorization()
    scheme, _, token = (header or "").partition(" ")
    return kopf.ConnectionInfo(
        server=config.server,
        ca_path=config.ca_file,
        insecure=not config.verify,
        scheme=scheme or None,
        token=token or None,
        certificate_path=config.cert_file,
        private_key_path=config.key_file,
        proxy_url=kubeapi.proxy_once(config),
        trust_env=False,
        expiration=config.expiration,
    )


def session(
    info: kopf.ConnectionInfo, config: kubeapi.Configuration, *, limit: int
) -> aiohttp.ClientSession:
    """The session kopf would build from `info`, with at most `limit` connections, and the TLS
    of the operator's own client (`kubeapi.connector`: the CA, the client certificate, skip-verify;
    `kubeapi.request_class`: the kubeconfig's `tls-server-name`, which kopf's own session
    ignores)."""
    return aiohttp.ClientSession(
        connector=kubeapi.connector(config, limit=limit),
        request_class=kubeapi.request_class(config),
        headers=info.as_http_headers(),  # the token or basic auth
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
