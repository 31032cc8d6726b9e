"""The pydantic JSON Schema -> structural CRD schema rewrite, on small hand-made inputs."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from mlxfleet_operator.api import schema


class _Inner(BaseModel):
    """Inner docs."""

    n: int = Field(gt=0, lt=10, description="bounded")


class _Outer(BaseModel):
    inner: _Inner = Field(description="field wins")
    maybe: _Inner | None = None
    tag: Literal["x"] = "x"
    free: dict[str, Any] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)


def test_rewrites_pydantic_output() -> None:
    out = schema.structural(_Outer.model_json_schema())
    props = out["properties"]
    assert props["inner"]["description"] == "field wins"
    assert props["inner"]["properties"]["n"] == {
        "type": "integer",
        "description": "bounded",
        "exclusiveMaximum": True,
        "exclusiveMinimum": True,
        "maximum": 10,
        "minimum": 0,
    }
    assert props["maybe"]["nullable"] is True
    assert props["maybe"]["type"] == "object"
    assert "default" not in props["maybe"]
    assert props["tag"]["enum"] == ["x"]
    assert props["tag"]["type"] == "string"
    assert props["free"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert props["labels"]["additionalProperties"] == {"type": "string"}
    assert "title" not in out
    assert "$defs" not in out


def test_field_rules_are_appended_to_the_models() -> None:
    defs = {"M": {"type": "object", "x-kubernetes-validations": [{"rule": "a", "message": "m"}]}}
    node = {
        "properties": {
            "m": {"$ref": "#/$defs/M", "x-kubernetes-validations": [{"rule": "b", "message": "n"}]}
        },
        "type": "object",
        "$defs": defs,
    }
    out = schema.structural(node)
    assert [r["rule"] for r in out["properties"]["m"]["x-kubernetes-validations"]] == ["a", "b"]


def test_not_nullable_marker() -> None:
    node = {
        "type": "object",
        "properties": {
            "x": {"anyOf": [{"type": "integer"}, {"type": "null"}], schema.NOT_NULLABLE: True}
        },
    }
    assert schema.structural(node)["properties"]["x"] == {"type": "integer"}


@pytest.mark.parametrize(
    ("node", "error"),
    [
        pytest.param(
            {"anyOf": [{"type": "integer"}, {"type": "string"}]}, "union", id="real-union"
        ),
        pytest.param({"$ref": "#/$defs/Missing"}, "cannot resolve", id="dangling-ref"),
        pytest.param({"allOf": [{"type": "string"}, {"minLength": 1}]}, "allOf", id="all-of"),
        pytest.param({"description": "no type"}, "needs a type", id="untyped"),
    ],
)
def test_unsupported_constructs_raise(node: dict[str, Any], error: str) -> None:
    with pytest.raises(schema.SchemaError, match=error):
        schema.structural(node)
