"""`ownership.covers` and `ownership.inherited`.

`covers`: the publish resync applies an owned Service or EndpointSlice again only when the
object read is not already as the operator would write it (issue 12: every unchanged one was
applied every 5 minutes). The server's defaults and other managers' fields do not count; a
changed, missing or extra item of a list does. `inherited`: an object of a predecessor of the
same name, whose ownerReferences are replaced when the new deployment takes it over."""

from __future__ import annotations

from typing import Any

from mlxfleet_operator.adapters import ownership

WANTED = {
    "metadata": {"name": "s", "labels": {"a": "1"}},
    "ports": [{"name": "http", "port": 80}],
    "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True}}],
}
FOUND = {
    "metadata": {"name": "s", "labels": {"a": "1", "other": "x"}, "uid": "u", "generation": 3},
    "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}],
    "endpoints": [
        {"addresses": ["10.0.0.1"], "conditions": {"ready": True, "serving": True}},
    ],
}


def test_defaults_and_others_fields_do_not_count() -> None:
    assert ownership.covers(FOUND, WANTED)


def test_a_changed_missing_or_extra_value_does() -> None:
    ready = {**FOUND, "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": False}}]}
    assert not ownership.covers(ready, WANTED)
    extra = {**FOUND, "endpoints": [*FOUND["endpoints"], {"addresses": ["10.0.0.2"]}]}
    assert not ownership.covers(extra, WANTED)
    assert not ownership.covers({**FOUND, "endpoints": []}, WANTED)
    no_label = {**FOUND, "metadata": {"name": "s", "labels": {"other": "x"}}}
    assert not ownership.covers(no_label, WANTED)
    assert not ownership.covers({"metadata": FOUND["metadata"], "ports": FOUND["ports"]}, WANTED)
    assert not ownership.covers({**FOUND, "ports": {"name": "http"}}, WANTED)
    assert not ownership.covers({**FOUND, "ports": [{"name": "http", "port": "80"}]}, WANTED)


def _deployment(uid: str) -> dict[str, Any]:
    return {"metadata": {"name": "chat", "namespace": "ns", "uid": uid}}


def _published(*owner_uids: str) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {"app.kubernetes.io/managed-by": ownership.MANAGED_BY},
            "ownerReferences": [
                {
                    "apiVersion": "mlxfleet.io/v1alpha1",
                    "kind": "ModelDeployment",
                    "name": "chat",
                    "uid": uid,
                    "controller": True,
                }
                for uid in owner_uids
            ],
        }
    }


def test_a_predecessors_object_is_inherited_ours_is_not_and_a_strangers_is_neither() -> None:
    assert ownership.inherited(_deployment("new"), _published("old"))
    assert not ownership.inherited(_deployment("new"), _published("new"))
    stranger = {"metadata": {"ownerReferences": _published("old")["metadata"]["ownerReferences"]}}
    assert not ownership.inherited(_deployment("new"), stranger)  # no managed-by label


def test_an_agents_scrape_target_is_owned_by_its_inferencenode() -> None:
    """The metrics Service of an agent (publishing.of_agent) belongs to its InferenceNode; a
    ModelDeployment of the same name does not own it, nor the other way round."""
    from mlxfleet_operator.adapters import publishing
    from mlxfleet_operator.api import resources

    node = {
        "apiVersion": resources.API_VERSION,
        "kind": resources.INFERENCE_NODE.kind,
        "metadata": {"name": "mac-1", "uid": "node-uid"},
    }
    pub = publishing.of_agent(node, namespace="mlxfleet-system", scheme="https", port=8443)
    assert pub.service == "mlxfleet-agent-mac-1"
    assert pub.headless
    assert pub.port_name == "https-metrics"
    assert pub.annotations == {publishing.NODE_ANNOTATION: "mac-1"}
    made = {"metadata": {"labels": dict(pub.labels), "ownerReferences": pub.owner_references()}}
    assert ownership.owns(node, made)
    namesake = {
        **node,
        "kind": resources.MODEL_DEPLOYMENT.kind,
        "metadata": {"name": "mac-1", "uid": "x"},
    }
    assert not ownership.owns(namesake, made)
    deployment_service = {
        "metadata": {
            "labels": {"app.kubernetes.io/managed-by": ownership.MANAGED_BY},
            "ownerReferences": [ownership.owner_reference(namesake)],
        }
    }
    assert not ownership.owns(node, deployment_service)
    assert "InferenceNode" in ownership.conflict_message("Service", deployment_service, node)
