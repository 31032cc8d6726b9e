"""Reach a node's agent from a person's machine: its URL and credentials from the cluster (the
InferenceNode's spec.agent and the labelled Secret it names, as the operator reads them), then
`GET /metrics` (no token) and `GET /v1/logs` (bearer token) on its control API.

Reading the token needs `get` on Secrets in the agents' namespace (an admin kubeconfig); metrics
need only the CA. Same trust rule as the operator: only Secrets labelled as agent credentials.
May import: kubernetes, httpx, prometheus_client, `api.resources`. Called by: kubectl_plugin.cli.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import kubernetes
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from mlxfleet_operator.api import resources

TIMEOUT = httpx.Timeout(10.0, connect=5.0)


class AgentAccessError(Exception):
    """The agent or its credentials could not be reached; the message says which and why."""


@dataclass(frozen=True)
class Access:
    node: str
    url: str
    token: str | None
    ca_pem: str | None

    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cadata=self.ca_pem) if self.ca_pem else True


def _secret_value(
    core: kubernetes.client.CoreV1Api, ref: Mapping[str, Any], default_key: str
) -> str:
    namespace = ref.get("namespace") or resources.AGENT_SECRETS_NAMESPACE
    name, key = ref["name"], ref.get("key") or default_key
    try:
        secret = core.read_namespaced_secret(name, namespace)
    except ApiException as exc:
        raise AgentAccessError(
            f"Secret {namespace}/{name}: the API server answered {exc.status} {exc.reason} "
            "(reading an agent's token needs `get secrets` there: an admin kubeconfig)"
        ) from None
    labels = (secret.metadata.labels if secret.metadata is not None else None) or {}
    if labels.get(resources.AGENT_CREDENTIALS_LABEL) != "true":
        raise AgentAccessError(
            f"Secret {namespace}/{name} is not labelled {resources.AGENT_CREDENTIALS_LABEL}=true"
        )
    raw = (secret.data or {}).get(key)
    if raw is None:
        raise AgentAccessError(f"Secret {namespace}/{name} has no key {key}")
    return base64.b64decode(raw).decode().strip()


def access(node: Mapping[str, Any], core: kubernetes.client.CoreV1Api, *, token: bool) -> Access:
    agent = node.get("spec", {}).get("agent") or {}
    ca_ref = agent.get("caSecretRef")
    ca = _secret_value(core, ca_ref, "ca.crt") + "\n" if ca_ref else None
    bearer = _secret_value(core, agent["tokenSecretRef"], "token") if token else None
    return Access(node["metadata"]["name"], str(agent.get("url", "")).rstrip("/"), bearer, ca)


def _get(agent: Access, path: str, **params: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {agent.token}"} if agent.token else {}
    try:
        response = httpx.get(
            agent.url + path, params=params, headers=headers, timeout=TIMEOUT, verify=agent.verify()
        )
    except httpx.HTTPError as exc:
        raise AgentAccessError(
            f"{agent.node}: {agent.url}{path}: {type(exc).__name__}: {exc}"
        ) from None
    if response.status_code != 200:
        raise AgentAccessError(
            f"{agent.node}: {agent.url}{path} answered {response.status_code}: "
            f"{response.text[:200]}"
        )
    return response


def scrape(agent: Access) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The agent's Prometheus samples: (sample name, labels) -> value."""
    text = _get(agent, "/metrics").text
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = float(sample.value)
    return out


def logs(agent: Access, tail: int) -> list[str]:
    body = _get(agent, "/v1/logs", tail=tail).json()
    return [str(line) for line in body.get("lines", [])]
