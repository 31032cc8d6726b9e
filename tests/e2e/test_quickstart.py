"""docs/quickstart.md, as a new user follows it, on a real API server standing in for the cluster:
`helm install` (the operator then runs as a process with the release's identity: no kubelet),
two Macs joined with the quickstart's `mlxfleet token create` and `mlxfleet-agent join` (real
agents started from the systemd units join rendered) and approved with `kubectl mlxfleet approve
node` (each waits, AwaitingApproval, until then),
the quickstart's own ModelDeployment applied (its source swapped for a local tiny model: no hub
access here) and waited for with `kubectl wait`, then the gateway turned on with the
quickstart's commands (run as a process with the live Deployment's args and the chart's gateway
identity; the operator restarted with the fleet-key Secret mounted), an API key minted with
`new-key`, and the `openai` client's first answer through the gateway; a replica's own endpoint
answers only that Mac's own key, never the fleet key."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import signal
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from mlxfleet_agent import contract
from mlxfleet_operator.dev import controlplane, processes
from tests.e2e.conftest import BIN, Agents, stop_process, wait_for
from tests.support.gateway import start_gateway
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


def join_command() -> list[str]:
    """The quickstart's `mlxfleet-agent join` command (continued with a backslash)."""
    text = DOC.read_text().replace("\\\n", " ")
    (line,) = [x for x in text.splitlines() if x.startswith("mlxfleet-agent join ")]
    return line.split()


def run_ok(*cmd: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, f"{cmd}: {proc.stderr}"
    return proc.stdout


def test_quickstart(
    plane: controlplane.ControlPlane,
    helm_cli: Helm,
    agents: Agents,
    model_a: Path,
    tmp_path: Path,
) -> None:
    started: list[subprocess.Popen[bytes]] = []
    helm = helm_cli.on(plane)
    # 1. the cluster: the agents' Secret namespace, then the quickstart's helm install, word for
    # word (chart path from the checkout)
    (agents_ns,) = commands("kubectl create namespace mlxfleet-agents")
    made = plane.kubectl(*agents_ns[1:], check=False)
    assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr
    (install,) = commands("helm install ")
    assert install[1:3] == ["install", "mlxfleet"]
    helm(*install[1:3], str(CHART), *install[4:])
    ensure_namespace(plane)  # the quickstart's `kubectl label namespace ... restricted`
    operator = ChartOperator(plane, tmp_path / "operator")
    operator.start()
    gateway = None
    fleet_key = "quickstart-fleet-key-" + "0" * 43  # the quickstart's `openssl rand -hex 32`
    (tmp_path / "fleet.key").write_text(fleet_key + "\n")
    (tmp_path / "fleet.key").chmod(0o600)
    try:
        wait_for("operator Ready (the rollout status step)", operator.ready, timeout=60)

        # 2. each Mac: the quickstart's token, then its join command word for word, with
        # loopback addresses and private directories added (the unit rendered, run as a process)
        (create,) = commands("mlxfleet token create")
        ca_out = tmp_path / "cluster-ca.crt"  # the quickstart's --ca-out, somewhere private
        create[create.index("--ca-out") + 1] = str(ca_out)
        token = run_ok(str(BIN / "mlxfleet"), *create[1:], "--kubeconfig", str(plane.kubeconfig))
        assert ca_out.read_text().startswith("-----BEGIN CERTIFICATE-----")
        join = join_command()
        assert join[:2] == ["mlxfleet-agent", "join"]
        macs = []
        for name in ("mac-studio-1", "mac-studio-2"):
            root = tmp_path / name
            control, data = processes.free_ports(2)
            words = [w.replace("BOOTSTRAP", token.strip()) for w in join[2:]]
            words[words.index("--server") + 1] = plane.server
            words[words.index("--ca-file") + 1] = str(ca_out)  # what `token create` wrote
            run_ok(
                str(BIN / "mlxfleet-agent"), "join", *words, "--node-name", name,
                "--advertise-address", "127.0.0.1", "--bind", "127.0.0.1",
                "--control-port", str(control), "--data-port", str(data),
                "--allowed-root", str(model_a.parent), "--config-dir", str(root / "etc"),
                "--state-dir", str(root / "state"), "--unit-dir", str(root / "units"),
                "--log-dir", str(root / "log"), "--user", "nobody",  # this machine's account
            )  # fmt: skip
            unit = (root / "units" / "mlxfleet-agent.service").read_text()
            (line,) = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
            argv = shlex.split(line.removeprefix("ExecStart="))
            with (root / "agent.log").open("wb") as log:
                started.append(subprocess.Popen(
                    [*argv, "--python", sys.executable, "--no-caffeinate", "--stop-grace-s", "5"],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                ))  # fmt: skip
            macs.append(name)
        for name in macs:  # not Ready: each waits for a person
            wait_for(f"{name} AwaitingApproval", functools.partial(_awaiting, plane, name))
        (approve,) = commands("kubectl mlxfleet approve node ")
        (wait,) = commands("kubectl wait --for=condition=Ready inode/")
        for name in macs:
            words = [w.replace("mac-studio-1", name) for w in approve[2:]]
            run_ok(str(BIN / "kubectl-mlxfleet"), *words, "--kubeconfig", str(plane.kubeconfig))
            plane.kubectl(*[w.replace("mac-studio-1", name) for w in wait[1:]])
        node = json.loads(plane.kubectl("get", "inode", "mac-studio-2", "-o", "json").stdout)
        assert node["metadata"]["labels"]["mlxfleet.io/room"] == "lab-2"

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
        status = subprocess.run(
            [str(BIN / "kubectl-mlxfleet"), "status", "--kubeconfig", str(plane.kubeconfig)],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert "llm/chat" in status

        # 4. the first request: the gateway turned on with the quickstart's commands
        (secret,) = commands("kubectl -n mlxfleet-system create secret generic mlxfleet-fleet-key")
        assert secret[-1] == "--from-file=key=fleet.key"
        plane.kubectl(*secret[1:-1], f"--from-file=key={tmp_path / 'fleet.key'}")
        (upgrade,) = [c for c in commands("helm upgrade ") if "gateway.enabled=true" in c]
        helm(*upgrade[1:3], str(CHART), *upgrade[4:])
        (restart,) = commands("kubectl -n mlxfleet-system rollout restart deployment/")
        assert restart[-1] == "deployment/mlxfleet-operator"
        operator.stop()  # the rollout restart: the new pod mounts the fleet-key Secret
        operator.start()
        for name in macs:  # the operator sends each approved Mac its own keys
            wait_for(f"{name}'s keys", functools.partial(_holds_keys, tmp_path / name, fleet_key))
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

        # a placement's own endpoint answers only that Mac's own key: not the fleet key itself,
        # not another Mac's, not an API key
        md = json.loads(plane.kubectl("-n", "llm", "get", "mdep", "chat", "-o", "json").stdout)
        placed = md["status"]["placements"][0]
        endpoint, mac = placed["endpoint"], placed["node"]
        other = next(m for m in macs if m != mac)
        own = contract.credentials.data_plane_key(fleet_key, mac)
        direct = openai.OpenAI(base_url=f"{endpoint}/v1", api_key=own, max_retries=0)
        assert [m.id for m in direct.models.list().data] == ["chat"]
        for wrong in (fleet_key, contract.credentials.data_plane_key(fleet_key, other), key):
            with pytest.raises(openai.AuthenticationError):
                openai.OpenAI(base_url=f"{endpoint}/v1", api_key=wrong, max_retries=0).models.list()
    finally:
        if gateway is not None:
            gateway.stop()
        operator.stop()
        for proc in started:
            stop_process(proc, sig=signal.SIGTERM, grace=30)


def _awaiting(plane: controlplane.ControlPlane, node: str) -> bool:
    found = json.loads(plane.kubectl("get", "inode", node, "-o", "json").stdout)
    ready = [c for c in found.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
    return bool(ready) and ready[0]["reason"] == "AwaitingApproval"


def _holds_keys(root: Path, fleet_key: str) -> bool:
    """The Mac's agent reports the fingerprint of its own keys (from join's files: its URL,
    token and certificate)."""
    joined = json.loads((root / "etc" / "join.json").read_text())
    node = str(joined["node"])
    token = (root / "etc" / "token").read_text().strip()
    state = httpx.get(
        f"{joined['url']}/v1/state",
        headers={"Authorization": f"Bearer {token}"},
        verify=ssl.create_default_context(cafile=str(root / "etc" / "tls.crt")),
        timeout=10,
    ).json()
    wanted = contract.credentials.for_node((fleet_key,), node)
    return bool(state.get("credentials") == contract.credentials.fingerprint(wanted))


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
