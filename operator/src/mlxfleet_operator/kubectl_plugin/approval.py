"""What `kubectl mlxfleet approve node NAME` shows and writes (pure).

A node that joined itself (`mlxfleet-agent join`) is created `spec.approved: false`,
`spec.unschedulable: true` and without labels; the labels it asks for are a JSON object in the
annotation `mlxfleet.io/requested-labels`. Approving sets `approved: true`, uncordons, and applies
those labels (each checked as Kubernetes checks label keys and values; `--no-labels`: none, the
annotation stays), in one merge patch, after showing the person what they approve: the agent
URL, the memory and chip it claims, the labels.
May import: the standard library, `api`. Called by: kubectl_plugin.cli.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from mlxfleet_operator.api import inferencenode as inode
from mlxfleet_operator.api import resources

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
ANNOTATION = resources.REQUESTED_LABELS_ANNOTATION


class ApprovalError(ValueError):
    """The node cannot be approved as asked; the message says why and what to do."""


def waiting(node: Mapping[str, Any]) -> bool:
    """The node waits for a person (it joined itself and nobody approved it yet)."""
    return not inode.approved((node.get("spec") or {}).get("approved"))


def _label_ok(key: str, value: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return False
    return bool(_NAME.fullmatch(name)) and bool(_VALUE.fullmatch(value))


def requested(node: Mapping[str, Any]) -> dict[str, str]:
    """The labels the node asked for (none: {}); ApprovalError naming the annotation when they
    are not a JSON object of valid Kubernetes label keys and values."""
    name = (node.get("metadata") or {}).get("name", "")
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    if raw is None:
        return {}
    try:
        found = json.loads(raw)
    except ValueError:
        found = None
    if not isinstance(found, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and _label_ok(k, v) for k, v in found.items()
    ):
        raise ApprovalError(
            f"inferencenode/{name}: annotation {ANNOTATION} is not a JSON object of Kubernetes "
            "labels (key: [prefix/]name, value: up to 63 letters, digits, '-', '_', '.'); "
            "approve with --no-labels and label the node yourself"
        )
    return dict(sorted(found.items()))


def summary(node: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    """What the person approves, one fact a line (all of it claimed by the Mac itself)."""
    spec = node.get("spec") or {}
    hardware = spec.get("hardware") or {}
    meta = node.get("metadata") or {}
    shown = ",".join(f"{k}={v}" for k, v in labels.items()) or "(none)"
    return [
        f"inferencenode/{meta.get('name', '')}, created {meta.get('creationTimestamp', '?')}",
        f"  agent URL: {(spec.get('agent') or {}).get('url', '?')}",
        f"  claims:    chip {hardware.get('chip', '?')}, memory {hardware.get('memory', '?')}",
        f"  labels:    {shown}",
    ]


def patch(labels: Mapping[str, str] | None) -> dict[str, Any]:
    """The merge patch that approves: approved, uncordoned, the labels applied (and their
    annotation removed); `labels` None: none applied, the annotation kept."""
    body: dict[str, Any] = {"spec": {"approved": True, "unschedulable": False}}
    if labels is not None:
        body["metadata"] = {"labels": dict(labels), "annotations": {ANNOTATION: None}}
    return body
