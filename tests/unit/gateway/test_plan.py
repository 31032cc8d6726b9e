"""Route plans: rule matching on request traits, weighted splits over ready backends, fallback."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from mlxfleet_agent import contract
from mlxfleet_agent.dataplane import routing
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


def _capped(name: str, *, max_tokens: int | None, context: int = 8192) -> mdep.ModelDeployment:
    md = deployment(name)
    spec = md.spec.model_copy(
        update={
            "context_length": context,
            "server": md.spec.server.model_copy(update={"max_tokens": max_tokens}),
        }
    )
    return md.model_copy(update={"spec": spec})


@pytest.mark.parametrize(
    ("max_tokens", "context", "asked", "expected"),
    [
        pytest.param(None, 8192, None, 512, id="no-caps: mlx_lm's default"),
        pytest.param(None, 300, None, 300, id="no-caps: within the context"),
        pytest.param(4000, 8192, None, 4000, id="slot-cap: what it generates uncapped"),
        pytest.param(4000, 8192, 16, 16, id="asked-below-the-cap"),
        pytest.param(4000, 8192, 9000, 4000, id="asked-above-the-cap: clamped"),
        pytest.param(None, 2048, 9000, 2048, id="asked-above-the-context: clamped"),
    ],
)
def test_a_deployment_reserves_what_its_slot_lets_a_request_generate(
    max_tokens: int | None, context: int, asked: int | None, expected: int
) -> None:
    """Issue 22 item 5: a request without a cap reserved 256 tokens while the slot let it
    generate `maxTokens`; the reservation is now what the agent's data plane enforces."""
    dep = catalog.deployment(_capped("d", max_tokens=max_tokens, context=context), {})
    assert dep.completion_tokens(asked) == expected
    routing_body: dict[str, Any] = {"max_tokens": asked} if asked is not None else {}
    spec = contract.SlotSpec.model_validate(
        {
            "source": "file:///m/x",
            "servedName": "d",
            "contextLength": context,
            "server": {"maxTokens": max_tokens},
        }
    )
    routing.limit_tokens(routing_body, spec)
    assert routing_body["max_tokens"] == expected  # the same number the agent writes


def test_a_plan_reserves_the_most_any_of_its_backends_allows() -> None:
    cat = catalog.build(
        [_capped("small", max_tokens=100), _capped("big", max_tokens=4000)],
        [
            route(
                {
                    "rules": [{"name": "r", "backends": [{"deployment": "small"}]}],
                    "fallback": {"backends": [{"deployment": "big"}], "when": ["Unavailable"]},
                }
            ),
            route(
                {
                    "rules": [
                        {
                            "name": "r",
                            "backends": [
                                {"external": {"url": "https://api.example.com/v1", "model": "m"}}
                            ],
                        }
                    ]
                },
                name="ext",
            ),
        ],
        nodes={},
    )
    chat = cat.resolve([NS], "chat")
    assert chat is not None
    p = plan.plan(chat, req(), rng=lambda: 0.0)
    assert p.completion_tokens(None, external_default=256) == 4000  # the fallback may serve it
    assert p.completion_tokens(50, external_default=256) == 50
    ext = cat.resolve([NS], "ext")
    assert ext is not None
    p = plan.plan(ext, req("ext"), rng=lambda: 0.0)
    assert p.completion_tokens(None, external_default=256) == 256
    assert p.completion_tokens(9000, external_default=256) == 9000
