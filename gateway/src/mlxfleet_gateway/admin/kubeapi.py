"""The Kubernetes API server as the console and the admin API reach it: async, never blocking
the event loop the data path shares.

Two identities: the gateway's own (its kubeconfig or in-cluster ServiceAccount: TokenReview,
SubjectAccessReview, and the writes of admin-key callers) and the caller's (their own bearer
token, no client certificate: writes, Events and agent logs with the caller's own rights, so the
API server judges them). Connection facts (address, CA, the gateway's credential) come from the
`kubernetes` client's configuration the watches use; an in-cluster token is re-read as it rotates.
May import: httpx, kubernetes (its configuration only), the standard library.
Called by: admin.auth, admin.api, console.
"""

from __future__ import annotations

import json
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import kubernetes

TIMEOUT = httpx.Timeout(10.0, connect=5.0)
REFRESH_S = 60.0
JsonDict = dict[str, Any]


class KubeUnavailable(Exception):
    """The API server could not be reached or did not answer in time."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: JsonDict

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        """The API server's own words (a Status object's message)."""
        return str(self.body.get("message") or self.body.get("reason") or f"HTTP {self.status}")


def path(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


class KubeApi:
    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        cfg = api.configuration
        self._cfg = cfg
        self.host = str(cfg.host).rstrip("/")
        own = self._context(cfg)
        if cfg.cert_file:
            own.load_cert_chain(cfg.cert_file, cfg.key_file)
        self._own = httpx.AsyncClient(verify=own, timeout=TIMEOUT)
        # a caller's requests carry their token and nothing of the gateway (no client certificate,
        # which the API server would authenticate first)
        self._caller = httpx.AsyncClient(verify=self._context(cfg), timeout=TIMEOUT)
        self._refreshed = -REFRESH_S
        self._authorization: str | None = None

    @staticmethod
    def _context(cfg: Any) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
        if not cfg.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _own_authorization(self) -> str | None:
        """The gateway's own `Authorization` value (None: a client certificate), re-read from
        the client's configuration once a minute (its hook reloads a rotated token)."""
        if time.monotonic() - self._refreshed > REFRESH_S:
            found = self._cfg.auth_settings().get("BearerToken")
            self._authorization = str(found["value"]) if found and found.get("value") else None
            self._refreshed = time.monotonic()
        return self._authorization

    async def call(
        self,
        method: str,
        url_path: str,
        *,
        token: str | None = None,
        body: JsonDict | None = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Reply:
        """One request as the caller (`token`) or, without one, as the gateway."""
        headers = {"Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
            client = self._caller
        else:
            own = self._own_authorization()
            if own:
                headers["Authorization"] = own
            client = self._own
        content = None
        if body is not None:
            headers["Content-Type"] = content_type
            content = json.dumps(body).encode()
        try:
            r = await client.request(
                method, self.host + url_path, headers=headers, content=content, params=params
            )
        except httpx.HTTPError as exc:
            raise KubeUnavailable(f"{type(exc).__name__}: {exc}") from None
        try:
            parsed = r.json() if r.content else {}
        except ValueError:
            parsed = {"message": r.text[:300]}
        return Reply(r.status_code, parsed if isinstance(parsed, dict) else {"items": parsed})

    async def get_url(
        self, url: str, *, bearer: str, ca_pem: str | None, params: dict[str, str]
    ) -> httpx.Response:
        """GET an agent's control API (its logs) with its token, trusting its CA when given."""
        verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cadata=ca_pem) if ca_pem else True
        )
        async with httpx.AsyncClient(verify=verify, timeout=TIMEOUT) as client:
            return await client.get(
                url, params=params, headers={"Authorization": f"Bearer {bearer}"}
            )

    async def aclose(self) -> None:
        await self._own.aclose()
        await self._caller.aclose()
