"""docs/quickstart.md, as a new user follows it, on a real API server standing in for the cluster:
`helm install` (the operator then runs as a process with the release's identity: no kubelet),
two Macs registered (real agents; the manual path until `mlxfleet-agent join` ships), the
quickstart's own ModelDeployment applied (its source swapped for a local tiny model: no hub
access here) and waited for with `kubectl wait`, then the `openai` client's first answer."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from mlxfleet_operator.dev import controlplane
from tests.e2e.conftest import Agents, wait_for
from tests.support.helm import CHART, NAMESPACE, ChartOperator, Helm, ensure_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]

DOC = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def heredoc(kind: str) -> dict[str, Any]:
    """The quickstart's `<<'EOF'` manifest of `kind` (there is one of each)."""
    blocks = re.findall(r"<<'EOF'\n(.*?)\nEOF\n", DOC.read_text(), flags=re.DOTALL)
    (doc,) = [d for d in map(yaml.safe_load, blocks) if d["kind"] == kind]
    return dict(doc)


def commands(prefix: str) -> list[list[str]]:
    """Lines of the quickstart's shell blocks starting with `prefix`, split into words."""
    return [line.split() for line in DOC.read_text().splitlines() if line.startswith(prefix)]


@pytest.fixture
def plane(bare_cluster: controlplane.ControlPlane) -> controlplane.ControlPlane:
    return bare_cluster


def test_quickstart(
    plane: controlplane.ControlPlane,
    helm_cli: Helm,
    agents: Agents,
    model_a: Path,
    tmp_path: Path,
) -> None:
    helm = helm_cli.on(plane)
    # 1. the cluster: the quickstart's helm install, word for word (chart path from the checkout)
    (install,) = commands("helm install ")
    assert install[1:3] == ["install", "mlxfleet"]
    helm(*install[1:3], str(CHART), *install[4:])
    ensure_namespace(plane)  # the quickstart's `kubectl label namespace ... restricted`
    operator = ChartOperator(plane, tmp_path / "operator")
    operator.start()
    try:
        wait_for("operator Ready (the rollout status step)", operator.ready, timeout=60)

        # 2. each Mac: the manual path (Secret + InferenceNode as the quickstart writes them)
        template = heredoc("InferenceNode")
        (label,) = commands("kubectl -n mlxfleet-system label secret ")
        assert "mlxfleet.io/agent-credentials=true" in label  # else the operator refuses it
        macs = {}
        for name in ("mac-studio-1", "mac-studio-2"):
            agent = agents.start(name)
            # plain HTTP agents here: the token only (the quickstart adds the CA for https)
            plane.kubectl("-n", NAMESPACE, "create", "secret", "generic", f"{name}-agent",
                          f"--from-literal=token={agent.token}")  # fmt: skip
            plane.kubectl(*[w.replace("mac-studio-1", name) for w in label[1:]])
            node = json.loads(json.dumps(template))
            node["metadata"]["name"] = name
            node["spec"]["agent"] = {"url": agent.url, "tokenSecretRef": {"name": f"{name}-agent"}}
            plane.kubectl("apply", "-f", "-", input=json.dumps(node))
            macs[name] = agent
        for name in macs:
            plane.kubectl("wait", "--for=condition=Ready", f"inode/{name}", "--timeout=2m")

        # 3. the first model: the quickstart's manifest, a local tiny model for its source
        plane.kubectl("create", "namespace", "llm")
        deployment = heredoc("ModelDeployment")
        assert deployment["spec"]["model"]["source"].startswith("hf://")
        deployment["spec"]["model"]["source"] = f"file://{model_a}"
        plane.kubectl("apply", "-n", "llm", "-f", "-", input=json.dumps(deployment))
        plane.kubectl(
            "-n", "llm", "wait", "--for=condition=Ready", "mdep/chat", "--timeout=170s",
            timeout=180,
        )  # fmt: skip
        md = json.loads(plane.kubectl("-n", "llm", "get", "mdep", "chat", "-o", "json").stdout)
        assert md["status"]["readyReplicas"] == deployment["spec"]["replicas"] == 2
        assert sorted(p["node"] for p in md["status"]["placements"]) == sorted(macs)

        # 4. the first request: the openai client at a placement's endpoint
        endpoint = plane.kubectl(
            "-n", "llm", "get", "mdep", "chat", "-o",
            "jsonpath={.status.placements[0].endpoint}",
        ).stdout  # fmt: skip
        client = openai.OpenAI(base_url=f"{endpoint}/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "Hello!"}], max_tokens=8
        )
        assert reply.choices[0].message.content
        assert reply.model == "chat"
    finally:
        operator.stop()
