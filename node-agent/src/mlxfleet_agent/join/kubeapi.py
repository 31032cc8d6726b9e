"""A small Kubernetes REST client for join and leave (the agent carries no Kubernetes library).

Two identities: join's bootstrap token (with `--ca-file`, or the system's trust store), and for
leave a kubeconfig (its current context, read by the shared loader `mlxfleet_common.kubeconfig`).
May import: the standard library, httpx, mlxfleet_common.kubeconfig. Called by: join.command.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mlxfleet_common import kubeconfig

TIMEOUT = httpx.Timeout(15.0, connect=5.0)
NODES = "/apis/mlxfleet.io/v1alpha1/inferencenodes"
DEPLOYMENTS = "/apis/mlxfleet.io/v1alpha1/modeldeployments"


def secrets_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/secrets"


class KubeApiError(Exception):
    """A refused or failed call; `status` is the HTTP code (0: not reached)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Api:
    server: str
    verify: ssl.SSLContext | bool
    headers: dict[str, str]
    cert: tuple[str, str] | None = None

    def call(self, method: str, path: str, body: Any = None, *, patch: bool = False) -> Any:
        headers = dict(self.headers)
        if patch:
            headers["Content-Type"] = "application/merge-patch+json"
        try:
            with httpx.Client(verify=self.verify, cert=self.cert, timeout=TIMEOUT) as client:
                response = client.request(
                    method, self.server + path, headers=headers,
                    content=None if body is None else _json(body),
                )  # fmt: skip
        except httpx.HTTPError as exc:
            raise KubeApiError(0, f"{self.server}: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 400:
            try:
                message = str(response.json().get("message") or response.text[:300])
            except ValueError:
                message = response.text[:300]
            raise KubeApiError(response.status_code, message)
        return response.json() if response.content else None

    def create(self, path: str, body: dict[str, Any]) -> bool:
        """True: created; False: it exists already (409)."""
        try:
            self.call("POST", path, body)
        except KubeApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def delete(self, path: str) -> bool:
        try:
            self.call("DELETE", path)
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True


def _json(body: Any) -> bytes:
    import json

    return json.dumps(body).encode()


def _context(ca_file: str | None = None) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca_file)


def bootstrap(server: str, token: str, ca_file: Path | None) -> Api:
    if ca_file is not None and not ca_file.is_file():
        raise KubeApiError(0, f"--ca-file {ca_file}: no such file")
    try:
        verify = _context(str(ca_file) if ca_file else None)
    except (ssl.SSLError, OSError) as exc:
        raise KubeApiError(0, f"--ca-file {ca_file}: not a PEM certificate ({exc})") from None
    return Api(server, verify, {"Authorization": f"Bearer {token}"})


def from_kubeconfig(path: Path, *, flag: str) -> Api:
    """The current context of a kubeconfig file (the shared loader, `mlxfleet_common.kubeconfig`:
    a token, token file, client certificate or exec plugin; the CA, skip-verify)."""
    try:
        creds = kubeconfig.load(path)
        verify = creds.ssl_context()
        auth = creds.authorization()
    except (kubeconfig.ConfigError, ssl.SSLError, OSError) as exc:
        raise KubeApiError(0, f"{flag} {path}: not a usable kubeconfig ({exc})") from None
    return Api(creds.server, verify, {"Authorization": auth} if auth else {})
