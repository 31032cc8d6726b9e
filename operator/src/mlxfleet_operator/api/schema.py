"""Pydantic JSON Schema -> structural OpenAPI v3 schema that a CRD accepts.

Rewrites (see STYLE.md "Pitfalls"):
- `$defs`/`$ref` (and one-element `allOf`) are inlined; the field's own keys (description,
  default, CEL rules) win over the referenced model's;
- `anyOf [X, null]` becomes X with `nullable: true` (so the pydantic dump of an unset field,
  `null`, is accepted), except for enums (the API server refuses null there) and fields marked
  `base.crd(nullable=False)` (fields that cross-field CEL rules read: a null would reach them);
- `title`, `examples`, `additionalProperties: false` and `default: null` are dropped;
- `const` becomes a one-value `enum`; numeric `exclusiveMinimum/Maximum: n` become
  `minimum/maximum: n` + `exclusive...: true`;
- `additionalProperties: true` (a free-form object) becomes `x-kubernetes-preserve-unknown-fields`;
- `anyOf [integer, string]` marked `x-kubernetes-int-or-string` (quantities) keeps no `type`.
Every node must end up with a `type` (or preserve unknown fields, or be int-or-string): anything
else raises.
May import: the standard library only. Called by: `crdgen`.
"""

from __future__ import annotations

import copy
from typing import Any

JsonDict = dict[str, Any]

_DROP = frozenset({"title", "examples", "$schema", "discriminator", "readOnly", "writeOnly"})
_NULL = {"type": "null"}
NOT_NULLABLE = "x-mlxfleet-not-nullable"
INT_OR_STRING = "x-kubernetes-int-or-string"
_INT_OR_STRING_TYPES = [{"type": "integer"}, {"type": "string"}]


class SchemaError(ValueError):
    """A pydantic schema construct that has no structural CRD equivalent."""


def structural(schema: JsonDict) -> JsonDict:
    """The structural form of a pydantic `model_json_schema(by_alias=True)` result."""
    defs: JsonDict = schema.get("$defs", {})
    root = {k: v for k, v in schema.items() if k != "$defs"}
    result = _rewrite(root, defs=defs, path="")
    check_structural(result)
    return result


def _resolve(ref: str, defs: JsonDict, path: str) -> JsonDict:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
        raise SchemaError(f"{path or '<root>'}: cannot resolve $ref {ref!r}")
    found: JsonDict = defs[ref[len(prefix) :]]
    return found


def _merge(base: JsonDict, overlay: JsonDict) -> JsonDict:
    """`base` (a referenced schema) with the referencing field's keys on top."""
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if key == "x-kubernetes-validations":
            merged[key] = [*merged.get(key, []), *value]
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _rewrite(node: JsonDict, *, defs: JsonDict, path: str) -> JsonDict:
    node = dict(node)
    if "$ref" in node:
        target = _resolve(node.pop("$ref"), defs, path)
        return _rewrite(_merge(target, node), defs=defs, path=path)
    if "allOf" in node:
        parts = node.pop("allOf")
        if len(parts) != 1:
            raise SchemaError(f"{path}: allOf with {len(parts)} parts is not supported")
        return _rewrite(_merge(parts[0], node), defs=defs, path=path)
    if "anyOf" in node:
        union = node.pop("anyOf")
        if node.get(INT_OR_STRING) and union == _INT_OR_STRING_TYPES:
            return _rewrite(node, defs=defs, path=path)  # no type: the marker says both
        options = [o for o in union if o != _NULL]
        if len(options) != 1:
            raise SchemaError(f"{path}: a union of {len(options)} types is not structural")
        nullable = len(options) < len(union) and node.pop(NOT_NULLABLE, None) is None
        merged = _rewrite(_merge(options[0], node), defs=defs, path=path)
        if nullable and "enum" not in merged:  # the API server refuses null for an enum anyway
            merged["nullable"] = True
        return merged

    out: JsonDict = {}
    for key, value in node.items():
        if key in _DROP or key == NOT_NULLABLE:
            continue
        if key == "default" and value is None:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "additionalProperties":
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, dict):
                out[key] = _rewrite(value, defs=defs, path=f"{path}.*")
            # False: the CRD forbids it; pruning drops unknown fields anyway.
        elif key == "properties":
            out[key] = {
                name: _rewrite(sub, defs=defs, path=f"{path}.{name}") for name, sub in value.items()
            }
        elif key == "items":
            out[key] = _rewrite(value, defs=defs, path=f"{path}[]")
        else:
            out[key] = copy.deepcopy(value)
    if "const" in node and "type" not in out:
        out["type"] = _json_type(node["const"], path)
    first = [key for key in ("type", "description") if key in out]
    return {key: out[key] for key in [*first, *sorted(set(out) - set(first))]}


def _json_type(value: object, path: str) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    raise SchemaError(f"{path}: const {value!r} has no scalar type")


_FORBIDDEN = ("$ref", "$defs", "anyOf", "oneOf", "allOf", "title", "const", "examples")


def check_structural(node: JsonDict, path: str = "") -> None:
    """Raise SchemaError unless `node` is structural in the way crdgen produces it."""
    for key in _FORBIDDEN:
        if key in node:
            raise SchemaError(f"{path or '<root>'}: {key} is not allowed in a structural schema")
    if node.get("additionalProperties") is False:
        raise SchemaError(f"{path}: additionalProperties: false is not allowed")
    if "default" in node and node["default"] is None:
        raise SchemaError(f"{path}: default: null is not allowed")
    untyped = node.get("x-kubernetes-preserve-unknown-fields") or node.get(INT_OR_STRING)
    if "type" not in node and not untyped:
        raise SchemaError(f"{path or '<root>'}: every schema needs a type")
    for name, sub in node.get("properties", {}).items():
        check_structural(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        check_structural(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        check_structural(node["additionalProperties"], f"{path}.*")
