"""Who the dev control plane knows, and the files that say so: identities, tokens, kubeconfigs.

Three static-token identities (an admin in `system:masters`, the operator's and the gateway's
ServiceAccount identities, so tests prove the shipped RBAC), the token file kube-apiserver reads
(`--token-auth-file`), the ServiceAccount signing key, and a kubeconfig per identity. Files are
written owner-only (0600). The API server makes its own serving certificate (`--cert-dir`).
May import: the standard library and cryptography. Called by: dev.controlplane; dev.cli and
dev.demo (the identity names); tests (the namespace).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

OPERATOR_NAMESPACE = "mlxfleet-system"
OPERATOR_SERVICE_ACCOUNT = "mlxfleet-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}"
OPERATOR_GROUPS = (
    "system:serviceaccounts",
    f"system:serviceaccounts:{OPERATOR_NAMESPACE}",
    "system:authenticated",
)
GATEWAY_SERVICE_ACCOUNT = "mlxfleet-gateway"
GATEWAY_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{GATEWAY_SERVICE_ACCOUNT}"
ADMIN_USER = "mlxfleet-admin"


def write_private(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` readable by its owner only (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def write_service_account_key(path: Path) -> None:
    """A fresh RSA key that signs (and verifies) ServiceAccount tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    write_private(path, pem)


def token_file(*, admin: str, operator: str, gateway: str) -> str:
    """kube-apiserver's `--token-auth-file` (CSV: token, user, uid, "groups") for the three."""
    return (
        f'{admin},{ADMIN_USER},uid-admin,"system:masters"\n'
        f'{operator},{OPERATOR_USER},uid-operator,"{",".join(OPERATOR_GROUPS)}"\n'
        f'{gateway},{GATEWAY_USER},uid-gateway,"{",".join(OPERATOR_GROUPS)}"\n'
    )


def kubeconfig(*, server: str, ca_pem: bytes, user: str, token: str) -> str:
    """A kubeconfig (JSON) for `user` with bearer `token`, trusting `ca_pem` for `server`."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "mlxfleet-dev",
                    "cluster": {
                        "server": server,
                        "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [
                {"name": "mlxfleet-dev", "context": {"cluster": "mlxfleet-dev", "user": user}}
            ],
            "current-context": "mlxfleet-dev",
        },
        indent=2,
    )
