"""kopf's HTTP session to the API server, with a bound on its concurrent connections.

kopf's own session opens a connection for every request in flight (aiohttp `limit=0`): at 500
nodes x 1,000 deployments its timers sent hundreds of status patches at the same moment, each on
a new TLS connection, and the API server refused (429) what exceeded its in-flight limits; kopf
retried after backoff, so heartbeats were written seconds late. With `KUBE_CONNECTIONS` the
requests above the bound wait in the client for a free connection (kept alive and reused),
in the order they came; long-lived watch streams hold one connection each (`WATCH_RESERVE`).
The credentials are kopf's usual ones (`kopf.login_via_client`: in-cluster ServiceAccount or
$KUBECONFIG).

May import: kopf, aiohttp. Called by: handlers.lifecycle (the `on.login` handler).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import kopf

KUBE_CONNECTIONS = 48  # requests (patches, posts, reads) at once
WATCH_RESERVE = 16  # connections held by watch streams (one per watched kind and namespace)


async def login(**kwargs: Any) -> kopf.AiohttpSession | None:
    """kopf's login via the kubernetes client's config, in a session bounded to
    KUBE_CONNECTIONS + WATCH_RESERVE connections (None: no config found). Async: the session
    belongs to kopf's event loop."""
    info = kopf.login_via_client(**kwargs)
    if info is None:
        return None
    return kopf.AiohttpSession(
        server=info.server,
        priority=info.priority,
        default_namespace=info.default_namespace,
        expiration=info.expiration,
        aiohttp_session=session(info, limit=KUBE_CONNECTIONS + WATCH_RESERVE),
    )


def session(info: kopf.ConnectionInfo, *, limit: int) -> aiohttp.ClientSession:
    """The session kopf would build from `info`, with at most `limit` connections."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),  # the token or basic auth
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
