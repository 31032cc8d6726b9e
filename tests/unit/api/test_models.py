"""The pydantic models accept the samples and the base objects, and reject every invalid case."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from mlxfleet_agent import contract
from mlxfleet_operator.api import (
    base,
    conditions,
    deploymentspec,
    fields,
    inferencenode,
    modeldeployment,
    modelroute,
    resources,
    swapplan,
)
from tests.unit.api import cases

REPO = Path(__file__).resolve().parents[3]
MODELS: dict[str, type[BaseModel]] = {
    "ModelDeployment": modeldeployment.ModelDeployment,
    "InferenceNode": inferencenode.InferenceNode,
    "SwapPlan": swapplan.SwapPlan,
    "ModelRoute": modelroute.ModelRoute,
}


def _samples() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((REPO / "manifests" / "samples").rglob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] in MODELS]
    return docs


def test_every_kind_has_a_sample() -> None:
    assert sorted({d["kind"] for d in _samples()}) == sorted(MODELS)


def test_a_sample_is_sharded() -> None:  # scripts find it by a spec key containing "shard"
    sharded = [d for d in _samples() if any("shard" in k for k in d.get("spec", {}))]
    assert [d["kind"] for d in sharded] == ["ModelDeployment"]


def _contains(outer: Any, inner: Any) -> bool:
    """Every key and value of `inner` is in `outer` (recursively)."""
    if isinstance(inner, dict):
        return isinstance(outer, dict) and all(
            k in outer and _contains(outer[k], v) for k, v in inner.items()
        )
    if isinstance(inner, list):
        return (
            isinstance(outer, list)
            and len(outer) == len(inner)
            and all(_contains(o, i) for o, i in zip(outer, inner, strict=True))
        )
    return bool(outer == inner)


@pytest.mark.parametrize("doc", _samples(), ids=lambda d: d["kind"])
def test_samples_validate_and_round_trip(doc: dict[str, Any]) -> None:
    obj = MODELS[doc["kind"]].model_validate(doc)
    wire = obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert _contains(wire["spec"], doc["spec"]), (wire["spec"], doc["spec"])


@pytest.mark.parametrize("kind", sorted(cases.BASE))
def test_base_objects_validate(kind: str) -> None:
    MODELS[kind].model_validate(cases.BASE[kind])


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in cases.VALID])
def test_valid_variants_validate(case: cases.Valid) -> None:
    MODELS[case.kind].model_validate(case.body("case"))


def _path(loc: tuple[int | str, ...]) -> str:
    """pydantic's error location as the API server writes it: `spec.rules[0].backends`."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in cases.INVALID])
def test_invalid_objects_are_rejected_naming_the_field(case: cases.Invalid) -> None:
    with pytest.raises(ValidationError) as info:
        MODELS[case.kind].model_validate(case.body("case"))
    named = [_path(err["loc"]) + " " + err["msg"] for err in info.value.errors()]
    assert any(case.field in text for text in named), f"{case.field} not named in {named}"


def test_defaults_follow_the_issue() -> None:
    spec = deploymentspec.ModelDeploymentSpec.model_validate({"model": {"source": "hf://a/b"}})
    assert (spec.replicas, spec.context_length, spec.max_concurrency) == (1, 8192, 4)
    assert spec.placement.strategy is deploymentspec.PlacementStrategy.SPREAD
    assert spec.swap.strategy is fields.SwapStrategy.AUTO
    assert spec.swap.drain_timeout_seconds == 300
    assert spec.swap.approval is deploymentspec.SwapApproval.AUTOMATIC
    assert spec.memory_bytes() is None
    ref = inferencenode.InferenceNodeSpec.model_validate(
        {"agent": {"url": "http://m:1", "tokenSecretRef": {"name": "s"}}}
    ).agent.token_secret_ref
    # not the gateway's namespace (mlxfleet-system): the gateway may read every Secret there
    assert (ref.namespace, ref.key) == (resources.AGENT_SECRETS_NAMESPACE, "token")
    assert ref.namespace != resources.OPERATOR_NAMESPACE


def test_names_and_aliases_both_validate_and_dump_by_alias() -> None:
    by_name = deploymentspec.ModelDeploymentSpec.model_validate(
        {"model": {"source": "hf://a/b", "served_name": "b"}, "context_length": 1024}
    )
    by_alias = deploymentspec.ModelDeploymentSpec.model_validate(
        {"model": {"source": "hf://a/b", "servedName": "b"}, "contextLength": 1024}
    )
    assert by_name == by_alias
    wire = by_alias.to_wire()
    assert wire["contextLength"] == 1024
    assert wire["model"]["servedName"] == "b"
    cost = inferencenode.Cost.model_validate({"purchasePriceUSD": 1, "electricityUSDPerKWh": 0.2})
    assert cost.to_wire() == {"purchasePriceUSD": 1.0, "electricityUSDPerKWh": 0.2}


def test_unknown_fields_are_ignored() -> None:
    spec = deploymentspec.ModelDeploymentSpec.model_validate(
        {"model": {"source": "hf://a/b", "futureField": 1}, "addedByServer": True}
    )
    assert "futureField" not in spec.to_wire()["model"]


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("hf://mlx-community/Qwen3-8B-4bit", id="hf"),
        pytest.param("s3://models/llama/3.1-8b", id="s3"),
        pytest.param("file:///Users/mlx/models/qwen", id="file"),
    ],
)
def test_sources_also_pass_the_agent_contract(source: str) -> None:
    assert fields.check_source(source) == source
    assert contract.check_source(source) == source


def test_server_options_match_the_agent_contract() -> None:
    ours = {f.alias or n for n, f in deploymentspec.ServerOptions.model_fields.items()}
    theirs = {to_camel(n) for n in contract.ServerOptions.model_fields}
    assert ours == theirs
    options = deploymentspec.ServerOptions.model_validate(
        {"decodeConcurrency": 32, "kvBits": 4, "chatTemplateArgs": {"enable_thinking": False}}
    )
    agent = options.to_agent()
    assert (agent.decode_concurrency, agent.kv_bits) == (32, 4)
    assert agent.chat_template_args == {"enable_thinking": False}


@pytest.mark.parametrize("strategy", list(fields.SwapStrategy))
def test_swap_strategy_maps_to_the_agent_and_back(strategy: fields.SwapStrategy) -> None:
    agent = fields.to_agent_strategy(strategy)
    assert agent.value == strategy.value.lower()
    assert fields.from_agent_strategy(agent) is strategy


def test_swap_settings_to_agent_policy() -> None:
    policy = deploymentspec.SwapSettings(
        strategy=fields.SwapStrategy.HOLD, drain_timeout_seconds=30
    ).to_agent()
    assert policy == contract.SwapPolicy(
        strategy=contract.SwapStrategy.HOLD, drain_timeout_seconds=30
    )


def test_served_name_defaults_to_metadata_name() -> None:
    body = cases.merge(cases.BASE["ModelDeployment"], {"metadata": {"name": "qwen"}})
    assert modeldeployment.ModelDeployment.model_validate(body).served_name() == "qwen"
    body = cases.merge(body, {"spec": {"model": {"servedName": "qwen3:8b"}}})
    assert modeldeployment.ModelDeployment.model_validate(body).served_name() == "qwen3:8b"


def test_condition_shape_and_helpers() -> None:
    ready = conditions.Condition.model_validate(
        {
            "type": "Ready",
            "status": "False",
            "reason": "WaitingForCapacity",
            "message": "no node has 48Gi free",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "observedGeneration": 3,
        }
    )
    assert ready.to_wire()["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert conditions.find([ready], conditions.ConditionType.READY) is ready
    assert not conditions.is_true([ready], conditions.ConditionType.READY)
    assert conditions.find([ready], conditions.ConditionType.STALLED) is None
    with pytest.raises(ValidationError, match="reason"):
        conditions.Condition.model_validate(ready.to_wire() | {"reason": "not camel case"})


def test_reasons_are_valid_condition_reasons() -> None:
    assert all(re.fullmatch(conditions.REASON_PATTERN, r.value) for r in conditions.Reason)
    assert {c.value for c in conditions.ConditionType} >= {"Ready", "Reconciling", "Stalled"}


def test_resource_names_are_one_source_of_truth() -> None:
    assert f"{resources.GROUP}/{resources.VERSION}" == resources.API_VERSION
    assert [r.short_names for r in resources.ALL] == [
        ("mdep",),
        ("inode",),
        ("swp",),
        ("mroute",),
        ("mdemand",),
    ]
    assert resources.INFERENCE_NODE.scope is resources.Scope.CLUSTER
    assert resources.MODEL_DEPLOYMENT.crd_name == "modeldeployments.mlxfleet.io"
    for kind, model in MODELS.items():
        assert model.model_fields["kind"].default == kind
        assert model.model_fields["api_version"].default == resources.API_VERSION


def test_base_model_config_follows_style() -> None:
    config = base.ApiModel.model_config
    assert config["extra"] == "ignore"
    assert config["validate_by_name"]
    assert config["validate_by_alias"]
    assert config["serialize_by_alias"]


def test_swap_phase_terminal() -> None:
    assert {p for p in swapplan.SwapPhase if p.terminal} == {
        swapplan.SwapPhase.COMPLETED,
        swapplan.SwapPhase.FAILED,
        swapplan.SwapPhase.ROLLED_BACK,
    }


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": True}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(_nested(9), "nested deeper than 8", id="9-levels"),
        pytest.param(_nested(300), "nested deeper than 8", id="300-levels"),
        pytest.param(_nested(100_000), "nested deeper than 8", id="100000-levels"),
        pytest.param({"a": [[[[[[[[1]]]]]]]]}, "nested deeper than 8", id="lists-count"),
        pytest.param({"blob": "x" * 16_400}, "16384 bytes", id="over-16kib"),
        pytest.param({"blob": "x" * 200_000}, "16384 bytes", id="200kb"),
    ],
)
def test_chat_template_args_are_bounded_in_depth_and_size(
    args: dict[str, Any], needle: str
) -> None:
    """The API server cannot look inside a free-form object (only its key count is bounded in the
    CRD), so the operator's model and the agent contract bound depth and size alike."""
    spec = {"model": {"source": "hf://a/b"}, "server": {"chatTemplateArgs": args}}
    with pytest.raises(ValidationError) as info:
        deploymentspec.ModelDeploymentSpec.model_validate(spec)
    assert "server.chatTemplateArgs" in str(info.value)
    assert needle in str(info.value)
    with pytest.raises(ValidationError, match=needle):
        contract.ServerOptions.model_validate({"chatTemplateArgs": args})


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(_nested(8), id="8-levels"),
        pytest.param({"blob": "x" * 16_000}, id="16000-bytes"),
        pytest.param(
            {"enable_thinking": False, "tools": [{"name": "t", "args": {"a": 1}}]}, id="typical"
        ),
    ],
)
def test_chat_template_args_within_bounds_pass_both_models(args: dict[str, Any]) -> None:
    spec = {"model": {"source": "hf://a/b"}, "server": {"chatTemplateArgs": args}}
    md = deploymentspec.ModelDeploymentSpec.model_validate(spec)
    assert md.server.to_agent().chat_template_args == args
