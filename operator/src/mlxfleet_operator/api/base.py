"""Pydantic base model for the custom resources, ObjectMeta, and CRD schema annotations.

`ApiModel` follows STYLE.md: camelCase aliases, validation by name and by alias, serialization by
alias, `extra="ignore"` (the API server adds fields; `forbid` would produce schemas CRDs reject).
`rule(...)` and `crd(...)` attach Kubernetes schema extensions (CEL `x-kubernetes-validations`,
list types, defaults) to a field or model; `schema.structural` carries them into the CRD.
May import: pydantic and the standard library. Called by: the kind modules and `schema`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

JsonDict = dict[str, Any]
INT_OR_STRING = "x-kubernetes-int-or-string"


class ApiModel(BaseModel):
    """Base of every CRD body model (spec, status and their parts)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
    )

    def to_wire(self) -> JsonDict:
        """The JSON body (camelCase, enums as strings, unset optional fields left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def cel_string(text: str) -> str:
    """`text` as a single-quoted CEL string literal (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def rule(
    expression: str,
    message: str,
    *,
    field_path: str | None = None,
    reason: str | None = None,
) -> JsonDict:
    """One CEL `x-kubernetes-validations` entry; `message` must name the offending field."""
    entry: JsonDict = {"rule": expression, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    if reason is not None:
        entry["reason"] = reason
    return entry


def crd(
    *rules: JsonDict,
    list_type: str | None = None,
    list_map_keys: tuple[str, ...] = (),
    default: Any = None,
    preserve_unknown_fields: bool = False,
    int_format: str | None = None,
    nullable: bool = True,
    int_or_string: bool = False,
) -> JsonDict:
    """Schema extensions for `Field(json_schema_extra=...)` or `ConfigDict(json_schema_extra=...)`.

    `nullable=False` keeps an optional field from accepting an explicit null in the CRD (for
    fields that cross-field CEL rules read). `int_or_string` marks an `int | str` field
    (`x-kubernetes-int-or-string`, as Kubernetes quantities are).
    """
    extra: JsonDict = {}
    if rules:
        extra["x-kubernetes-validations"] = list(rules)
    if list_type is not None:
        extra["x-kubernetes-list-type"] = list_type
    if list_map_keys:
        extra["x-kubernetes-list-map-keys"] = list(list_map_keys)
    if default is not None:
        extra["default"] = default
    if preserve_unknown_fields:
        extra["x-kubernetes-preserve-unknown-fields"] = True
    if not nullable:
        extra["x-mlxfleet-not-nullable"] = True
    if int_format is not None:
        extra["format"] = int_format
    if int_or_string:
        extra[INT_OR_STRING] = True
    return extra


class OwnerReference(ApiModel):
    """metav1.OwnerReference (the fields the operator reads)."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None


class ObjectMeta(ApiModel):
    """The parts of metav1.ObjectMeta the operator reads; everything else is ignored."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list)
