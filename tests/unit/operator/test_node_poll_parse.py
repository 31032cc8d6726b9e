"""A node's poll reads the node as the index parsed it from the same version of its body, and
parses the body itself only when the index holds another version (or none): at 500 nodes the
polls parsed every body again, 100 times a second."""

from __future__ import annotations

from typing import Any

import kopf

from mlxfleet_operator import settings as opsettings
from mlxfleet_operator.adapters import runtime
from mlxfleet_operator.handlers import indexes
from mlxfleet_operator.handlers import nodes as node_handlers
from tests.unit.operator.builders import node


def _wire(rv: str, url: str = "http://10.0.0.1:8470") -> kopf.Body:
    wire = node("n1").model_dump(mode="json", by_alias=True, exclude_none=True)
    wire["metadata"]["resourceVersion"] = rv
    wire["spec"]["agent"]["url"] = url
    return kopf.Body(wire)  # type: ignore[arg-type]


def test_the_poll_reuses_the_indexed_node_of_the_same_version_only() -> None:
    none: Any = None
    rt = runtime.Runtime(
        config=opsettings.OperatorSettings(), kube=none, fleet=none, publisher=none
    )
    index: Any = indexes.inference_nodes("n1", _wire("7"), kopf.Memo({runtime.KEY: rt}))
    indexed = index["n1"]
    assert node_handlers._parsed(_wire("7"), "n1", {"n1": [indexed]}) is indexed
    newer = node_handlers._parsed(_wire("8", "http://10.0.0.2:8470"), "n1", {"n1": [indexed]})
    assert newer is not indexed
    assert newer.spec.agent.url == "http://10.0.0.2:8470"
    alone = node_handlers._parsed(_wire("7"), "n1", None)
    assert alone == indexed
    assert alone is not indexed
