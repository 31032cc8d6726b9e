"""The samples are one set that works together: the node, its agent's config, the workloads.

Issue 15 item 9: the sample InferenceNode used port 8443 while the sample agent listens on
8470, the agent turned TLS on but the node had no caSecretRef, and the bundle mixed
cluster-scoped, mlxfleet-system and namespaced objects under one `-n`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from mlxfleet_agent.runtime import settings
from mlxfleet_operator.api import inferencenode, modeldeployment, resources, swapplan

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "manifests" / "samples"
AGENT_CREDENTIALS_LABEL = "mlxfleet.io/agent-credentials"
SECRET_EXAMPLE = "agent-secret.example.yaml"


def _folder(name: str) -> list[dict[str, Any]]:
    """The documents a folder's kustomization lists, in order."""
    folder = SAMPLES / name
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((folder / resource).read_text()) if d]
    return docs


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def _agent() -> settings.Settings:
    values = settings.read_config_file(REPO / "manifests" / "agent" / "agent.yaml")
    return settings.build(file_values=values, flag_values={})


def _secret() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / "node" / SECRET_EXAMPLE).read_text())
    return doc


def test_every_sample_file_is_in_a_kustomization_or_an_example() -> None:
    listed = set()
    for kustomization in SAMPLES.rglob("kustomization.yaml"):
        folder = kustomization.parent
        listed |= {folder / r for r in yaml.safe_load(kustomization.read_text())["resources"]}
    files = {p for p in SAMPLES.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert files - listed == {SAMPLES / "node" / SECRET_EXAMPLE}
    assert not (SAMPLES / "kustomization.yaml").exists(), "one -n cannot fit every sample"


def test_node_folder_holds_the_cluster_scoped_node_only() -> None:
    """Applied as is, a placeholder Secret would overwrite the real token created before it."""
    assert [d["kind"] for d in _folder("node")] == ["InferenceNode"]
    assert "namespace" not in _folder("node")[0]["metadata"]
    assert _secret()["metadata"]["namespace"] == resources.AGENT_SECRETS_NAMESPACE


def test_workloads_leave_the_namespace_to_kubectl() -> None:
    for doc in _folder("workloads"):
        assert "namespace" not in doc["metadata"], doc["kind"]


def test_the_node_reaches_the_sample_agent() -> None:
    node = inferencenode.InferenceNode.model_validate(_one(_folder("node"), "InferenceNode"))
    agent = _agent()
    url = urlsplit(node.spec.agent.url)
    assert url.port == agent.control_port
    assert node.metadata.name == agent.node_name  # telemetry and reports use one name
    assert (url.scheme == "https") == (agent.tls_cert is not None)
    assert agent.tls_cert is not None
    assert node.spec.agent.ca_secret_ref is not None, "a self-signed agent needs the CA"


def test_the_secret_holds_what_the_node_refers_to_and_is_labelled() -> None:
    node = inferencenode.InferenceNode.model_validate(_one(_folder("node"), "InferenceNode"))
    secret = _secret()
    assert secret["metadata"]["labels"][AGENT_CREDENTIALS_LABEL] == "true"
    refs = [node.spec.agent.token_secret_ref, node.spec.agent.ca_secret_ref]
    for ref in refs:
        assert ref is not None
        assert (ref.namespace, ref.name) == (
            secret["metadata"]["namespace"],
            secret["metadata"]["name"],
        )
        assert ref.key in secret["stringData"]
    assert secret["stringData"]["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")


def test_the_workloads_fit_the_sample_node() -> None:
    node = _one(_folder("node"), "InferenceNode")
    docs = [d for d in _folder("workloads") if "sharding" not in d.get("spec", {})]
    mdep = modeldeployment.ModelDeployment.model_validate(_one(docs, "ModelDeployment"))
    plan = swapplan.SwapPlan.model_validate(_one(docs, "SwapPlan"))
    selector = mdep.spec.placement.node_selector if mdep.spec.placement else {}
    assert selector
    assert selector.items() <= node["metadata"]["labels"].items()
    assert mdep.spec.replicas == 1  # one sample node; Spread needs a node per replica
    assert plan.spec.deployment_ref.name == mdep.metadata.name
    assert plan.spec.nodes == [node["metadata"]["name"]]
    assert plan.spec.paused is True
