"""The generated CRDs on the real API server: Established, samples, columns, explain, status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlxfleet_operator.api import crdgen, modeldeployment, resources
from tests.unit.api import cases

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "manifests" / "samples"
NAMESPACE = "api-samples"


def _ensure_namespace(cluster: Any, name: str) -> None:
    manifest = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    cluster.kubectl("apply", "--server-side", "-f", "-", input=manifest)


def _get(cluster: Any, *args: str) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return got


@pytest.fixture(scope="module")
def samples(cluster: Any) -> dict[str, dict[str, Any]]:
    """Every sample applied server-side (namespaced kinds into NAMESPACE); kind -> sample."""
    _ensure_namespace(cluster, NAMESPACE)
    applied: dict[str, dict[str, Any]] = {}
    for path in sorted(SAMPLES.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        doc = yaml.safe_load(path.read_text())
        target = (
            []
            if "namespace" in doc["metadata"] or doc["kind"] == "InferenceNode"
            else [
                "-n",
                NAMESPACE,
            ]
        )
        proc = cluster.kubectl("apply", "--server-side", "-f", str(path), *target, check=False)
        assert proc.returncode == 0, f"{path.name}: {proc.stderr}"
        applied[doc["kind"]] = doc
    return applied


@pytest.mark.parametrize("kind", crdgen.KINDS, ids=lambda k: k.resource.kind)
def test_crd_is_established_and_matches_the_generated_file(cluster: Any, kind: crdgen.Kind) -> None:
    crd = _get(cluster, "crd", kind.resource.crd_name)
    status = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert status["Established"] == "True"
    assert status["NamesAccepted"] == "True"
    assert crd["status"]["acceptedNames"]["shortNames"] == list(kind.resource.short_names)
    assert crd["status"]["acceptedNames"]["categories"] == [resources.CATEGORY]
    served = crd["spec"]["versions"][0]
    generated = crdgen.crd(kind)["spec"]["versions"][0]
    assert served["schema"] == generated["schema"]
    assert served["additionalPrinterColumns"] == generated["additionalPrinterColumns"]


def test_every_sample_applies_server_side(samples: dict[str, dict[str, Any]]) -> None:
    assert set(samples) == {"Secret", "InferenceNode", "ModelDeployment", "SwapPlan", "ModelRoute"}


def test_get_mlxfleet_lists_all_four_kinds_with_their_columns(
    cluster: Any, samples: dict[str, dict[str, Any]]
) -> None:
    out = cluster.kubectl("get", "mlxfleet", "-A").stdout
    headers = [line.split() for line in out.splitlines() if line.startswith(("NAME", "NAMESPACE"))]
    assert [
        "NAMESPACE",
        "NAME",
        "MODEL",
        "REPLICAS",
        "DESIRED",
        "READY",
        "STATUS",
        "PRIORITY",
        "AGE",
    ] in headers
    assert ["NAME", "READY", "STATUS", "CHIP", "MEMORY", "FREE", "AGENT", "DOWNLOAD", "AGE"] in (
        headers
    )
    assert ["NAMESPACE", "NAME", "DEPLOYMENT", "TARGET", "PHASE", "PROGRESS", "AGE"] in headers
    assert ["NAMESPACE", "NAME", "NAMES", "BACKENDS", "STATUS", "AGE"] in headers
    for kind in ("ModelDeployment", "InferenceNode", "SwapPlan", "ModelRoute"):
        assert f"{kind.lower()}.mlxfleet.io/{samples[kind]['metadata']['name']}" in out
    assert "https://mac-studio-1.lan:8470" in out


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        pytest.param("modeldeployment.spec.model", "hf://<org>/<repo>", id="model"),
        pytest.param("modeldeployment.spec.model", "servedName", id="model-fields"),
        pytest.param("mdep.spec.swap.strategy", "Surge", id="short-name"),
        pytest.param("inferencenode.spec.agent.url", "https://mac-studio-1.lan:8470", id="url"),
        pytest.param("swapplan.spec.paused", "approve", id="paused"),
        pytest.param("modeldeployment.status.conditions", "Reconciling", id="conditions"),
        pytest.param("mroute.spec.rules.match.hasTools", "tools", id="route-tools"),
        pytest.param("modelroute.spec.fallback.when", "Saturated", id="route-fallback"),
    ],
)
def test_kubectl_explain_shows_descriptions(cluster: Any, field: str, expected: str) -> None:
    out = cluster.kubectl("explain", field).stdout
    assert expected in " ".join(out.split())


def test_defaults_are_applied_by_the_server(cluster: Any) -> None:
    _ensure_namespace(cluster, NAMESPACE)
    body = {
        "apiVersion": resources.API_VERSION,
        "kind": "ModelDeployment",
        "metadata": {"name": "defaults", "namespace": NAMESPACE},
        "spec": {"model": {"source": "file:///models/tiny"}},
    }
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(body))
    spec = _get(cluster, "mdep", "defaults", "-n", NAMESPACE)["spec"]
    assert (spec["replicas"], spec["contextLength"], spec["maxConcurrency"]) == (1, 8192, 4)
    assert spec["placement"]["strategy"] == "Spread"
    assert spec["swap"] == {"strategy": "Auto", "drainTimeoutSeconds": 300, "approval": "Automatic"}


@pytest.mark.parametrize("kind", sorted(cases.BASE))
def test_pydantic_dumps_with_nulls_are_accepted(cluster: Any, kind: str) -> None:
    """What the operator writes (model_dump, unset fields as null) passes the CRD schema."""
    _ensure_namespace(cluster, NAMESPACE)
    model = crdgen.KINDS[[k.resource.kind for k in crdgen.KINDS].index(kind)].model
    body = model.model_validate(cases.BASE[kind]).model_dump(mode="json", by_alias=True)
    body["metadata"] = {"name": f"nulls-{kind.lower()}"}
    body.pop("status")
    assert "null" in json.dumps(body)
    namespace = [] if kind == "InferenceNode" else ["-n", NAMESPACE]
    proc = cluster.kubectl("create", "-f", "-", *namespace, input=json.dumps(body), check=False)
    assert proc.returncode == 0, proc.stderr


def test_status_subresource_drives_the_columns_without_bumping_generation(
    cluster: Any, samples: dict[str, dict[str, Any]]
) -> None:
    name = samples["ModelDeployment"]["metadata"]["name"]
    before = _get(cluster, "mdep", name, "-n", NAMESPACE)
    status = modeldeployment.ModelDeploymentStatus.model_validate(
        {
            "observedGeneration": before["metadata"]["generation"],
            "servedName": "qwen3-8b",
            "replicas": 1,
            "readyReplicas": 0,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "PartiallyReady",
                    "message": "0/1 replicas ready",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    )
    patch = json.dumps({"status": status.to_wire()})
    cluster.kubectl(
        "patch", "mdep", name, "-n", NAMESPACE, "--subresource=status", "--type=merge", "-p", patch
    )
    after = _get(cluster, "mdep", name, "-n", NAMESPACE)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["status"]["readyReplicas"] == 0
    row = cluster.kubectl("get", "mdep", name, "-n", NAMESPACE, "--no-headers").stdout.split()
    assert row[:5] == [name, "qwen3-8b", "1", "0", "PartiallyReady"]


def test_status_is_not_writable_through_the_main_resource(
    cluster: Any, samples: dict[str, dict[str, Any]]
) -> None:
    name = samples["SwapPlan"]["metadata"]["name"]
    patch = json.dumps({"status": {"phase": "Completed"}})
    cluster.kubectl("patch", "swp", name, "-n", NAMESPACE, "--type=merge", "-p", patch)
    assert _get(cluster, "swp", name, "-n", NAMESPACE).get("status", {}).get("phase") is None


def test_swap_plan_target_is_immutable(cluster: Any, samples: dict[str, dict[str, Any]]) -> None:
    name = samples["SwapPlan"]["metadata"]["name"]
    patch = json.dumps({"spec": {"target": {"source": "hf://mlx-community/Other"}}})
    proc = cluster.kubectl(
        "patch", "swp", name, "-n", NAMESPACE, "--type=merge", "-p", patch, check=False
    )
    assert proc.returncode != 0
    assert "spec.target" in proc.stderr
    assert "immutable" in proc.stderr
    unpause = json.dumps({"spec": {"paused": False}})
    cluster.kubectl("patch", "swp", name, "-n", NAMESPACE, "--type=merge", "-p", unpause)
