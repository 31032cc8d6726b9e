"""The generated CRDs: up to date in crds/, structural, described, with the names kubectl needs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlxfleet_operator.api import crdgen, resources

REPO = Path(__file__).resolve().parents[3]
CRDS = REPO / "crds"
FILES = {
    "modeldeployments.mlxfleet.io.yaml",
    "inferencenodes.mlxfleet.io.yaml",
    "swapplans.mlxfleet.io.yaml",
    "modelroutes.mlxfleet.io.yaml",
    "modeldemands.mlxfleet.io.yaml",
}


def _crds() -> dict[str, dict[str, Any]]:
    return {kind.resource.kind: crdgen.crd(kind) for kind in crdgen.KINDS}


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}.*")


def _schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = _crds()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_crds_directory_is_up_to_date() -> None:
    problems = crdgen.stale(CRDS, crdgen.generate())
    assert not problems, "crds/ is stale, run `make crds`: " + "; ".join(problems)
    assert {p.name for p in CRDS.glob("*.yaml")} == FILES


def test_check_mode_names_stale_missing_and_unexpected_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert crdgen.main(["--check", "--out", str(tmp_path)]) == 1
    assert "modeldeployments.mlxfleet.io.yaml: missing" in capsys.readouterr().err
    assert crdgen.main(["--out", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == FILES
    assert crdgen.main(["--check", "--out", str(tmp_path)]) == 0
    stale = tmp_path / "swapplans.mlxfleet.io.yaml"
    stale.write_text(stale.read_text().replace("Pending", "Waiting"))
    (tmp_path / "old.mlxfleet.io.yaml").write_text("{}\n")
    capsys.readouterr()
    assert crdgen.main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "swapplans.mlxfleet.io.yaml: stale" in err
    assert "old.mlxfleet.io.yaml: not generated" in err
    assert "modeldeployments" not in err


def test_generation_is_deterministic() -> None:
    assert crdgen.generate() == crdgen.generate()


@pytest.mark.parametrize("kind", [r.kind for r in resources.ALL])
def test_schema_is_structural(kind: str) -> None:
    forbidden = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "title", "const", "examples"}
    for path, node in _walk(_schema(kind)):
        assert not forbidden & set(node), f"{kind}{path}: {forbidden & set(node)}"
        assert node.get("additionalProperties") is not False, f"{kind}{path}"
        assert "default" not in node or node["default"] is not None, f"{kind}{path}"
        untyped = node.get("x-kubernetes-preserve-unknown-fields") or node.get(
            "x-kubernetes-int-or-string"
        )
        assert "type" in node or untyped, f"{kind}{path}"
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            assert isinstance(node.get(key, True), bool), f"{kind}{path}: numeric {key}"
        if node.get("nullable"):
            assert "enum" not in node, f"{kind}{path}: the API server refuses null in an enum"


@pytest.mark.parametrize("kind", [r.kind for r in resources.ALL])
def test_every_field_has_a_description(kind: str) -> None:
    for path, node in _walk(_schema(kind)):
        if path in ("", ".metadata") or path.endswith(("[]", ".*")):
            continue
        assert node.get("description"), f"{kind}{path} has no description (kubectl explain)"


def test_only_free_form_json_fields_preserve_unknown_fields() -> None:
    # chatTemplateArgs and vLLM's hfOverrides are JSON objects handed to the engine as they are
    preserving = [
        f"{kind}{path}"
        for kind in _crds()
        for path, node in _walk(_schema(kind))
        if node.get("x-kubernetes-preserve-unknown-fields")
    ]
    assert sorted(preserving) == [
        "ModelDeployment.spec.engine.vllm.hfOverrides",
        "ModelDeployment.spec.server.chatTemplateArgs",
    ]


def test_every_memory_quantity_is_int_or_string() -> None:
    """Kubernetes quantities are written as `48Gi` or as a number of bytes; every quantity field
    takes both (a YAML `0` is an integer)."""
    found = sorted(
        f"{kind}{path}"
        for kind in _crds()
        for path, node in _walk(_schema(kind))
        if node.get("x-kubernetes-int-or-string")
    )
    assert found == [
        "InferenceNode.spec.hardware.memory",
        "InferenceNode.spec.reservedMemory",
        "ModelDeployment.spec.resources.memory",
    ]


def test_names_scope_and_subresources() -> None:
    for resource in resources.ALL:
        crd = _crds()[resource.kind]
        assert crd["metadata"]["name"] == f"{resource.plural}.mlxfleet.io"
        spec = crd["spec"]
        assert spec["group"] == "mlxfleet.io"
        assert spec["scope"] == ("Cluster" if resource.kind == "InferenceNode" else "Namespaced")
        assert spec["names"]["categories"] == ["mlxfleet"]
        assert spec["names"]["shortNames"] == list(resource.short_names)
        (version,) = spec["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        scale = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
        expected = {"scale": scale} if resource.kind == "ModelDeployment" else {}
        # a ModelDemand is written whole by its gateway: it has no status
        status: dict[str, object] = {} if resource.kind == "ModelDemand" else {"status": {}}
        assert version["subresources"] == {**status, **expected}
        assert version["schema"]["openAPIV3Schema"]["required"] == ["spec"]


def test_scale_paths_exist_in_the_schema() -> None:
    """Each path of the scale subresource names a field the schema has (an integer or string)."""
    (version,) = _crds()["ModelDeployment"]["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    for key, kind in (
        ("specReplicasPath", "integer"),
        ("statusReplicasPath", "integer"),
        ("labelSelectorPath", "string"),
    ):
        node = schema
        for part in version["subresources"]["scale"][key].strip(".").split("."):
            node = node["properties"][part]
        assert node["type"] == kind, key


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        pytest.param(
            "ModelDeployment",
            ["Model", "Replicas", "Desired", "Ready", "Status", "Priority", "Age"],
            id="mdep",
        ),
        pytest.param(
            "InferenceNode",
            ["Ready", "Status", "Chip", "Memory", "Free", "Agent", "Download", "Age"],
            id="inode",
        ),
        pytest.param("SwapPlan", ["Deployment", "Target", "Phase", "Progress", "Age"], id="swp"),
        pytest.param("ModelRoute", ["Names", "Backends", "Status", "Age"], id="mroute"),
        pytest.param("ModelDemand", ["Gateway", "Renewed", "Age"], id="mdemand"),
    ],
)
def test_printer_columns_include_age(kind: str, columns: list[str]) -> None:
    declared = _crds()[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in declared if not c.get("priority")] == columns
    age = declared[-1]
    assert age == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def test_status_column_reads_the_ready_reason() -> None:
    declared = _crds()["ModelDeployment"]["spec"]["versions"][0]["additionalPrinterColumns"]
    status = next(c for c in declared if c["name"] == "Status")
    assert status["jsonPath"] == '.status.conditions[?(@.type=="Ready")].reason'


@pytest.mark.parametrize(
    ("kind", "path", "message"),
    [
        pytest.param(
            "ModelDeployment", ".spec", "spec.placement.nodes must list at least", id="nodes"
        ),
        pytest.param("ModelDeployment", ".spec", "spec.server.maxTokens", id="max-tokens"),
        pytest.param("ModelDeployment", ".spec.model.source", "unknown source scheme", id="src"),
        pytest.param("ModelDeployment", ".spec.resources.memory", "Kubernetes quantity", id="mem"),
        pytest.param("InferenceNode", ".spec.agent", "spec.agent.caSecretRef", id="ca-https"),
        pytest.param("InferenceNode", ".spec.agent.url", "http:// or https://", id="url"),
        pytest.param("InferenceNode", ".spec.cost", "spec.cost.busyPowerWatts", id="power"),
        pytest.param("InferenceNode", ".spec.reservedMemory", "negative", id="reserved"),
        pytest.param("SwapPlan", ".spec.target", "immutable", id="target-immutable"),
        pytest.param("SwapPlan", ".spec.target.source", "unknown source scheme", id="target"),
        pytest.param("ModelRoute", ".spec", "match.models must be names", id="route-models"),
        pytest.param(
            "ModelRoute", ".spec.rules[].backends[]", "exactly one of deployment", id="one-target"
        ),
        pytest.param("ModelRoute", ".spec.rules[]", "weight above 0", id="some-weight"),
        pytest.param(
            "ModelRoute", ".spec.rules[].backends[].external.url", "OpenAI-compatible", id="url"
        ),
        pytest.param(
            "ModelRoute", ".spec.rules[].match", "minPromptTokens must not exceed", id="prompt"
        ),
    ],
)
def test_cel_rules_carry_messages(kind: str, path: str, message: str) -> None:
    node = dict(_walk(_schema(kind)))[path]
    rules = node.get("x-kubernetes-validations", [])
    assert any(message in r["message"] for r in rules), rules
    assert all(r["rule"] and r["message"] for r in rules)


def test_bounds_and_enums_from_the_issue() -> None:
    spec = dict(_walk(_schema("ModelDeployment")))
    assert (spec[".spec.replicas"]["minimum"], spec[".spec.replicas"]["maximum"]) == (0, 64)
    assert spec[".spec.replicas"]["default"] == 1
    assert (spec[".spec.contextLength"]["minimum"], spec[".spec.contextLength"]["maximum"]) == (
        256,
        1048576,
    )
    assert spec[".spec.server.kvBits"]["enum"] == [4, 8]
    assert spec[".spec.swap.strategy"]["enum"] == ["Auto", "Surge", "Hold"]
    assert spec[".spec.swap.approval"]["enum"] == ["Automatic", "Manual"]
    assert spec[".spec.placement.strategy"]["enum"] == ["Spread", "BinPack"]
    phase = dict(_walk(_schema("SwapPlan")))[".status.phase"]
    assert phase["enum"] == [
        "Pending",
        "Paused",
        "Progressing",
        "RollingBack",
        "Completed",
        "Failed",
        "RolledBack",
    ]
    conditions = dict(_walk(_schema("InferenceNode")))[".status.conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["items"]["required"] == ["type", "status", "lastTransitionTime", "reason"]


def test_files_parse_back_to_the_generated_objects() -> None:
    for kind in crdgen.KINDS:
        text = (CRDS / crdgen.file_name(kind)).read_text()
        assert text.startswith("# Generated by `mlxfleet crds`")
        assert yaml.safe_load(text) == crdgen.crd(kind)
