"""What the process environment says about reaching a URL: its proxy (`HTTPS_PROXY`,
`HTTP_PROXY`, honouring `NO_PROXY`), looked up once per destination instead of per request.

May import: aiohttp, yarl, the standard library. Called by: `kubeapi` (the API server) and
`agent` (each node agent). Read once: a proxy changed in the environment of a running process is
not seen, as for any other setting.
"""

from __future__ import annotations

import aiohttp.helpers
import yarl


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (aiohttp's own lookup,
    `get_env_proxy_for_url`); None: go direct (none named, or NO_PROXY exempts the host)."""
    try:
        proxy, _ = aiohttp.helpers.get_env_proxy_for_url(yarl.URL(url))
    except (LookupError, ValueError):  # none named / exempt; ValueError: not a URL
        return None
    return str(proxy)
