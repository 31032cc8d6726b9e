"""The sample node, its Secret and the sample agent config work together, end to end.

docs/install.md steps 2 and 4 run as written (loopback names and a unique Secret name swapped
in): openssl makes the CA, the agent's certificate and its token (with a trailing newline);
`kubectl create secret --from-file` + `label` store token and CA on the real API server. A real
agent starts from manifests/agent/agent.yaml with those files; the operator's own code
(`credentials.Cache`, as the operator's identity) reads the Secret and calls the agent's
control API over verified TLS with the token.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlxfleet_agent.runtime import settings
from mlxfleet_operator.adapters import agent as agent_client
from mlxfleet_operator.adapters import credentials, kube, kubeapi
from mlxfleet_operator.api import inferencenode
from mlxfleet_operator.dev import controlplane
from tests.integration.agent.conftest import start_agent
from tests.support import docs

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[3]
LOOPBACK = {"mac-studio-1.lan": "localhost", "192.168.1.20": "127.0.0.1"}


def _kubectl_prelude(cluster: controlplane.ControlPlane) -> str:
    """`kubectl` in the doc's commands: the real binary, as the cluster's admin."""
    return f'kubectl() {{ "{cluster.kubectl_path}" --kubeconfig="{cluster.kubeconfig}" "$@"; }}\n'


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_documented_credentials_let_the_operator_reach_the_sample_agent(
    cluster: controlplane.ControlPlane, tmp_path: Path
) -> None:
    work = tmp_path / "admin"
    work.mkdir()
    made = docs.run_block("install.md", "credentials", cwd=work, replace=LOOPBACK)
    assert made.returncode == 0, made.stderr
    token_bytes = (work / "mac-studio-1.token").read_bytes()
    assert token_bytes.endswith(b"\n")  # what `openssl rand` leaves, and --from-file keeps

    secret_name = f"samples-{secrets.token_hex(3)}-agent"
    stored = docs.run_block(
        "install.md",
        "secret",
        cwd=work,
        replace={"mac-studio-1-agent": secret_name},
        prelude=_kubectl_prelude(cluster),
        env=os.environ,
    )
    assert stored.returncode == 0, stored.stderr

    # the agent, from the sample config with this machine's paths and loopback
    values = settings.read_config_file(REPO / "manifests" / "agent" / "agent.yaml")
    values |= {
        "bind": "127.0.0.1",
        "tokenFile": str(work / "mac-studio-1.token"),
        "tlsCert": str(work / "mac-studio-1.crt"),
        "tlsKey": str(work / "mac-studio-1.key"),
        "allowedRoots": [],
    }
    config = tmp_path / "agent.yaml"
    config.write_text(yaml.safe_dump(values))
    agent = start_agent(
        state_dir=tmp_path / "state",
        models_dir=tmp_path / "models",
        allowed_root=tmp_path / "models",
        log_path=tmp_path / "agent.log",
        extra=["--config", str(config)],
    )
    try:
        port = int(agent.control_url.rsplit(":", 1)[1])
        sample: dict[str, Any] = yaml.safe_load(
            (REPO / "manifests" / "samples" / "node" / "inferencenode.yaml").read_text()
        )
        sample["spec"]["agent"]["url"] = f"https://localhost:{port}"
        for ref in ("tokenSecretRef", "caSecretRef"):
            sample["spec"]["agent"][ref]["name"] = secret_name
        node = inferencenode.InferenceNode.model_validate(sample)
        state = asyncio.run(_operator_reads_state(cluster, node))
        assert state.data_port == int(agent.data_url.rsplit(":", 1)[1])
    finally:
        assert agent.stop() == 0
        cluster.kubectl("delete", "secret", secret_name, "-n", "mlxfleet-agents", check=False)


async def _operator_reads_state(
    cluster: controlplane.ControlPlane, node: inferencenode.InferenceNode
) -> Any:
    k = kube.Kube(await kubeapi.connect(str(cluster.operator_kubeconfig)))
    try:
        creds = await credentials.Cache(k).get(node)
        assert "\n" not in creds.token  # the Secret's trailing newline is not part of the token
        client = agent_client.AgentClient(creds)
        try:
            return await client.state()
        finally:
            await client.aclose()
    finally:
        await k.aclose()
