"""What join writes, decided from its flags and the host's facts (pure; unit-tested).

Every bad flag raises `JoinError` naming the flag and what is allowed.
May import: the standard library. Called by: join.command, tests.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

NAMESPACE = "mlxfleet-agents"
"""Where join puts the agent's token Secret by default (the chart's operator.agentSecretsNamespace):
not the gateway's namespace, whose Secrets the gateway may read."""
LEGACY_NAMESPACE = "mlxfleet-system"
"""Where joins of 0.1.0 put it (join.json without `secretsNamespace`)."""
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
CREDENTIALS_LABEL = "mlxfleet.io/agent-credentials"
REQUESTED_LABELS = "mlxfleet.io/requested-labels"
"""The labels join asks for (JSON): the join identity may set none; approval applies them."""
TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,55}[a-z0-9])?$")  # + "-agent" stays a DNS label
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


class JoinError(ValueError):
    """Input join cannot use; the message names the flag and what is allowed."""


def server(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme != "https" or not parts.hostname or parts.path not in ("", "/"):
        raise JoinError(
            f"--server {url!r}: expected the API server's https:// URL, such as "
            "https://k8s.example.com:6443 (no path)"
        )
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise JoinError(f"--server {url!r}: the port is not a number from 1 to 65535") from None
    return url.strip().rstrip("/")


def token(text: str) -> str:
    if TOKEN.fullmatch(text.strip()) is None:
        raise JoinError(
            "--token: not a bootstrap token; expected <6 of [a-z0-9]>.<16 of [a-z0-9]> as "
            "`mlxfleet token create` prints it"
        )
    return text.strip()


def node_name(text: str) -> str:
    name = text.strip().lower()
    if NODE_NAME.fullmatch(name) is None:
        raise JoinError(
            f"--node-name {text!r}: a DNS label of at most 57 characters (lowercase letters, "
            "digits and '-', starting and ending with a letter or digit)"
        )
    return name


def secrets_namespace(text: str) -> str:
    name = text.strip()
    if _NAMESPACE.fullmatch(name) is None:
        raise JoinError(
            f"--secrets-namespace {text!r}: a namespace name (a DNS label of at most 63 "
            "lowercase letters, digits and '-'), the chart's operator.agentSecretsNamespace"
        )
    return name


def default_node_name(hostname: str) -> str:
    """The host name's first label, lowercased, other characters made '-'."""
    first = hostname.split(".")[0].lower()
    cleaned = re.sub(r"[^a-z0-9-]+", "-", first).strip("-")[:57].strip("-")
    return cleaned or "mac"


def labels(items: Sequence[str]) -> dict[str, str]:
    """`--labels k=v[,k=v]` (repeatable) -> mapping; keys and values checked as Kubernetes does."""
    out: dict[str, str] = {}
    for item in items:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = pair.partition("=")
            if not sep:
                raise JoinError(f"--labels {pair!r}: expected key=value")
            prefix, slash, name = key.rpartition("/")
            if (
                slash and (not prefix or len(prefix) > 253 or not _LABEL_PREFIX.fullmatch(prefix))
            ) or not _LABEL_NAME.fullmatch(name):
                raise JoinError(
                    f"--labels {pair!r}: the key must be [prefix/]name, name up to 63 of "
                    "letters, digits, '-', '_', '.' (prefix: a DNS subdomain)"
                )
            if not _LABEL_VALUE.fullmatch(value):
                raise JoinError(
                    f"--labels {pair!r}: the value must be up to 63 of letters, digits, '-', "
                    "'_', '.', starting and ending with a letter or digit (or empty)"
                )
            out[key] = value
    return out


def advertise_url(host: str, port: int) -> str:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?", host):
            raise JoinError(
                f"--advertise-address {host!r}: a host name or IP address the cluster can reach"
            ) from None
        return f"https://{host}:{port}"
    return f"https://[{address}]:{port}" if address.version == 6 else f"https://{address}:{port}"


@dataclass(frozen=True)
class Facts:
    chip: str | None = None
    memory_bytes: int | None = None
    gpu_cores: int | None = None


def chip_family(chip: str | None) -> str | None:
    """`Apple M2 Ultra` -> `m2-ultra` (the label samples select on)."""
    if not chip:
        return None
    found = re.search(r"\b(M\d+)(?:\s+(Pro|Max|Ultra))?\b", chip)
    if found is None:
        return None
    return "-".join(p.lower() for p in found.groups() if p)


def fact_labels(facts: Facts) -> dict[str, str]:
    out: dict[str, str] = {}
    family = chip_family(facts.chip)
    if family:
        out["mlxfleet.io/chip-family"] = family
    if facts.gpu_cores:
        out["mlxfleet.io/gpu-cores"] = str(facts.gpu_cores)
    if facts.memory_bytes:
        out["mlxfleet.io/memory-gib"] = str(facts.memory_bytes // 2**30)
    return out


def secret_name(node: str) -> str:
    return f"{node}-agent"


def secret(node: str, *, namespace: str, token: str, ca_pem: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(node),
            "namespace": namespace,
            "labels": {CREDENTIALS_LABEL: "true", "app.kubernetes.io/part-of": "mlxfleet"},
        },
        "type": "Opaque",
        "stringData": {"token": token, "ca.crt": ca_pem},
    }


def awaiting_approval(spec: dict[str, Any]) -> dict[str, Any]:
    """A joined node is created unapproved and cordoned: it takes no traffic, gets no credential
    and is not polled until a person approves it (the admission policy insists on both)."""
    return {**spec, "approved": False, "unschedulable": True}


def requested_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels join asks for, as the annotation approval applies them from (join may set no
    label itself: one a deployment selects would draw its replicas here)."""
    return {REQUESTED_LABELS: json.dumps(dict(sorted(labels.items())), separators=(",", ":"))}


def inference_node(
    node: str, *, namespace: str, url: str, facts: Facts, extra_labels: Mapping[str, str]
) -> dict[str, Any]:
    hardware: dict[str, Any] = {}
    if facts.chip:
        hardware["chip"] = facts.chip[:128]
    if facts.memory_bytes:
        hardware["memory"] = f"{facts.memory_bytes // 2**20}Mi"
    ref = {"name": secret_name(node), "namespace": namespace}
    spec: dict[str, Any] = {
        "agent": {"url": url, "tokenSecretRef": ref, "caSecretRef": {**ref, "key": "ca.crt"}}
    }
    if hardware:
        spec["hardware"] = hardware
    metadata: dict[str, Any] = {"name": node}
    wanted = {**fact_labels(facts), **extra_labels}
    if wanted:
        metadata["annotations"] = requested_labels(wanted)
    return {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "InferenceNode",
        "metadata": metadata,
        "spec": awaiting_approval(spec),
    }


@dataclass(frozen=True)
class Layout:
    """Where join puts things on the Mac."""

    config_dir: str
    state_dir: str
    models_dir: str
    unit_dir: str
    log_dir: str

    @property
    def config(self) -> str:
        return f"{self.config_dir}/agent.yaml"

    @property
    def record(self) -> str:
        return f"{self.config_dir}/join.json"

    @property
    def token(self) -> str:
        return f"{self.config_dir}/token"

    @property
    def tls_cert(self) -> str:
        return f"{self.config_dir}/tls.crt"

    @property
    def tls_key(self) -> str:
        return f"{self.config_dir}/tls.key"


def agent_config(
    node: str, layout: Layout, *, bind: str, control_port: int, data_port: int
) -> dict[str, Any]:
    return {
        "nodeName": node,
        "stateDir": layout.state_dir,
        "modelsDir": layout.models_dir,
        "bind": bind,
        "controlPort": control_port,
        "dataPort": data_port,
        "tokenFile": layout.token,
        "tlsCert": layout.tls_cert,
        "tlsKey": layout.tls_key,
    }
