"""Route plans: rule matching on request traits, weighted splits over ready backends, fallback."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from mlxfleet_gateway.core import catalog, errors, plan, traits
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.api import modelroute as mroute

NS = "team-a"


NODES = {f"n{i}": b"" for i in range(10)}  # every node approved, no fleet key


def deployment(name: str, *, ready: int = 1, served: str | None = None) -> mdep.ModelDeployment:
    return mdep.ModelDeployment.model_validate(
        {
            "metadata": {"name": name, "namespace": NS},
            "spec": {"model": {"source": "file:///m/x", "servedName": served or name}},
            "status": {
                "placements": [
                    {"node": f"n{i}", "phase": "Ready", "ready": True, "endpoint": f"http://n{i}:1"}
                    for i in range(ready)
                ]
            },
        }
    )


def route(spec: dict[str, Any], name: str = "chat") -> mroute.ModelRoute:
    return mroute.ModelRoute.model_validate(
        {"metadata": {"name": name, "namespace": NS}, "spec": spec}
    )


def req(model: str = "chat", **kw: Any) -> traits.Traits:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    body.update(kw.pop("body", {}))
    return traits.traits(body, kw.pop("headers", {}))


CANARY = {
    "names": ["chat", "auto"],
    "rules": [
        {
            "name": "code",
            "match": {"headers": [{"name": "x-mlxfleet-task", "values": ["code"]}]},
            "backends": [{"deployment": "coder"}],
        },
        {"name": "tools", "match": {"hasTools": True}, "backends": [{"deployment": "coder"}]},
        {"name": "big", "match": {"minPromptTokens": 500}, "backends": [{"deployment": "big"}]},
        {"name": "auto", "match": {"models": ["auto"]}, "backends": [{"deployment": "small"}]},
        {
            "name": "default",
            "backends": [
                {"deployment": "stable", "weight": 90},
                {"deployment": "canary", "weight": 10},
            ],
        },
    ],
    "fallback": {
        "when": ["Unavailable", "Failed"],
        "backends": [{"name": "cloud", "external": {"url": "https://x.example/v1", "model": "m"}}],
    },
}


def cat(*deps: mdep.ModelDeployment, spec: dict[str, Any] = CANARY) -> catalog.Catalog:
    return catalog.build(deps, [route(spec)], nodes=NODES)


def first_rule(c: catalog.Catalog, r: traits.Traits) -> plan.Plan:
    found = c.resolve([NS], r.model)
    assert found is not None
    return plan.plan(found, r, rng=random.Random(1).random)


ALL = [deployment(n) for n in ("coder", "big", "small", "stable", "canary")]


@pytest.mark.parametrize(
    ("request_", "rule", "backend"),
    [
        pytest.param(req(headers={"x-mlxfleet-task": "code"}), "code", "coder", id="header"),
        pytest.param(req(headers={"x-mlxfleet-task": "chat"}), "default", None, id="other-header"),
        pytest.param(
            req(body={"tools": [{"type": "function", "function": {"name": "f"}}]}),
            "tools",
            "coder",
            id="tools",
        ),
        pytest.param(req(body={"tools": []}), "default", None, id="empty-tools"),
        pytest.param(
            req(body={"messages": [{"role": "user", "content": "x" * 2400}]}),
            "big",
            "big",
            id="prompt-size",
        ),
        pytest.param(req("auto"), "auto", "small", id="model-auto"),
    ],
)
def test_the_first_matching_rule_wins(
    request_: traits.Traits, rule: str, backend: str | None
) -> None:
    p = first_rule(cat(*ALL), request_)
    assert p.rule == rule
    assert p.primary is not None
    if backend is not None:
        assert p.primary.name == backend
    assert [s.name for s in p.fallback] == ["cloud"]


def test_canary_split_follows_the_weights() -> None:
    c = cat(*ALL)
    found = c.resolve([NS], "chat")
    assert found is not None
    r = random.Random(7)
    picks = Counter(
        plan.plan(found, req(), rng=r.random).primary.name  # type: ignore[union-attr]
        for _ in range(20000)
    )
    assert abs(picks["canary"] / 20000 - 0.10) < 0.01, picks


def test_weights_count_over_ready_backends_only() -> None:
    c = cat(*[d for d in ALL if d.metadata.name != "canary"], deployment("canary", ready=0))
    found = c.resolve([NS], "chat")
    assert found is not None
    r = random.Random(3)
    names = {plan.plan(found, req(), rng=r.random).primary.name for _ in range(500)}  # type: ignore[union-attr]
    assert names == {"stable"}


def test_no_ready_backend_keeps_the_intended_primary_and_the_fallback() -> None:
    c = cat(deployment("stable", ready=0), deployment("canary", ready=0))
    p = first_rule(c, req())
    assert p.primary is not None
    assert not p.primary.target.ready
    assert p.falls_back_on(mroute.FallbackWhen.UNAVAILABLE)
    assert not p.falls_back_on(mroute.FallbackWhen.SATURATED)


def test_a_missing_deployment_has_no_primary() -> None:
    p = first_rule(cat(), req(headers={"x-mlxfleet-task": "code"}))
    assert p.primary is None
    assert p.fallback


def test_no_rule_matches_is_404() -> None:
    spec = {
        "rules": [
            {
                "name": "only-tools",
                "match": {"hasTools": True},
                "backends": [{"deployment": "coder"}],
            }
        ]
    }
    c = catalog.build([deployment("coder")], [route(spec)], nodes=NODES)
    found = c.resolve([NS], "chat")
    assert found is not None
    with pytest.raises(errors.GatewayError) as info:
        plan.plan(found, req(), rng=random.random)
    assert info.value.status == 404


def test_a_plain_deployment_plans_to_itself() -> None:
    c = catalog.build([deployment("tiny", served="tiny-chat")], [], nodes=NODES)
    found = c.resolve([NS], "tiny-chat")
    assert found is not None
    p = plan.plan(found, req("tiny-chat"), rng=random.random)
    assert p.route is None
    assert p.primary is not None
    assert p.primary.name == "tiny"
    assert p.fallback == ()
