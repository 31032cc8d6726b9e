"""What the operator creates for a ModelDeployment is its own, and only that: an existing Service
with the deployment's name is never adopted, changed or deleted (`ServiceConflict`); names of any
allowed length (up to 253 characters) get bounded Service names and label values, and work end to
end (slots, Service, EndpointSlices, SwapPlan, delete)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from mlxfleet_operator.core.kit import naming
from tests.e2e.conftest import E2E, Agents, Operator, condition, is_true, wait_for

pytestmark = [pytest.mark.cluster]

CONFLICT_WAIT = 45.0


def user_service(e2e: E2E, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": e2e.namespace, "labels": {"app": "my-own-chat"}},
        "spec": {"selector": {"app": "my-own-chat"}, "ports": [{"port": 8080, "protocol": "TCP"}]},
    }


def service_view(svc: dict[str, Any]) -> dict[str, Any]:
    meta, spec = svc["metadata"], svc["spec"]
    return {
        "uid": meta["uid"],
        "labels": meta.get("labels"),
        "ownerReferences": meta.get("ownerReferences"),
        "ports": [(p["port"], p.get("name")) for p in spec["ports"]],
        "selector": spec.get("selector"),
    }


def test_existing_service_is_never_adopted_changed_or_deleted(e2e: E2E, operator: Operator) -> None:
    e2e.kubectl("apply", "-f", "-", input=json.dumps(user_service(e2e, "chat")))
    before = service_view(e2e.get("service", "chat"))
    e2e.apply(e2e.unplaced("chat"))
    md = wait_for(
        "ServiceConflict",
        lambda: (d := e2e.get("mdep", "chat")) and is_true(d, "Stalled") and d,
        timeout=CONFLICT_WAIT,
    )
    ready = condition(md, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ServiceConflict")
    assert f"Service {e2e.namespace}/chat" in ready["message"]
    assert md["status"].get("endpoint") is None  # the address is someone else's
    time.sleep(3)  # several reconciles later, still untouched
    assert service_view(e2e.get("service", "chat")) == before
    assert not [s for s in e2e.list("endpointslices") if s["metadata"]["name"].startswith("chat-")]
    e2e.kubectl("-n", e2e.namespace, "delete", "mdep", "chat", "--timeout=60s")
    assert service_view(e2e.get("service", "chat")) == before
    # the user's Service goes: the next deployment of that name publishes its own
    e2e.kubectl("-n", e2e.namespace, "delete", "service", "chat")
    e2e.apply(e2e.unplaced("chat"))
    ours = wait_for("own Service", lambda: e2e.get("service", "chat"), timeout=CONFLICT_WAIT)
    owner = ours["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("ModelDeployment", "chat")
    assert owner["uid"] == e2e.get("mdep", "chat")["metadata"]["uid"]
    md = wait_for("Ready", lambda: (d := e2e.get("mdep", "chat")) and is_true(d, "Ready") and d)
    assert md["status"]["endpoint"] == f"http://chat.{e2e.namespace}.svc:80"
    operator.assert_alive()


def test_service_of_another_deployment_is_not_taken_over(e2e: E2E, operator: Operator) -> None:
    """A Service made by the operator for one deployment is not another deployment's."""
    e2e.apply(e2e.unplaced("first"))
    svc = wait_for("first's Service", lambda: e2e.get("service", "first"), timeout=CONFLICT_WAIT)
    first_uid = e2e.get("mdep", "first")["metadata"]["uid"]
    # someone copies it under the name the second deployment will want
    copy = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "second",
            "namespace": e2e.namespace,
            "labels": svc["metadata"]["labels"],
            "ownerReferences": svc["metadata"]["ownerReferences"],
        },
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }
    e2e.kubectl("apply", "-f", "-", input=json.dumps(copy))
    e2e.apply(e2e.unplaced("second"))
    md = wait_for(
        "ServiceConflict",
        lambda: (d := e2e.get("mdep", "second")) and is_true(d, "Stalled") and d,
        timeout=CONFLICT_WAIT,
    )
    assert condition(md, "Ready")["reason"] == "ServiceConflict"
    e2e.kubectl("-n", e2e.namespace, "delete", "mdep", "second", "--timeout=60s")
    kept = e2e.get("service", "second")
    assert kept["metadata"]["ownerReferences"][0]["uid"] == first_uid
    operator.assert_alive()


@pytest.mark.mlx
def test_long_names_work_end_to_end(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, model_b: Path
) -> None:
    name = f"{'a' * 60}.{'b' * 60}.{'c' * 60}"  # 182 characters: a valid object name
    agent = agents.start("a")
    node = e2e.register(agent)
    wait_for("node Ready", lambda: is_true(e2e.get("inode", node, namespaced=False), "Ready"))
    e2e.apply(e2e.deployment(name, model_a, replicas=1))
    md = wait_for("Ready", lambda: (d := e2e.get("mdep", name)) and is_true(d, "Ready") and d)
    service = naming.service_name(name)
    assert len(service) <= 63
    assert md["status"]["endpoint"] == f"http://{service}.{e2e.namespace}.svc:80"
    svc = e2e.get("service", service)
    assert svc["metadata"]["annotations"]["mlxfleet.io/deployment-name"] == name
    assert all(len(v) <= 63 for v in svc["metadata"]["labels"].values())
    slices = [
        s
        for s in e2e.list("endpointslices")
        if s["metadata"]["labels"].get("kubernetes.io/service-name") == service
    ]
    assert [len(s["endpoints"]) for s in slices] == [1]
    # the scale subresource's selector selects exactly this deployment's objects
    scale = json.loads(e2e.kubectl("get", "--raw",
                                   f"/apis/mlxfleet.io/v1alpha1/namespaces/{e2e.namespace}"
                                   f"/modeldeployments/{name}/scale"))  # fmt: skip
    selector = scale["status"]["selector"]
    assert selector == md["status"]["selector"]
    selected = e2e.kubectl("-n", e2e.namespace, "get", "services,endpointslices", "-l", selector,
                           "-o", "name").split()  # fmt: skip
    assert sorted(selected) == sorted(
        [f"service/{service}"]
        + [f"endpointslice.discovery.k8s.io/{s['metadata']['name']}" for s in slices]
    )
    placement = md["status"]["placements"][0]
    client = openai.OpenAI(base_url=placement["endpoint"] + "/v1", api_key="-", max_retries=0)
    reply = client.completions.create(model=name, prompt="hi", max_tokens=4)
    assert reply.choices[0].text is not None
    # a model change creates a (labelled) SwapPlan that completes
    e2e.apply(e2e.deployment(name, model_b, replicas=1))
    plan = wait_for("SwapPlan", lambda: e2e.get("mdep", name).get("status", {}).get("swapPlan"))
    done = wait_for(
        "SwapPlan Completed",
        lambda: (
            (p := e2e.get("swp", plan)) and p.get("status", {}).get("phase") == "Completed" and p
        ),
        timeout=240,
    )
    assert all(len(v) <= 63 for v in done["metadata"]["labels"].values())
    plans = e2e.kubectl("-n", e2e.namespace, "get", "swp", "-l", selector, "-o", "name")
    assert plans.split() == [f"swapplan.mlxfleet.io/{plan}"]
    slot = naming.slot_name(e2e.namespace, name)
    assert [s["source"] for s in agent.state()["slots"] if s["name"] == slot] == [
        f"file://{model_b}"
    ]
    e2e.kubectl("-n", e2e.namespace, "delete", "mdep", name, "--timeout=60s")
    wait_for("slot removed", lambda: all(s["name"] != slot for s in agent.state()["slots"]))
    assert e2e.get("service", service) == {}
    operator.assert_alive()


def colliding_names(namespace: str) -> tuple[str, str]:
    """Two deployment names (at most 63 characters: valid Service names and label values as they
    are) whose agent slot names are equal: the same 54-character prefix and the same 32-bit
    hash, found by a birthday search over ~10^5 names."""
    seen: dict[str, str] = {}
    prefix = "chat-" + "x" * 40 + "-"
    for i in range(10_000_000):
        name = f"{prefix}{i}"
        slot = naming.slot_name(namespace, name)
        if slot in seen:
            return seen[slot], name
        seen[slot] = name
    raise AssertionError("no collision found")


@pytest.mark.mlx
def test_a_slot_name_collision_is_detected_never_served_twice(
    e2e: E2E, agents: Agents, operator: Operator, model_a: Path, model_b: Path
) -> None:
    first, second = colliding_names(e2e.namespace)
    agent = agents.start("a")
    node = e2e.register(agent)
    wait_for("node Ready", lambda: is_true(e2e.get("inode", node, namespaced=False), "Ready"))
    e2e.apply(e2e.deployment(first, model_a, replicas=1))
    wait_for("first Ready", lambda: is_true(e2e.get("mdep", first), "Ready"))
    slot = naming.slot_name(e2e.namespace, first)
    before = [s for s in agent.state()["slots"] if s["name"] == slot]
    e2e.apply(e2e.deployment(second, model_b, replicas=1))
    md = wait_for(
        "second Stalled",
        lambda: (d := e2e.get("mdep", second)) and is_true(d, "Stalled") and d,
        timeout=60,
    )
    ready = condition(md, "Ready")
    assert ready["reason"] == "SlotNameConflict"
    assert first in ready["message"]
    time.sleep(3)
    after = [s for s in agent.state()["slots"] if s["name"] == slot]
    assert [(s["servedName"], s["source"]) for s in after] == [
        (s["servedName"], s["source"]) for s in before
    ]
    assert is_true(e2e.get("mdep", first), "Ready")
    # deleting the one that lost leaves the other's slot alone
    e2e.kubectl("-n", e2e.namespace, "delete", "mdep", second, "--timeout=60s")
    time.sleep(2)
    assert [s["servedName"] for s in agent.state()["slots"] if s["name"] == slot] == [first]
    operator.assert_alive()
