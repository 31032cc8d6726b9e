"""The generated workload (pure, seeded): InferenceNodes for a hollow fleet, ModelDeployments of
mixed sizes, replicas and selectors, and the model change of a subset.

Nodes are labelled `bench.mlxfleet.io/pool` (p0..p3) and `bench.mlxfleet.io/size` (small up to
24 GiB, medium up to 64 GiB, large above). Deployments: 1-3 replicas (1.8 on average), 1-8 GiB
per replica and one in ten 16-32 GiB (those select large nodes); 40 % without selector, 30 % one
pool, 30 % a size class. Demand is about 45 % of the fleet's slot budget, so every deployment
fits with room for surge swaps. `resources.memory` is set, so no probe downloads are needed.
"""

from __future__ import annotations

import random
from typing import Any

GIB = 1024**3
GROUP = "mlxfleet.io"
VERSION = "v1alpha1"
LABEL_POOL = "bench.mlxfleet.io/pool"
LABEL_SIZE = "bench.mlxfleet.io/size"
SECRET_NAMESPACE = "mlxfleet-agents"  # noqa: S105 - api.resources.AGENT_SECRETS_NAMESPACE
AGENT_CREDENTIALS_LABEL = "mlxfleet.io/agent-credentials"  # api.resources: only these are sent
SMALL_GIB = (1, 2, 2, 3, 4, 4, 6, 8)
LARGE_GIB = (16, 24, 32)


def size_class(memory_bytes: int) -> str:
    gib = memory_bytes / GIB
    return "small" if gib <= 24 else "medium" if gib <= 64 else "large"


def secret(node: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"agent-{node['name']}",
            "namespace": SECRET_NAMESPACE,
            "labels": {AGENT_CREDENTIALS_LABEL: "true"},  # the operator uses no other Secret
        },
        "stringData": {"token": node["token"]},
    }


def inference_node(node: dict[str, Any], index: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceNode",
        "metadata": {
            "name": node["name"],
            "labels": {
                LABEL_POOL: f"p{index % 4}",
                LABEL_SIZE: size_class(node["memoryBytes"]),
            },
        },
        "spec": {
            "agent": {
                "url": node["url"],
                "tokenSecretRef": {"name": f"agent-{node['name']}", "namespace": SECRET_NAMESPACE},
            }
        },
    }


def deployments(count: int, *, namespace: str, seed: int = 0) -> list[dict[str, Any]]:
    r = random.Random(seed)
    out = []
    for i in range(1, count + 1):
        large = r.random() < 0.1
        gib = r.choice(LARGE_GIB if large else SMALL_GIB)
        pick = r.random()
        selector: dict[str, str] = {}
        if large:
            selector = {LABEL_SIZE: "large"}
        elif pick < 0.3:
            selector = {LABEL_POOL: f"p{r.randrange(4)}"}
        elif pick < 0.6:
            selector = {LABEL_SIZE: r.choice(["medium", "large"])}
        name = f"d-{i:04d}"
        out.append(
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ModelDeployment",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "model": {"source": f"hf://bench/model-{i:04d}"},
                    "replicas": r.choice([1, 1, 2, 2, 3]),
                    "contextLength": 8192,
                    "maxConcurrency": 4,
                    "resources": {"memory": f"{gib}Gi"},
                    "placement": {"nodeSelector": selector} if selector else {},
                },
            }
        )
    return out


def changed(deployment: dict[str, Any]) -> dict[str, Any]:
    """The same deployment serving the next model version (a SwapPlan rolls it out)."""
    source = deployment["spec"]["model"]["source"]
    return {**deployment, "spec": {**deployment["spec"], "model": {"source": f"{source}-v2"}}}


def demand_bytes(items: list[dict[str, Any]]) -> int:
    return sum(
        int(d["spec"]["resources"]["memory"].removesuffix("Gi")) * GIB * d["spec"]["replicas"]
        for d in items
    )
