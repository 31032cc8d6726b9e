"""Issue 22, High 1: a bootstrap-token holder registers a Mac of its own. Played as the attacker
played it, against the real API server and its admission policy, the real operator and gateway
(each as its own identity, both holding the fleet key), two real agents and a rogue agent.

Before a person approves it, the rogue takes nothing: its InferenceNode with the label the
tenant's deployment selects is refused, the join-shaped one waits (AwaitingApproval), the
tenant's deployment places no replica there, and no connection at all reaches its control or
data port (TCP proxies in front of both count them), not even when a ModelDeployment's status
names it (written while the operator is stopped: the gateway routes only to approved nodes).
After approval it serves, and what it learned (its own keys, from the operator) opens no other
agent's data plane or peer server; nor does the fleet key itself.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from mlxfleet_agent import contract
from mlxfleet_operator.dev import controlplane
from tests.e2e import gwfleet
from tests.e2e.conftest import AGENT_SECRETS, BIN, condition, wait_for
from tests.e2e.test_join import NODES, as_bootstrap, create_token
from tests.support import gateway as gws
from tests.support import tcpproxy

pytestmark = [pytest.mark.cluster, pytest.mark.mlx]
ROGUE_HOST, SEEN_AS = "127.0.0.2", "127.0.0.3"  # the agent binds one; the cluster sees the other
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]


def labelled_node(name: str, url: str, labels: dict[str, str]) -> dict[str, Any]:
    """The attacker's InferenceNode as the issue played it: a label a deployment selects,
    512Gi, its own URL (and nothing about approval)."""
    ref = {"name": f"{name}-agent", "namespace": AGENT_SECRETS}
    return {
        "apiVersion": "mlxfleet.io/v1alpha1",
        "kind": "InferenceNode",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "agent": {"url": url, "tokenSecretRef": ref},
            "hardware": {"chip": "Apple M3 Ultra", "memory": "512Gi"},
        },
    }


def join_shaped(name: str, url: str, labels: dict[str, str]) -> dict[str, Any]:
    """The same as join writes it: unapproved, cordoned, the labels only asked for."""
    body = labelled_node(name, url, {})
    asked = {"mlxfleet.io/requested-labels": json.dumps(labels)}
    body["metadata"] = {"name": name, "annotations": asked}
    body["spec"].update(approved=False, unschedulable=True)
    return body


def served_by(gw: gws.Gateway, key: str, n: int) -> list[str]:
    """The replica (x-mlxfleet-backend) of each of `n` requests through the gateway."""
    out = []
    with gw.openai(api_key=key) as client:
        for _ in range(n):
            raw = client.chat.completions.with_raw_response.create(
                model="chat", messages=HELLO, max_tokens=2
            )
            out.append(str(raw.headers.get("x-mlxfleet-backend")))
    return out


def chat(data_url: str, key: str) -> int:
    """The status of a chat request to an agent's data plane with `key`."""
    body = {"model": "chat", "messages": HELLO, "max_tokens": 2}
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(
        data_url + "/v1/chat/completions", json=body, headers=headers, timeout=30
    ).status_code


def peer_listing(control_url: str, model_id: str, token: str) -> int:
    """The status of a peer server's listing of `model_id` asked with `token`."""
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.get(
        f"{control_url}/peer/v1/models/{model_id}", headers=headers, timeout=10
    ).status_code


def test_a_self_joined_mac_gets_nothing_until_approved_and_then_opens_no_other(
    cluster: controlplane.ControlPlane, tmp_path: Path, model_a: Path
) -> None:
    with gwfleet.fleet(cluster, tmp_path, model_a.parent) as fl:
        ws, label = fl.ws, fl.ws.label
        n1, n2 = fl.node("n1"), fl.node("n2")
        rogue_agent = fl.agents.start("rogue", host=ROGUE_HOST)
        seen = {
            port: tcpproxy.Proxy(ROGUE_HOST, port, host=SEEN_AS, port=port)
            for port in (rogue_agent.control_port, rogue_agent.data_port)
        }
        rogue = f"{label}-rogue"
        ws.nodes.append(rogue)
        url = f"http://{SEEN_AS}:{rogue_agent.control_port}"
        fl.gateway = gws.start_gateway(cluster.gateway_kubeconfig, tmp_path / "gateway")
        tenant = fl.key(f"{label}-tenant")

        # 1. the attack as played: a token, the Secret, a node with the selected label
        with as_bootstrap(cluster, create_token(cluster, "--ttl", "10m")) as api:
            secret = {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": f"{rogue}-agent", "namespace": AGENT_SECRETS,
                             "labels": {"mlxfleet.io/agent-credentials": "true"}},
                "stringData": {"token": rogue_agent.token},
            }  # fmt: skip
            made = api.post(f"/api/v1/namespaces/{AGENT_SECRETS}/secrets", json=secret)
            assert made.status_code == 201, made.text
            ws.secrets.append(f"{rogue}-agent")
            labelled = api.post(NODES, json=labelled_node(rogue, url, {"e2e": label}))
            assert labelled.status_code == 403, labelled.text
            assert "spec.approved: false" in labelled.json()["message"]
            # ... and join's own shape: accepted, waiting for a person
            joined = api.post(NODES, json=join_shaped(rogue, url, {"e2e": label}))
            assert joined.status_code == 201, joined.text

        def rogue_obj() -> dict[str, Any]:
            return ws.get("inferencenode", rogue, namespaced=False)

        wait_for("AwaitingApproval", lambda: condition(rogue_obj(), "Ready").get("reason")
                 == "AwaitingApproval")  # fmt: skip
        row = ws.kubectl("get", "inode", rogue, "--no-headers").split()
        assert row[1:3] == ["False", "AwaitingApproval"], row

        # 2. a tenant's deployment wants three replicas: two approved nodes take them
        fl.deploy("chat", model_a, replicas=3)
        md = wait_for("two replicas ready", lambda: (found := ws.get("mdep", "chat")) and
                      (found.get("status") or {}).get("readyReplicas") == 2 and found)  # fmt: skip
        assert sorted(p["node"] for p in md["status"]["placements"]) == [n1, n2]
        assert "not approved" in condition(md, "Ready")["message"]
        assert rogue in condition(md, "Ready")["message"]
        backends = served_by(fl.gateway, tenant, 12)
        assert {b.rsplit("@", 1)[1] for b in backends} <= {n1, n2}

        # 3. even a status naming the rogue (written while the operator is stopped) sends it
        # nothing: the gateway routes only to approved nodes
        fl.operator.stop()
        faked = [p for p in md["status"]["placements"] if p["node"] == n1]
        faked.append({**faked[0], "node": rogue,
                      "endpoint": f"http://{SEEN_AS}:{rogue_agent.data_port}"})  # fmt: skip
        ws.kubectl("patch", "mdep", "chat", "-n", ws.namespace, "--subresource=status",
                   "--type=merge", "-p", json.dumps({"status": {"placements": faked}}))  # fmt: skip
        gw, only_n1 = fl.gateway, {f"{ws.namespace}/chat@{n1}"}
        wait_for("the gateway sees the written status (n2 gone)",
                 lambda: set(served_by(gw, tenant, 4)) == only_n1, timeout=30)  # fmt: skip
        assert set(served_by(gw, tenant, 12)) == only_n1
        fl.operator.start()
        assert {p: s.accepted for p, s in seen.items()} == dict.fromkeys(seen, 0)
        assert rogue_agent.state()["credentials"] is None  # nothing was sent to it

        # 4. a person approves: its labels are applied, the operator polls it and sends its keys
        approve = subprocess.run(
            [str(BIN / "kubectl-mlxfleet"), "--kubeconfig", str(cluster.kubeconfig),
             "approve", "node", rogue],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert approve.returncode == 0, approve.stderr
        assert f"e2e={label}" in approve.stderr
        assert "512Gi" in approve.stderr  # what it claims, shown to the person who approves
        obj = rogue_obj()
        assert obj["metadata"]["labels"] == {"e2e": label}
        assert (obj["spec"]["approved"], obj["spec"]["unschedulable"]) == (True, False)
        gwfleet.wait_for_own_key(rogue_agent, rogue)
        fl.wait_ready("chat", replicas=3)
        wait_for("a request served by the approved Mac",
                 lambda: any(b.endswith("@" + rogue) for b in served_by(gw, tenant, 6)),
                 timeout=60)  # fmt: skip
        assert seen[rogue_agent.data_port].accepted > 0

        # 5. what the Mac learned opens no other agent: its own keys, as stored on its disk
        learned = contract.NodeCredentials.model_validate_json(
            (rogue_agent.root / "state" / "credentials.json").read_text()
        )
        assert learned.data_plane == [gws.node_key(rogue)]
        model_id = contract.credentials.model_id(f"file://{model_a}", None)
        forged = contract.credentials.fetch_token(learned.peer[0], fetcher=rogue,
                                                  model_id=model_id)  # fmt: skip
        for name in (n1, n2):
            victim = fl.nodes[name]
            for key in (*learned.data_plane, *learned.peer, gws.FLEET_KEY):
                assert chat(victim.data_url, key) == 401, name
            assert chat(victim.data_url, gws.node_key(name)) == 200  # its own key does
            for token in (forged, learned.peer[0], gws.FLEET_KEY):
                assert peer_listing(victim.url, model_id, token) == 403, name
            other = n2 if name == n1 else n1  # a token the operator would make does open it
            key = contract.credentials.peer_key(gws.FLEET_KEY, name)
            made_token = contract.credentials.fetch_token(key, fetcher=other, model_id=model_id)
            assert peer_listing(victim.url, model_id, made_token) in (200, 404), name
        for proxy in seen.values():
            proxy.stop()
        with pytest.raises(openai.APIStatusError):  # and the gateway still needs a key
            fl.gateway.openai(api_key="not-a-key").models.list()
