"""The Kubernetes objects `make demo` applies and reads, and kubectl helpers for them.

The two InferenceNodes (agent URL, token Secret reference, hardware, cost), their token Secrets,
the 2-replica ModelDeployment and the gateway API key (a Secret holding the key's SHA-256 only,
see docs/gateway.md); `apply` and `get` run the real kubectl against the control plane.
May import: the standard library, api.resources, dev (controlplane, credentials).
Called by: dev.demo.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

from mlxfleet_operator.api import resources
from mlxfleet_operator.dev import controlplane, credentials

NAMESPACE = "default"
DEPLOYMENT = "tiny-chat"
NODES = ("mac-mini-1", "mac-mini-2")


def node(name: str, url: str, index: int, *, memory: int) -> dict[str, Any]:
    """The InferenceNode of the demo agent `name` (control API at `url`); `memory`: bytes of
    the machine the agent runs on (what its budget is computed from, so `kubectl get inode`
    and a refusal's budget tell one story)."""
    return {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "InferenceNode",
        "metadata": {"name": name, "labels": {"mlxfleet.io/demo": "true"}},
        "spec": {
            "agent": {
                "url": url,
                "tokenSecretRef": {
                    "name": f"{name}-agent",
                    "namespace": resources.AGENT_SECRETS_NAMESPACE,
                },
            },
            "hardware": {"chip": f"Apple M4 Pro (demo {index})", "memory": f"{memory // 2**20}Mi"},
            "cost": {
                "purchasePriceUSD": 2199,
                "amortizationMonths": 36,
                "idlePowerWatts": 7,
                "busyPowerWatts": 65,
                "electricityUSDPerKWh": 0.25,
            },
        },
    }


def agent_secret(name: str, token: str) -> dict[str, Any]:
    """The Secret holding the control-API token of the demo agent `name`."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{name}-agent",
            "namespace": resources.AGENT_SECRETS_NAMESPACE,
            "labels": {resources.AGENT_CREDENTIALS_LABEL: "true"},
        },
        "stringData": {"token": token},
    }


def deployment(source: str) -> dict[str, Any]:
    """The demo's ModelDeployment: 2 replicas of `source`, spread over the demo nodes."""
    return {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "model": {"source": source, "servedName": DEPLOYMENT},
            "replicas": 2,
            "contextLength": 2048,
            "maxConcurrency": 4,
            "placement": {"nodeSelector": {"mlxfleet.io/demo": "true"}, "strategy": "Spread"},
            "server": {"maxTokens": 64},
            "swap": {"strategy": "Auto", "drainTimeoutSeconds": 60},
        },
    }


def apply(plane: controlplane.ControlPlane, obj: dict[str, Any]) -> None:
    plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))


def get(plane: controlplane.ControlPlane, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(plane.kubectl("get", *args, "-o", "json").stdout)
    return out


def api_key(plane: controlplane.ControlPlane) -> str:
    """A fresh API key for the demo: the Secret holds its SHA-256 only (see docs/gateway.md)."""
    key = "mfk-" + secrets.token_urlsafe(32)
    apply(
        plane,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "mlxfleet.io/api-key",
            "metadata": {"name": "demo-key", "namespace": credentials.OPERATOR_NAMESPACE},
            "stringData": {
                "keyHash": hashlib.sha256(key.encode()).hexdigest(),
                "namespaces": NAMESPACE,
                "team": "demo",
                "owner": "you",
            },
        },
    )
    return key
