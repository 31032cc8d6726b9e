"""charts/mlxfleet values: every key has a schema entry that says what it is, and a README row."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[3] / "charts" / "mlxfleet"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def _closed(node: dict[str, Any]) -> bool:
    """A schema object whose keys are ours (not a free-form map such as labels or config)."""
    return node.get("type") == "object" and node.get("additionalProperties") is False


def _descend(path: str, node: dict[str, Any]) -> bool:
    """Keys below `path` are documented one by one (container resources are documented whole)."""
    return _closed(node) and not path.endswith("resources")


def schema_keys(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for key, sub in node.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        yield here, sub
        if _descend(here, sub):
            yield from schema_keys(sub, here)


def value_keys(values: dict[str, Any], node: dict[str, Any], path: str = "") -> Iterator[str]:
    for key, value in values.items():
        here = f"{path}.{key}" if path else key
        yield here
        sub = node.get("properties", {}).get(key, {})
        if isinstance(value, dict) and _descend(here, sub):
            yield from value_keys(value, sub, here)


def test_schema_refuses_unknown_keys_everywhere() -> None:
    assert SCHEMA["additionalProperties"] is False
    for path, node in schema_keys(SCHEMA):
        if node.get("properties"):
            assert node.get("additionalProperties") is False, path


def test_every_value_is_in_the_schema_with_a_description() -> None:
    described = {path: node.get("description", "") for path, node in schema_keys(SCHEMA)}
    for path in value_keys(VALUES, SCHEMA):
        assert path in described, f"{path} is in values.yaml but not in values.schema.json"
        assert len(described[path]) > 10, f"{path} has no description in values.schema.json"


def test_every_schema_key_has_a_default_in_values_yaml() -> None:
    assert set(value_keys(VALUES, SCHEMA)) == {path for path, _ in schema_keys(SCHEMA)}


def test_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    leaves = [path for path, node in schema_keys(SCHEMA) if not _descend(path, node)]
    missing = [path for path in leaves if f"`{path}`" not in readme]
    assert missing == []
