"""Which Kubernetes objects are the operator's own, and whether one is already as it would write it.

The operator writes a ModelDeployment's (or an InferenceNode's metrics) Service and
EndpointSlices only where they are its own (`owns`: our managed-by label and a controller
`owner_reference` to that owner); anything
else with the name is left alone and a person is told why (`conflict_message`). `covers` tells
a read object that already holds every field we would write (the publish resync then reads, it
does not write). Pure: plain JSON objects in, no I/O.
May import: the standard library, `api`. Called by: `publishing`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlxfleet_operator.api import resources

MANAGED_BY = "mlxfleet.io"
JsonDict = dict[str, Any]


def covers(found: Any, wanted: Any) -> bool:
    """`found` (an object as the API server returns it) already holds every field of `wanted`
    with the same value: mappings key by key, with more keys allowed in `found` (the server's
    defaults, other managers' fields); lists of the same length, item by item."""
    if isinstance(wanted, Mapping):
        return isinstance(found, Mapping) and all(
            key in found and covers(found[key], value) for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(found, list)
            and len(found) == len(wanted)
            and all(covers(f, w) for f, w in zip(found, wanted, strict=True))
        )
    return bool(found == wanted)


def owns(deployment: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """The operator made `obj` for this owner (a ModelDeployment unless its body says another
    kind): our managed-by label and a controller ownerReference to it (its uid, or its name: an
    owner deleted and created again under the same name takes its predecessor's objects back)."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") != MANAGED_BY:
        return False
    mine = deployment["metadata"]
    kind = deployment.get("kind", resources.MODEL_DEPLOYMENT.kind)
    for ref in meta.get("ownerReferences") or []:
        ours = (
            ref.get("controller") is True
            and ref.get("kind") == kind
            and str(ref.get("apiVersion", "")).split("/")[0] == resources.GROUP
        )
        if ours and (ref.get("uid") == mine["uid"] or ref.get("name") == mine["name"]):
            return True
    return False


def inherited(deployment: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """`obj` is ours (`owns`) but names a predecessor of this deployment (same name, another
    uid) as its owner, not this one: its ownerReferences must be replaced, not merged (two
    controller references are invalid)."""
    uid = deployment["metadata"]["uid"]
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return owns(deployment, obj) and not any(ref.get("uid") == uid for ref in refs)


def conflict_message(
    kind: str, obj: Mapping[str, Any], owner: Mapping[str, Any] | None = None
) -> str:
    """Why an object with our name is not ours, and what a person can do."""
    meta = obj.get("metadata") or {}
    where = f"{kind} {meta.get('namespace')}/{meta.get('name')}"
    owners = [
        f"{r.get('kind')} {r.get('name')}"
        for r in meta.get("ownerReferences") or []
        if r.get("controller")
    ]
    why = f"it belongs to {', '.join(owners)}" if owners else "it was not created by mlxfleet"
    return (
        f"{where} already exists and {why}; the operator leaves it alone. Delete or rename it, "
        f"or give the {_owner_kind(owner)} another name (docs/operator.md: names)"
    )


def _owner_kind(owner: Mapping[str, Any] | None) -> str:
    return str((owner or {}).get("kind", resources.MODEL_DEPLOYMENT.kind))


def owner_reference(body: Mapping[str, Any]) -> JsonDict:
    meta = body["metadata"]
    return {
        "apiVersion": body.get("apiVersion", resources.API_VERSION),
        "kind": body.get("kind", resources.MODEL_DEPLOYMENT.kind),
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }
