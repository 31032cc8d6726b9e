"""Deterministic names: agent slot names, Service names, SwapPlan names and label values.

May import: the standard library, `api.modelref` and `api.resources` (the label key). Called by:
core (slot names, SwapPlan names and labels, the scale subresource's status.selector), adapters
(Service, EndpointSlices and their labels) and the kopf index of slot names.
A name derived here must be the same on every operator replica and after every restart, so the
agent's declarative API and `create` (409 = already there) make repeated work harmless. A
ModelDeployment name may be a DNS subdomain of up to 253 characters; what a name feeds must fit
its own limit (DNS-1035 label for a Service, 63-character label values, DNS label slots), so long
names are shortened with a hash of the whole name. Names that fit are used as they are.
"""

from __future__ import annotations

import hashlib
import re

from mlxfleet_operator.api import resources
from mlxfleet_operator.api.modelref import ModelRef

DNS_LABEL_MAX = 63
LABEL_VALUE_MAX = 63
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")
HASH_LEN = 8
LABEL_HASH_LEN = 16


def _digest(*parts: str, length: int = HASH_LEN) -> str:
    joined = "\x00".join(parts).encode()
    return hashlib.sha256(joined).hexdigest()[:length]


def _label(text: str, *, limit: int) -> str:
    cleaned = _NOT_LABEL.sub("-", text.lower()).strip("-")
    return cleaned[:limit].rstrip("-")


def slot_name(namespace: str, name: str) -> str:
    """The agent slot name for a ModelDeployment: a DNS label, deterministic per (namespace, name).

    `<namespace>-<name>-<hash8>`: readable, and the hash (of the exact pair) keeps `a-b`/`c` and
    `a`/`b-c` apart and keeps long names under 63 characters. The 54-character prefix plus 32
    bits of hash can collide for names that share their first characters (one pair in about 10^5
    such names): the operator detects that (`SlotNameConflict`) instead of sharing a slot. The
    scheme is unchanged since the first release, so agents' existing slots keep their names.
    """
    suffix = _digest(namespace, name)
    base = _label(f"{namespace}-{name}", limit=DNS_LABEL_MAX - HASH_LEN - 1)
    return f"{base}-{suffix}" if base else f"s-{suffix}"


def service_name(deployment: str) -> str:
    """Service (and EndpointSlice prefix) for a ModelDeployment: a DNS-1035 label.

    The deployment name itself when it already is one (the common case), else a cleaned,
    hash-suffixed form (names may be DNS subdomains with dots, or start with a digit).
    """
    if len(deployment) <= DNS_LABEL_MAX and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", deployment):
        return deployment
    base = _label(deployment, limit=DNS_LABEL_MAX - HASH_LEN - 4)
    return f"md-{base}-{_digest(deployment)}" if base else f"md-{_digest(deployment)}"


def agent_metrics_service(node: str) -> str:
    """The headless Service that publishes an InferenceNode's agent as a scrape target:
    `mlxfleet-agent-<node>`, a DNS-1035 label (hash-suffixed when the node's name does not fit
    or is not a label)."""
    prefix = "mlxfleet-agent-"
    whole = prefix + node
    if len(whole) <= DNS_LABEL_MAX and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", whole):
        return whole
    base = _label(node, limit=DNS_LABEL_MAX - len(prefix) - HASH_LEN - 1)
    return f"{prefix}{base}-{_digest(node)}" if base else f"{prefix}{_digest(node)}"


def endpoint_slice_name(service: str, port: int) -> str:
    """One EndpointSlice per data-plane port (agents on one host listen on different ports)."""
    base = service[: 253 - 12]
    return f"{base}-p{port}"


def swap_plan_name(deployment: str, model: ModelRef, *, generation: int) -> str:
    """SwapPlan created by the operator for one model change: same change => same name.

    The hash covers the target and the deployment generation that asked for it, so an operator
    restarted between "create plan" and "record it in status" finds its plan (409) instead of
    making a second one, a plan that rolled back is not silently retried, and going back and
    forth between two models (A -> B -> A -> B) still gets a fresh plan each time.
    """
    suffix = _digest(model.source, model.revision or "", str(generation))
    return f"{deployment[: 253 - HASH_LEN - 1]}-{suffix}"


def label_value(name: str) -> str:
    """A label value naming an object (`mlxfleet.io/deployment`): the name itself when it fits
    (63 characters), else its first 46 characters and 64 bits of hash of the whole name. The full
    name goes in an annotation next to it."""
    if len(name) <= LABEL_VALUE_MAX:
        return name
    suffix = _digest(name, length=LABEL_HASH_LEN)
    return f"{name[: LABEL_VALUE_MAX - LABEL_HASH_LEN - 1]}-{suffix}"


def deployment_labels(name: str) -> dict[str, str]:
    """The label the operator puts on what it makes for ModelDeployment `name` (Service,
    EndpointSlices, SwapPlans): `mlxfleet.io/deployment` with the bounded `label_value`."""
    return {resources.DEPLOYMENT_LABEL: label_value(name)}


def deployment_selector(name: str) -> str:
    """ModelDeployment status.selector, the scale subresource's selector (HPA requires one).

    Built from `deployment_labels`, so it matches what the operator labels for every name,
    including those longer than a label value may be."""
    return ",".join(f"{key}={value}" for key, value in deployment_labels(name).items())
