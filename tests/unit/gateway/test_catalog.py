"""The catalog: names resolve within the caller's namespaces only; routes win in a namespace."""

from __future__ import annotations

from typing import Any

import pytest

from mlxfleet_gateway.core import catalog
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.api import providerkeys as providers


def dep(ns: str, name: str, *, served: str, ready: bool = True) -> mdep.ModelDeployment:
    placements = [{"node": "n1", "phase": "Ready", "ready": True, "endpoint": "http://n1:8471"}]
    return mdep.ModelDeployment.model_validate(
        {
            "metadata": {"name": name, "namespace": ns},
            "spec": {"model": {"source": "file:///m/x", "servedName": served}, "maxConcurrency": 6},
            "status": {"placements": placements if ready else []},
        }
    )


def route(ns: str, name: str, spec: dict[str, Any]) -> mroute.ModelRoute:
    return mroute.ModelRoute.model_validate(
        {"metadata": {"name": name, "namespace": ns}, "spec": spec}
    )


def provider(*, namespaces: str, urls: str | None) -> providers.ProviderKey:
    annotations = {"mlxfleet.io/allowed-namespaces": namespaces}
    if urls is not None:
        annotations["mlxfleet.io/allowed-urls"] = urls
    found, _ = providers.from_secret("prov", annotations, {"apiKey": "sk-1"})
    return found


def external_route(ns: str, url: str) -> mroute.ModelRoute:
    backend = {"external": {"url": url, "model": "m", "apiKeySecretRef": {"name": "prov"}}}
    return route(ns, "r", {"rules": [{"name": "d", "backends": [backend]}]})


NODES = {"n1": b"Bearer k1"}  # the approved nodes and the header value each accepts

DEPS = [
    dep("team-a", "chat", served="chat"),
    dep("team-b", "chat", served="chat"),
    dep("team-b", "secret-model", served="secret-model"),
    dep("team-a", "cold", served="cold", ready=False),
]


def test_same_name_in_two_namespaces_resolves_per_scope() -> None:
    c = catalog.build(DEPS, [], nodes=NODES)
    a = c.resolve(["team-a"], "chat")
    b = c.resolve(["team-b"], "chat")
    assert a is not None
    assert a.deployment is not None
    assert a.deployment.namespace == "team-a"
    assert b is not None
    assert b.deployment is not None
    assert b.deployment.namespace == "team-b"
    both = c.resolve(["team-b", "team-a"], "chat")
    assert both is not None
    assert both.namespace == "team-b"


def test_nothing_outside_the_scope_is_visible() -> None:
    c = catalog.build(DEPS, [], nodes=NODES)
    assert c.resolve(["team-a"], "secret-model") is None
    assert [r.name for r in c.listed(["team-a"])] == ["chat"]  # cold is not ready: not listed
    assert {(r.namespace, r.name) for r in c.listed(["*"])} == {
        ("team-a", "chat"),
        ("team-b", "secret-model"),
    }


def test_a_route_name_wins_over_a_deployment_in_its_namespace() -> None:
    r = route("team-a", "chat", {"rules": [{"name": "d", "backends": [{"deployment": "cold"}]}]})
    c = catalog.build(DEPS, [r], nodes=NODES)
    found = c.resolve(["team-a"], "chat")
    assert found is not None
    assert found.route is not None
    assert [r.name for r in c.listed(["team-a"])] == ["chat"]
    backend = found.route.rules[0].backends[0]
    assert isinstance(backend.target, catalog.Deployment)
    assert not backend.target.ready


def test_replicas_carry_ids_urls_and_capacity() -> None:
    d = catalog.deployment(DEPS[0], NODES)
    assert d.capacity == 6
    assert d.replicas == (catalog.Replica("team-a/chat@n1", "n1", "http://n1:8471", b"Bearer k1"),)


def test_a_replica_on_a_node_not_approved_or_unknown_is_never_a_candidate() -> None:
    """A placement on a node the gateway does not know as approved (a Mac that joined itself,
    or any status a writer got wrong) is no replica."""
    assert catalog.deployment(DEPS[0], {}).replicas == ()
    assert catalog.deployment(DEPS[0], {"n2": b""}).replicas == ()
    c = catalog.build(DEPS, [], nodes={})
    assert c.resolve(["team-a"], "chat") is not None
    assert c.listed(["team-a"]) == []  # nothing ready anywhere


def test_provider_keys_are_used_only_where_they_are_allowed() -> None:
    spec = {
        "rules": [
            {
                "name": "d",
                "backends": [
                    {
                        "external": {
                            "url": "https://p.example/v1",
                            "model": "m",
                            "apiKeySecretRef": {"name": "prov"},
                        }
                    }
                ],
            }
        ]
    }
    ok = provider(namespaces="team-a", urls="https://p.example/v1")
    c = catalog.build(
        [], [route("team-a", "r", spec), route("team-b", "r", spec)], [ok], nodes=NODES
    )
    a = c.resolve(["team-a"], "r")
    b = c.resolve(["team-b"], "r")
    assert a is not None
    assert a.route is not None
    assert b is not None
    assert b.route is not None
    ta, tb = a.route.rules[0].backends[0].target, b.route.rules[0].backends[0].target
    assert isinstance(ta, catalog.External)
    assert ta.ready
    assert ta.api_key == "sk-1"
    assert isinstance(tb, catalog.External)
    assert not tb.ready
    assert tb.api_key is None
    assert "does not allow namespace team-b" in (tb.problem or "")
    assert ta.id == "external:team-a/r/external-0"
    missing = catalog.build([], [route("team-a", "r", spec)], [], nodes=NODES)
    m = missing.resolve(["team-a"], "r")
    assert m is not None
    assert m.route is not None
    target = m.route.rules[0].backends[0].target
    assert isinstance(target, catalog.External)
    assert "not found" in (target.problem or "")


@pytest.mark.parametrize(
    ("urls", "url", "why"),
    [
        pytest.param(
            None,
            "https://p.example/v1",
            "provider-key Secret prov has no mlxfleet.io/allowed-urls annotation",
            id="no allowed-urls: nowhere",
        ),
        pytest.param(
            "https://p.example/v1",
            "http://127.0.0.1:47999/v1",
            "provider-key Secret prov may not be sent to http://127.0.0.1:47999/v1",
            id="a listener on loopback",
        ),
        pytest.param(
            "https://p.example/v1",
            "https://p.example.evil.com/v1",
            "may not be sent to https://p.example.evil.com/v1",
            id="a look-alike host",
        ),
        pytest.param(
            "https://p.example/v1",
            "http://p.example/v1",
            "may not be sent to http://p.example/v1",
            id="plain http to an https prefix",
        ),
    ],
)
def test_a_key_is_never_attached_to_a_url_its_secret_does_not_allow(
    urls: str | None, url: str, why: str
) -> None:
    """The attack: a team allowed to use the fleet's key points its route at its own listener."""
    c = catalog.build(
        [], [external_route("team-a", url)], [provider(namespaces="*", urls=urls)], nodes=NODES
    )
    found = c.resolve(["team-a"], "r")
    assert found is not None
    assert found.route is not None
    target = found.route.rules[0].backends[0].target
    assert isinstance(target, catalog.External)
    assert target.api_key is None
    assert not target.ready
    assert why in (target.problem or "")
    assert [(t.id, t.problem) for t in c.externals()] == [(target.id, target.problem)]
