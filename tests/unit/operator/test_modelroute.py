"""ModelRoute status (pure): backend readiness, the split in force and the kstatus verdict."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from mlxfleet_operator.api import conditions as cond
from mlxfleet_operator.api import modelroute as mroute
from mlxfleet_operator.core.modelroute import status as routestatus

NOW = datetime(2026, 5, 1, tzinfo=UTC)
EXTERNAL = {"name": "cloud", "external": {"url": "https://p.example/v1", "model": "m"}}


def route(*, fallback: bool = True) -> mroute.ModelRoute:
    spec: dict[str, Any] = {
        "names": ["chat"],
        "rules": [
            {"name": "code", "match": {"hasTools": True}, "backends": [{"deployment": "coder"}]},
            {
                "name": "default",
                "backends": [
                    {"deployment": "stable", "weight": 90},
                    {"deployment": "canary", "weight": 10},
                ],
            },
        ],
    }
    if fallback:
        spec["fallback"] = {"backends": [EXTERNAL]}
    return mroute.ModelRoute.model_validate(
        {"metadata": {"name": "chat", "namespace": "a", "generation": 3}, "spec": spec}
    )


def ready(status: mroute.ModelRouteStatus) -> cond.Condition:
    found = cond.find(status.conditions, cond.ConditionType.READY)
    assert found is not None
    return found


def test_all_ready_shows_the_configured_split() -> None:
    s = routestatus.status(route(), ready_replicas={"coder": 1, "stable": 2, "canary": 1}, now=NOW)
    assert ready(s).status is cond.ConditionStatus.TRUE
    assert (s.backends_ready, s.names, s.observed_generation) == ("4/4", ["chat"], 3)
    split = {(e.rule, e.backend): e.percent for e in s.split}
    assert split == {
        ("code", "coder"): 100.0,
        ("default", "stable"): 90.0,
        ("default", "canary"): 10.0,
    }
    kinds = {b.name: b.kind for b in s.backends}
    assert kinds["cloud"] is mroute.BackendKind.EXTERNAL


def test_a_canary_without_replicas_gets_no_traffic() -> None:
    s = routestatus.status(route(), ready_replicas={"coder": 1, "stable": 2, "canary": 0}, now=NOW)
    split = {(e.rule, e.backend): e.percent for e in s.split}
    assert (split[("default", "stable")], split[("default", "canary")]) == (100.0, 0.0)
    assert ready(s).status is cond.ConditionStatus.TRUE
    canary = next(b for b in s.backends if b.name == "canary")
    assert not canary.ready
    assert "no ready replica" in (canary.message or "")


@pytest.mark.parametrize(
    ("fallback", "replicas", "reason"),
    [
        pytest.param(True, {"coder": 0, "stable": 1, "canary": 1}, "FallbackOnly", id="fallback"),
        pytest.param(False, {"coder": 0, "stable": 1, "canary": 1}, "NoReadyBackend", id="none"),
        pytest.param(True, {"stable": 1, "canary": 1}, "BackendNotFound", id="missing"),
    ],
)
def test_verdicts(fallback: bool, replicas: dict[str, int], reason: str) -> None:
    s = routestatus.status(route(fallback=fallback), ready_replicas=replicas, now=NOW)
    assert (ready(s).status, ready(s).reason) == (cond.ConditionStatus.FALSE, reason)


SAMPLE = {
    "names": ["chat", "auto"],
    "rules": [
        {
            "name": "code",
            "match": {"headers": [{"name": "x-mlxfleet-task", "values": ["code"]}]},
            "backends": [{"deployment": "qwen3-coder"}],
        },
        {"name": "tools", "match": {"hasTools": True}, "backends": [{"deployment": "qwen3-coder"}]},
        {
            "name": "default",
            "backends": [
                {"deployment": "qwen3-8b", "weight": 90},
                {"deployment": "qwen3-8b-canary", "weight": 10},
            ],
        },
    ],
    "fallback": {
        "backends": [
            {
                "name": "cloud",
                "external": {
                    "url": "https://api.openai.com/v1",
                    "model": "gpt-4o-mini",
                    "apiKeySecretRef": {"name": "openai", "key": "apiKey"},
                },
            }
        ]
    },
}
ALLOWED = {
    mroute.PROVIDER_KEY_NAMESPACES: "team-b, team-a",
    mroute.PROVIDER_KEY_URLS: "https://api.openai.com/v1",
}
USABLE = routestatus.KeySeen(type=mroute.PROVIDER_KEY_TYPE, annotations=ALLOWED)


def keys(openai: routestatus.KeySeen | None) -> routestatus.ProviderKeys:
    return routestatus.ProviderKeys(namespace="mlxfleet-system", seen={"openai": openai})


def sample() -> mroute.ModelRoute:
    """manifests/samples/routes, applied with `-n team-a`."""
    return mroute.ModelRoute.model_validate(
        {"metadata": {"name": "chat", "namespace": "team-a", "generation": 1}, "spec": SAMPLE}
    )


def cloud(s: mroute.ModelRouteStatus) -> mroute.BackendStatus:
    return next(b for b in s.backends if b.name == "cloud")


def test_the_sample_applied_alone_reports_nothing_ready_and_says_each_problem_once() -> None:
    """The new-user repro: no deployments, no `openai` Secret (`kubectl apply -k
    manifests/samples/routes -n team-a`)."""
    s = routestatus.status(sample(), ready_replicas={}, keys=keys(None), now=NOW)
    assert routestatus.key_refs(sample()) == ["openai"]
    assert s.backends_ready == "0/5"
    assert not cloud(s).ready
    message = cloud(s).message
    assert message is not None
    assert "provider-key Secret openai not found" in message
    assert "team-a" in message
    assert {e.percent for e in s.split} == {0.0}  # nothing ready: no traffic anywhere
    found = ready(s)
    assert (found.status, found.reason) == (cond.ConditionStatus.FALSE, "BackendNotFound")
    parts = found.message.split("; ")
    assert len(parts) == len(set(parts)) == 4, parts
    assert parts[0] == "ModelDeployment qwen3-coder not found"
    assert any(p.startswith("provider-key Secret openai not found") for p in parts)


@pytest.mark.parametrize(
    "seen",
    [
        pytest.param(None, id="missing"),
        pytest.param(routestatus.KeySeen(type="Opaque", annotations=USABLE.annotations), id="type"),
        pytest.param(
            routestatus.KeySeen(
                type=mroute.PROVIDER_KEY_TYPE,
                annotations={**ALLOWED, mroute.PROVIDER_KEY_NAMESPACES: "b"},
            ),
            id="another namespace's",
        ),
    ],
)
def test_an_unusable_key_secret_reads_the_same_whatever_the_cause(
    seen: routestatus.KeySeen | None,
) -> None:
    """A route author learns only that no key usable by their namespace has that name."""
    s = routestatus.status(sample(), ready_replicas={}, keys=keys(seen), now=NOW)
    absent = routestatus.status(sample(), ready_replicas={}, keys=keys(None), now=NOW)
    assert (cloud(s).ready, cloud(s).message) == (False, cloud(absent).message)


def test_a_usable_key_secret_makes_the_fallback_ready() -> None:
    replicas = {"qwen3-coder": 0, "qwen3-8b": 0, "qwen3-8b-canary": 0}
    s = routestatus.status(sample(), ready_replicas=replicas, keys=keys(USABLE), now=NOW)
    assert (cloud(s).ready, cloud(s).message) == (True, None)
    assert (ready(s).reason, s.backends_ready) == ("FallbackOnly", "1/5")


@pytest.mark.parametrize(
    ("urls", "says"),
    [
        pytest.param(None, "has no mlxfleet.io/allowed-urls annotation", id="no allowed-urls"),
        pytest.param("https://api.example.com/v1", "may not be sent to", id="another host"),
    ],
)
def test_a_key_that_may_not_go_to_the_backends_url_is_not_usable(
    urls: str | None, says: str
) -> None:
    """The gateway sends a key only under its allowed-urls (`api.providerkeys`): so does status."""
    annotations = {mroute.PROVIDER_KEY_NAMESPACES: "team-a"}
    if urls is not None:
        annotations[mroute.PROVIDER_KEY_URLS] = urls
    seen = routestatus.KeySeen(type=mroute.PROVIDER_KEY_TYPE, annotations=annotations)
    s = routestatus.status(sample(), ready_replicas={}, keys=keys(seen), now=NOW)
    assert not cloud(s).ready
    assert says in (cloud(s).message or "")
    assert ready(s).reason == "BackendNotFound"


def test_a_key_secret_the_operator_cannot_look_at_is_not_ready_and_says_why() -> None:
    replicas = {"qwen3-coder": 1, "qwen3-8b": 1, "qwen3-8b-canary": 1}
    forbidden = routestatus.KeySeen(error="get Secret mlxfleet-system/openai: 403 Forbidden")
    s = routestatus.status(sample(), ready_replicas=replicas, keys=keys(forbidden), now=NOW)
    assert not cloud(s).ready
    assert cloud(s).message == (
        "cannot tell whether provider-key Secret openai is usable: "
        "get Secret mlxfleet-system/openai: 403 Forbidden"
    )
    assert (ready(s).reason, s.backends_ready) == ("Ready", "4/5")  # the rules are served


def test_an_external_backend_without_a_key_needs_no_secret() -> None:
    s = routestatus.status(route(), ready_replicas={"coder": 1, "stable": 1, "canary": 1}, now=NOW)
    assert (cloud(s).ready, cloud(s).message) == (True, None)
    assert routestatus.key_refs(route()) == []


def test_a_rule_with_no_ready_backend_gets_no_share() -> None:
    s = routestatus.status(route(), ready_replicas={"coder": 1, "stable": 0, "canary": 0}, now=NOW)
    split = {(e.rule, e.backend): e.percent for e in s.split}
    assert split == {
        ("code", "coder"): 100.0,
        ("default", "stable"): 0.0,
        ("default", "canary"): 0.0,
    }
