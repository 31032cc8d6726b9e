"""The view: watched objects that do not parse are skipped and named, never a crash."""

from __future__ import annotations

import base64
import logging
from typing import Any

import pytest

from mlxfleet_gateway import view
from mlxfleet_gateway.core import balancer, keys


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


GOOD: dict[str, Any] = {
    "metadata": {"name": "chat", "namespace": "a"},
    "spec": {"model": {"source": "file:///m/x"}},
    "status": {
        "placements": [
            {"node": "n1", "phase": "Ready", "ready": True, "endpoint": "http://10.0.0.1:8471"}
        ]
    },
}
BAD = {"metadata": {"name": "broken", "namespace": "a"}, "spec": {"model": {"source": "ftp://x"}}}


def node(name: str, approved: bool | None = None, **status: object) -> dict[str, object]:
    spec: dict[str, object] = {"agent": {"url": f"https://{name}:8470"}}
    if approved is not None:
        spec["approved"] = approved
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def _ready(v: view.View) -> bool:
    """`v.ready` read afresh (mypy would keep an asserted property's value across calls)."""
    return v.ready


def test_bad_objects_are_skipped_and_named() -> None:
    v = view.View(balancer.Balancer())
    assert not v.ready
    token = keys.new_key()
    v.replace("deployments", {"a/chat": GOOD, "a/broken": BAD})
    v.replace("routes", {"a/r": {"metadata": {"name": "r", "namespace": "a"}, "spec": {}}})
    v.replace(
        "api-keys",
        {
            "s/good": {
                "metadata": {"name": "good"},
                "data": {"keyHash": b64(keys.hash_key(token)), "namespaces": b64("a")},
            },
            "s/bad": {"metadata": {"name": "bad"}, "data": {"keyHash": b64("nope")}},
            "s/garbage": {"metadata": {"name": "garbage"}, "data": {"keyHash": "%%%not base64"}},
        },
    )
    v.replace("provider-keys", {})
    v.replace("budgets", {})
    assert not _ready(v)  # the nodes too
    v.replace("nodes", {"/n1": node("n1")})
    assert _ready(v)
    assert set(v.problems) == {
        "deployments/a/broken",
        "routes/a/r",
        "api-keys/s/bad",
        "api-keys/s/garbage",
    }
    assert "keyHash" in v.problems["api-keys/s/bad"]
    assert v.catalog.resolve(["a"], "chat") is not None
    assert len(v.keys) == 1
    assert [c.id for c in v.candidates()] == ["a/chat@n1"]
    assert set(v.balancer.states) == {"a/chat@n1"}
    v.replace("deployments", {"a/chat": GOOD})
    assert "deployments/a/broken" not in v.problems


def test_only_approved_nodes_take_requests_each_with_its_own_key() -> None:
    """A replica on a node that joined itself (approved: false) or that the gateway does not
    know is no candidate; each approved node's header is its own key, made once per node."""
    from mlxfleet_agent import contract

    fleet_key = "k" * 40
    v = view.View(balancer.Balancer(), fleet_key=fleet_key)
    two = {
        **GOOD,
        "status": {
            "placements": [
                {"node": n, "phase": "Ready", "ready": True, "endpoint": f"http://{n}:8471"}
                for n in ("n1", "rogue")
            ]
        },
    }
    v.replace("deployments", {"a/chat": two})
    assert v.candidates() == []  # no node seen yet: nothing
    v.replace("nodes", {"/n1": node("n1"), "/rogue": node("rogue", approved=False)})
    (only,) = v.candidates()
    assert only.id == "a/chat@n1"
    assert only.auth == b"Bearer " + contract.credentials.data_plane_key(fleet_key, "n1").encode()
    assert (
        only.auth != b"Bearer " + contract.credentials.data_plane_key(fleet_key, "rogue").encode()
    )
    version = v.version
    v.replace("nodes", {"/n1": node("n1", memory="64Gi"), "/rogue": node("rogue", approved=False)})
    assert v.version == version  # a status write changes no approval: nothing rebuilt
    v.replace("nodes", {"/n1": node("n1"), "/rogue": node("rogue", approved=True)})
    assert [c.id for c in v.candidates()] == ["a/chat@n1", "a/chat@rogue"]
    v.replace("nodes", {"/rogue": node("rogue", approved=True)})
    assert [c.id for c in v.candidates()] == ["a/chat@rogue"]  # n1 deleted: gone


def test_provider_keys_without_allowed_urls_and_the_backends_they_refuse_are_named() -> None:
    v = view.View(balancer.Balancer())
    backend = {
        "external": {
            "url": "http://127.0.0.1:47999/v1",
            "model": "gpt-4o-mini",
            "apiKeySecretRef": {"name": "openai", "key": "apiKey"},
        }
    }
    spec = {"rules": [{"name": "d", "backends": [backend]}]}
    v.replace("routes", {"a/r": {"metadata": {"name": "r", "namespace": "a"}, "spec": spec}})
    annotations = {"mlxfleet.io/allowed-namespaces": "a"}
    secret = {"metadata": {"name": "openai", "annotations": annotations}}
    v.replace("provider-keys", {"s/openai": {**secret, "data": {"apiKey": b64("sk-1")}}})
    assert "no usable mlxfleet.io/allowed-urls" in v.problems["provider-keys/s/openai"]
    assert "has no mlxfleet.io/allowed-urls" in v.problems["external:a/r/external-0"]
    annotations["mlxfleet.io/allowed-urls"] = "https://api.openai.com/v1"
    v.replace("provider-keys", {"s/openai": {**secret, "data": {"apiKey": b64("sk-1")}}})
    assert "provider-keys/s/openai" not in v.problems
    assert "may not be sent to http://127.0.0.1:47999/v1" in v.problems["external:a/r/external-0"]
    (target,) = v.catalog.externals()
    assert target.api_key is None


def test_replicas_out_of_routing_are_logged_with_why_once_per_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A placement the operator reports busy (not ready, with why) gets no requests: the view
    logs it leaving routing with the reason once, and coming back once."""
    why = "busy, out of routing: a request has waited 75s for its first token"
    busy = {
        "node": "n2",
        "phase": "Ready",
        "ready": False,
        "endpoint": "http://10.0.0.2:8471",
        "message": why,
    }
    two = {**GOOD, "status": {"placements": [*GOOD["status"]["placements"], busy]}}
    v = view.View(balancer.Balancer())
    v.replace("nodes", {"/n1": node("n1"), "/n2": node("n2")})
    caplog.set_level(logging.INFO, logger="mlxfleet_gateway.view")
    v.replace("deployments", {"a/chat": two})
    v.replace("deployments", {"a/chat": two})  # an unchanged status update: no second line
    assert v.unrouted == {"a/chat@n2": why}
    assert [c.id for c in v.candidates()] == ["a/chat@n1"]
    left = [r for r in caplog.records if r.getMessage() == "replica out of routing"]
    assert [(r.replica, r.why) for r in left] == [("a/chat@n2", why)]  # type: ignore[attr-defined]
    ready = {**busy, "ready": True, "message": None}
    v.replace("deployments", {"a/chat": {**GOOD, "status": {"placements": [ready]}}})
    assert v.unrouted == {}
    back = [r for r in caplog.records if r.getMessage() == "replica back in routing"]
    assert len(back) == 1
