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
from tests.unit.operator.builders import kopf_body, node


def _wire(rv: str, url: str = "http://10.0.0.1:8470") -> kopf.Body:
    wire = node("n1").model_dump(mode="json", by_alias=True, exclude_none=True)
    wire["metadata"]["resourceVersion"] = rv
    wire["spec"]["agent"]["url"] = url
    return kopf_body(wire)


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


def test_the_index_drops_managed_fields_from_the_body_kopf_keeps() -> None:
    """kopf keeps the last body of every object it runs a timer for; managedFields were 15 MB
    of them at 500 x 1,000 and nothing reads them: the index drops them from kopf's own dict,
    and the rest of the body stays as it came."""
    none: Any = None
    rt = runtime.Runtime(
        config=opsettings.OperatorSettings(), kube=none, fleet=none, publisher=none
    )
    wire = node("n1").model_dump(mode="json", by_alias=True, exclude_none=True)
    wire["metadata"]["resourceVersion"] = "7"
    wire["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    body = kopf_body(wire)
    index: Any = indexes.inference_nodes("n1", body, kopf.Memo({runtime.KEY: rt}))
    assert "managedFields" not in wire["metadata"]  # kopf's dict, not a copy
    assert "managedFields" not in body.metadata
    assert wire["metadata"]["resourceVersion"] == "7"
    assert index["n1"].metadata.resource_version == "7"
    md = {"metadata": {"name": "chat", "namespace": "ns", "managedFields": [{}]}, "spec": {}}
    indexes.deployments(namespace="ns", name="chat", body=kopf_body(md))
    assert "managedFields" not in md["metadata"]
