"""One real fleet for the console's e2e tests (package scope: the admin API and the browser tests
share it): the control plane, the operator, two agents with mlx-lm, and `mlxfleet-gateway
--console` as its own ServiceAccount with the console RBAC as shipped, usage shipped to a real S3
bucket. Two deployments: `chat` (model A on both Macs, swaps automatically) and `review` (model B
on one Mac, swaps only once approved), a route `assistant` splitting 90/10 between them, API keys
per team, and two Kubernetes identities: `approver` (may patch SwapPlans, read keys, Events and
the agents' token Secrets) and `watcher` (may only list).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest

from mlxfleet_operator.dev import controlplane
from tests.e2e import gwfleet
from tests.support import console as cs
from tests.support import gateway as gws
from tests.support import s3 as s3support

SYSTEM = "mlxfleet-system"
READ = ["get", "list", "watch"]
FLEET = ["inferencenodes", "modeldeployments", "modelroutes", "swapplans"]


@dataclass
class ConsoleFleet:
    fleet: gwfleet.Fleet
    gw: gws.Gateway
    ns: str
    model_a: Path
    model_b: Path
    keys: dict[str, str]  # role -> key
    key_names: dict[str, str]  # role -> key (Secret) name
    approver: cs.Identity
    watcher: cs.Identity
    admin_key: str
    secrets: list[str] = field(default_factory=list)

    def client(self, role: str) -> openai.OpenAI:
        return self.gw.openai(api_key=self.keys[role])

    def admin(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.admin_key}"}
        return httpx.request(method, self.gw.url + path, headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="package")
def console_fleet(
    cluster: controlplane.ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
    model_a: Path,
    model_b: Path,
    s3_server: s3support.S3Server,
) -> Iterator[ConsoleFleet]:
    root = tmp_path_factory.mktemp("console-e2e")
    with cs.console_rbac(cluster), gwfleet.fleet(cluster, root, model_a.parent) as fl:
        ns = fl.ws.namespace
        n1 = fl.node("n1")
        fl.deploy("chat", model_a, replicas=2, maxConcurrency=4)
        fl.deploy(
            "review",
            model_b,
            replicas=1,
            placement={"nodes": [n1]},
            swap={"approval": "Manual"},
        )
        fl.route(
            "assistant",
            {
                "rules": [
                    {
                        "name": "default",
                        "backends": [
                            {"deployment": "chat", "weight": 90},
                            {"deployment": "review", "weight": 10},
                        ],
                    }
                ]
            },
        )
        label = fl.ws.label
        roles = {
            "alpha": {"team": "alpha"},
            "beta": {"team": "beta"},
            "gamma": {"team": "gamma"},
            "delta": {"team": "delta"},
            "usage": {"team": "usage"},
            "play": {"team": "playground", "owner": "dev@example.com"},
        }
        keys, names = {}, {}
        for role, fields in roles.items():
            names[role] = f"{label}-{role}"
            keys[role] = fl.key(names[role], **fields)
        admin_key = fl.key(f"{label}-admin", namespaces="*", scopes="admin", team="platform")
        approver = cs.identity(
            cluster,
            "approver",
            rules=[
                {"apiGroups": ["mlxfleet.io"], "resources": FLEET, "verbs": READ},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
            ],
            namespaced={
                ns: [
                    {"apiGroups": ["mlxfleet.io"], "resources": ["swapplans"], "verbs": ["patch"]}
                ],
                SYSTEM: [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "get"]}],
                "mlxfleet-agents": [
                    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
                ],
            },
        )
        watcher = cs.identity(
            cluster,
            "watcher",
            rules=[{"apiGroups": ["mlxfleet.io"], "resources": FLEET, "verbs": READ}],
        )
        try:
            bucket = s3_server.make_bucket()
            fl.gateway = gws.start_gateway(
                cluster.gateway_kubeconfig,
                root / "gateway",
                extra=[
                    "--console",
                    "--telemetry-bucket",
                    bucket,
                    "--telemetry-endpoint-url",
                    s3_server.endpoint_url,
                    "--telemetry-region",
                    s3_server.region,
                    "--telemetry-interval-s",
                    "2",
                    "--name",
                    "console-e2e",
                ],
                env={
                    "MLXFLEET_TELEMETRY_ACCESS_KEY_ID": s3_server.access_key,
                    "MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY": s3_server.secret_key,
                },
            )
            for name, replicas in (("chat", 2), ("review", 1)):
                fl.wait_ready(name, replicas=replicas)
            gw = fl.gateway
            gw.wait_for(
                "the gateway serves chat to every key",
                lambda: all(
                    "chat" in [m.id for m in gw.openai(api_key=k).models.list()]
                    for k in keys.values()
                ),
                timeout=120,
            )
            yield ConsoleFleet(
                fleet=fl,
                gw=gw,
                ns=ns,
                model_a=model_a,
                model_b=model_b,
                keys=keys,
                key_names=names,
                approver=approver,
                watcher=watcher,
                admin_key=admin_key,
            )
        finally:
            for who in (approver, watcher):
                cs.remove(cluster, who)
            secrets = cluster.kubectl(
                "get", "secrets", "-n", SYSTEM, "-o", "json", check=False
            ).stdout
            for s in json.loads(secrets or '{"items": []}')["items"]:
                name = s["metadata"]["name"]
                if name.startswith(label) or name == "mlxfleet-budgets":
                    cluster.kubectl("delete", "secret", name, "-n", SYSTEM, check=False)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"
