"""docs/quickstart.md, as a new user follows it, on a real API server standing in for the cluster:
`helm install` (the operator then runs as a process with the release's identity: no kubelet),
two Macs registered (real agents holding the fleet credential; the manual path until
`mlxfleet-agent join` ships), the quickstart's own ModelDeployment applied (its source swapped for
a local tiny model: no hub access here) and waited for with `kubectl wait`, then the gateway
turned on with the quickstart's commands (run as a process with the live Deployment's args and
the chart's gateway identity), an API key minted with `new-key`, and the `openai` client's first
answer through the gateway."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from mlxfleet_operator.dev import controlplane
from tests.e2e.conftest import Agents, wait_for
from tests.support.gateway import BIN, start_gateway
from tests.support.helm import (
    CHART,
    NAMESPACE,
    ChartOperator,
    Helm,
    account_kubeconfig,
    ensure_namespace,
)

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
    gateway = None
    fleet_key = "quickstart-fleet-credential"  # the quickstart's `openssl rand -hex 32 > fleet.key`
    try:
        wait_for("operator Ready (the rollout status step)", operator.ready, timeout=60)

        # 2. each Mac: the manual path (Secret + InferenceNode as the quickstart writes them)
        template = heredoc("InferenceNode")
        (label,) = commands("kubectl -n mlxfleet-system label secret ")
        assert "mlxfleet.io/agent-credentials=true" in label  # else the operator refuses it
        macs = {}
        for name in ("mac-studio-1", "mac-studio-2"):
            agent = agents.start(name, data_key=fleet_key)
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

        # 4. the first request: the gateway turned on with the quickstart's commands
        (tmp_path / "fleet.key").write_text(fleet_key + "\n")
        (secret,) = commands("kubectl -n mlxfleet-system create secret generic mlxfleet-fleet-key")
        assert secret[-1] == "--from-file=key=fleet.key"
        plane.kubectl(*secret[1:-1], f"--from-file=key={tmp_path / 'fleet.key'}")
        (upgrade,) = [c for c in commands("helm upgrade ") if "gateway.enabled=true" in c]
        helm(*upgrade[1:3], str(CHART), *upgrade[4:])
        gateway = start_gateway(
            account_kubeconfig(plane, "mlxfleet-gateway", tmp_path / "gateway.kubeconfig"),
            tmp_path / "gateway",
            fleet_key=fleet_key,
            extra=live_gateway_args(plane),
        )
        (mint,) = commands("mlxfleet-gateway new-key ")
        assert mint[-5:] == ["|", "kubectl", "apply", "-f", "-"]
        words = mint[1 : mint.index("|")]
        minted = subprocess.run(
            [str(BIN / "mlxfleet-gateway"), *words], capture_output=True, text=True, check=True
        )
        plane.kubectl("apply", "-f", "-", input=minted.stdout)
        key = minted.stderr.rsplit(":", 1)[1].strip()
        client = gateway.openai(api_key=key)
        wait_for("the key and the deployment in the gateway", lambda: _listed(client), timeout=30)
        reply = client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "Hello!"}], max_tokens=8
        )
        assert reply.choices[0].message.content
        assert reply.model == "chat"
        with pytest.raises(openai.AuthenticationError):
            gateway.openai(api_key="not-a-key").models.list()

        # a placement's own endpoint answers only the fleet credential
        endpoint = plane.kubectl(
            "-n", "llm", "get", "mdep", "chat", "-o",
            "jsonpath={.status.placements[0].endpoint}",
        ).stdout  # fmt: skip
        direct = openai.OpenAI(base_url=f"{endpoint}/v1", api_key=fleet_key, max_retries=0)
        assert [m.id for m in direct.models.list().data] == ["chat"]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{endpoint}/v1", api_key=key, max_retries=0).models.list()
    finally:
        if gateway is not None:
            gateway.stop()
        operator.stop()


def live_gateway_args(plane: controlplane.ControlPlane) -> list[str]:
    """The live gateway Deployment's flags, as the kubelet would pass them, less what
    `start_gateway` sets for a process (loopback listen ports, a local fleet-key file)."""
    deployment = json.loads(
        plane.kubectl("-n", NAMESPACE, "get", "deployment", "mlxfleet-gateway", "-o", "json").stdout
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["mlxfleet-gateway"]
    local = ("--listen=", "--metrics-listen=", "--fleet-key-file=")
    args = [a for a in container["args"] if not a.startswith(local)]
    return [a.replace("$(POD_NAME)", "mlxfleet-gateway-0") for a in args]


def _listed(client: openai.OpenAI) -> bool:
    try:
        return "chat" in [m.id for m in client.models.list().data]
    except openai.AuthenticationError:
        return False  # the key's Secret not seen yet
