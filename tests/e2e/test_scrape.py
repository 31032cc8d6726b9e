"""Every part scraped (issue 25): a real Prometheus, configured from the chart's ServiceMonitors,
scrapes a test fleet (operator, two agents serving mlx-lm, the gateway), and every query of the
Grafana dashboard returns data from it, the Macs' own series included.

The agents are found the way an in-cluster Prometheus finds them: Kubernetes discovery of the
EndpointSlices the operator publishes (`--agent-metrics-namespace`) on the real API server, kept
by the labels the chart's agent ServiceMonitor selects, `node`/`instance` from the InferenceNode
annotation. The operator and the gateway run here as local processes, not pods, so their jobs
have static targets with their monitors' settings. The only rewrite the test adds: agents on
127.0.0.1 are published as `loopback.localhost` (the API server refuses loopback IPs in
EndpointSlices), which Prometheus cannot resolve, so that name is mapped back to 127.0.0.1.
The chart's alert rules are loaded too: they evaluate without error and none fires in this
healthy fleet. Traffic covers what the dashboard shows: streams and whole answers, a refused
key, a fallback, a client that goes away mid-stream, and a frozen agent (ejection, retries).
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from openai.types.chat import ChatCompletionMessageParam

from mlxfleet_operator.adapters import publishing
from mlxfleet_operator.dev import controlplane, processes
from tests.e2e import gwfleet
from tests.support import gateway as gws
from tests.support import promconfig
from tests.support import prometheus as prom
from tests.support.helm import CHART, RELEASE, Helm, objects

pytestmark = [pytest.mark.cluster, pytest.mark.mlx, pytest.mark.tools]

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "manifests" / "grafana" / "mlxfleet-dashboard.json"
HOST = REPO / "tests" / "fixtures" / "host" / "macos"  # recorded heat outputs (SOURCES.md)
RULES = REPO / "manifests" / "monitoring" / "prometheusrule.yaml"
SCRAPE = "1s"
# Grafana's variables, as a person looking at the whole fleet sets them
VARIABLES = {"$__rate_interval": "30s", "$__range": "10m", "$instance": ".*", "$model": ".*"}


@dataclass
class Scraped:
    prometheus: prom.Prometheus
    fleet: gwfleet.Fleet
    namespace: str  # where the operator publishes the agents' scrape targets


def monitors(helm_cli: Helm, namespace: str, *values: str) -> dict[str, dict[str, Any]]:
    """The chart's ServiceMonitors (release in `namespace`), by name."""
    rendered = helm_cli(
        "template", RELEASE, str(CHART), f"--namespace={namespace}",
        "--api-versions=monitoring.coreos.com/v1/ServiceMonitor", "--set=gateway.enabled=true",
        *values,
    ).stdout  # fmt: skip
    return {d["metadata"]["name"]: d for d in objects(rendered) if d["kind"] == "ServiceMonitor"}


def scrape_token_flag() -> bool:
    """The agent has `--metrics-token-file` (issue 22: /metrics needs a token beyond loopback)."""
    agent = Path(gws.BIN) / "mlxfleet-agent"
    done = subprocess.run([str(agent), "serve", "--help"], capture_output=True, check=False)
    return b"--metrics-token-file" in done.stdout


def traffic(fl: gwfleet.Fleet, key: str) -> None:
    """What the dashboard shows: answers, refusals, a fallback, a client gone, a frozen agent."""
    assert fl.gateway is not None
    client = fl.gateway.openai(api_key=key, max_retries=0, timeout=60)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]

    def some(n: int, model: str = "chat") -> None:
        for i in range(n):
            if i % 2:
                client.chat.completions.create(model=model, messages=messages, max_tokens=12)
            else:
                stream = client.chat.completions.create(
                    model=model, messages=messages, max_tokens=12, stream=True
                )
                for _ in stream:
                    pass

    some(12)
    some(2, model="fallback")  # its rule's deployment does not exist: the fallback serves
    with pytest.raises(openai.AuthenticationError):
        fl.gateway.openai(api_key="sk-not-a-key", max_retries=0).models.list()
    # a client that goes away after the first event: the agent counts a failed request
    with httpx.stream(
        "POST",
        fl.gateway.base_url + "/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "chat", "messages": messages, "max_tokens": 200, "stream": True},
        timeout=60,
    ) as answer:
        next(answer.iter_raw())
    # a Mac that hangs while requests go on: the gateway ejects it and retries elsewhere
    frozen = next(iter(fl.nodes.values()))
    stop = threading.Event()
    errors: list[BaseException] = []

    def load() -> None:
        while not stop.is_set():
            try:
                some(1)
            except openai.OpenAIError as exc:  # a request caught by the freeze may fail
                errors.append(exc)

    workers = [threading.Thread(target=load) for _ in range(3)]
    for w in workers:
        w.start()
    time.sleep(1.0)
    frozen.freeze()
    try:
        time.sleep(1.5)  # under the operator's misses x poll: ejected, not failed over
    finally:
        frozen.thaw()
        stop.set()
        for w in workers:
            w.join(timeout=120)
    some(6)


@pytest.fixture(scope="module")
def scraped(
    cluster: controlplane.ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
    model_a: Path,
    helm_cli: Helm,
) -> Iterator[Scraped]:
    root = tmp_path_factory.mktemp("scrape")
    namespace = f"scrape-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", namespace)
    token = secrets.token_urlsafe(24)
    token_file = root / "scrape-token"
    token_file.write_text(token + "\n")
    with_token = scrape_token_flag()
    power = root / "agent-power.yaml"  # nominal watts; heat from recorded tool outputs
    heat = [HOST / "powermetrics-cpu_power-thermal-mac14.2-macos26.txt", HOST / "macmon-pipe.jsonl"]
    power.write_text(
        "idlePowerWatts: 6\nbusyPowerWatts: 30\n"
        + "thermalFiles:\n"
        + "".join(f"  - {path}\n" for path in heat)
    )
    agent_flags = ["--config", str(power)]
    if with_token:  # the agents ask for the scrape token: Prometheus must send it
        agent_flags += ["--metrics-token-file", str(token_file)]
    (op_port,) = processes.free_ports(1)
    with gwfleet.fleet(
        cluster,
        root,
        model_a.parent,
        agent_flags=tuple(agent_flags),
        operator_flags=("--agent-metrics-namespace", namespace),
        operator_metrics_port=op_port,
    ) as fl:
        fl.deploy("chat", model_a, replicas=2)
        fl.route(
            "fallback",
            {
                "rules": [{"name": "default", "backends": [{"deployment": "nowhere"}]}],
                "fallback": {"when": ["Unavailable"], "backends": [{"deployment": "chat"}]},
            },
        )
        fl.wait_ready("chat", replicas=2)
        key = fl.key(f"{fl.ws.label}-scrape", team="platform", requestsPerMinute=600)
        fl.gateway = gws.start_gateway(cluster.gateway_kubeconfig, root / "gateway")
        gw = fl.gateway

        def key_known() -> bool:
            try:
                return gw.openai(api_key=key, max_retries=0).models.list() is not None
            except openai.AuthenticationError:
                return False

        gw.wait_for("the API key", key_known, timeout=60)

        values = ["--set=metrics.agents.serviceMonitor.bearerTokenSecret.name=agent-scrape"]
        found = monitors(helm_cli, namespace, *values)
        loopback = {
            "source_labels": ["__address__"],
            "regex": r"loopback\.localhost:(\d+)",
            "target_label": "__address__",
            "replacement": "127.0.0.1:$1",
        }
        jobs = promconfig.scrape_configs(
            found[f"{RELEASE}-agents"],
            kubeconfig=cluster.kubeconfig,
            token_files={"agent-scrape": token_file},
            extra_relabel=[loopback],
        )
        assert gw.metrics_url is not None
        jobs += [
            promconfig.static_job(
                found[f"{RELEASE}-operator"],
                target=f"127.0.0.1:{op_port}",
                labels={"namespace": namespace, "service": f"{RELEASE}-operator-metrics"},
            ),
            promconfig.static_job(
                found[f"{RELEASE}-gateway"],
                target=gw.metrics_url.removeprefix("http://"),
                labels={"namespace": namespace, "service": f"{RELEASE}-gateway"},
            ),
        ]
        for job in jobs:
            job["scrape_interval"] = SCRAPE
        (root / "prometheus").mkdir()
        rules = yaml.safe_load(RULES.read_text())["spec"]
        (root / "prometheus" / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
        config = {
            "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE},
            "rule_files": ["rules.yaml"],
            "scrape_configs": jobs,
        }
        with prom.running(config, root / "prometheus") as server:

            def agents_up() -> bool:
                up = server.query('up{endpoint="http-metrics"} == 1')
                return len(up) == len(fl.nodes)

            def seen() -> str:
                published = fl.cluster.kubectl(
                    "get", "services,endpointslices", "-n", namespace, "-o", "wide", check=False
                ).stdout
                targets = [
                    (t["scrapePool"], t["labels"], t["health"], t.get("lastError"))
                    for t in server.targets()
                ]
                dropped = server.api("targets", state="dropped")["droppedTargets"][:3]
                return f"targets {targets}\ndropped {dropped}\npublished:\n{published}"

            prom.wait("both agents scraped", agents_up, timeout=90, explain=seen)
            traffic(fl, key)
            time.sleep(5)  # a few more scrapes after the last request
            yield Scraped(prometheus=server, fleet=fl, namespace=namespace)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_prometheus_finds_every_agent_through_the_published_endpointslices(
    scraped: Scraped,
) -> None:
    fl = scraped.fleet
    agents = [
        t for t in scraped.prometheus.targets() if t["labels"].get("endpoint") == "http-metrics"
    ]
    assert {t["labels"]["node"] for t in agents} == set(fl.nodes)
    for target in agents:
        labels, meta = target["labels"], target["discoveredLabels"]
        assert target["health"] == "up", target.get("lastError")
        assert labels["instance"] == labels["node"]  # the dashboard's Agent variable
        assert labels["namespace"] == scraped.namespace
        assert meta["__meta_kubernetes_endpointslice_address_type"] == "FQDN"  # loopback agents
        agent = fl.nodes[labels["node"]]
        assert target["scrapeUrl"] == f"http://127.0.0.1:{agent.control_port}/metrics"
    services = json.loads(
        fl.cluster.kubectl("get", "services", "-n", scraped.namespace, "-o", "json").stdout
    )["items"]
    published = {
        s["metadata"]["annotations"][publishing.NODE_ANNOTATION]: s
        for s in services
        if s["metadata"]["labels"].get("app.kubernetes.io/component") == "agent-metrics"
    }
    assert set(published) == set(fl.nodes)
    for node, service in published.items():
        assert service["spec"]["clusterIP"] == "None"  # headless, no selector
        assert service["spec"]["ipFamilyPolicy"] == "SingleStack"  # else FQDN slices are dropped
        assert "selector" not in service["spec"]
        (owner,) = service["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("InferenceNode", node)


def dashboard_queries() -> list[pytest.ParameterSet]:
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        for i, target in enumerate(panel.get("targets", [])):
            out.append(pytest.param(target["expr"], id=f"{panel['title']}#{i}"))
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            metric = re.match(r"label_values\((\w+), *(\w+)\)", var["query"]["query"])
            assert metric, var
            out.append(pytest.param(f"count by ({metric[2]}) ({metric[1]})", id=f"${var['name']}"))
    return out


@pytest.mark.parametrize("expr", dashboard_queries())
def test_every_dashboard_query_returns_data_from_the_fleet(scraped: Scraped, expr: str) -> None:
    query = expr
    for variable, value in VARIABLES.items():
        query = query.replace(variable, value)
    assert "$" not in query, query
    result = scraped.prometheus.query(query)
    assert result, f"no data for {query}"


def test_the_macs_own_series_carry_their_node_name(scraped: Scraped) -> None:
    nodes = set(scraped.fleet.nodes)
    for metric in (
        "mlxfleet_agent_uptime_seconds",
        "mlxfleet_agent_memory_used_bytes",
        'mlxfleet_agent_memory_pressure{level="normal"}',
        "mlxfleet_agent_power_watts",
        "mlxfleet_agent_telemetry_buffered_intervals",
        'mlxfleet_agent_thermal_pressure{level="nominal"}',
        "mlxfleet_agent_gpu_temperature_celsius",
    ):
        found = {s["metric"]["node"] for s in scraped.prometheus.query(metric)}
        assert found == nodes, metric
    served = scraped.prometheus.query("sum by (node) (mlxfleet_agent_requests_total)")
    assert {s["metric"]["node"] for s in served} == nodes  # both replicas took requests


def test_the_alert_rules_evaluate_and_none_fires_in_the_healthy_fleet(scraped: Scraped) -> None:
    groups = scraped.prometheus.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == len(
        [r for g in yaml.safe_load(RULES.read_text())["spec"]["groups"] for r in g["rules"]]
    )
    assert all(r["health"] == "ok" for r in rules), [r for r in rules if r["health"] != "ok"]
    firing = [a for a in scraped.prometheus.api("alerts")["alerts"] if a["state"] == "firing"]
    assert firing == []
    leader = scraped.prometheus.query("mlxfleet_operator_leader")
    assert [s["value"][1] for s in leader] == ["1"]  # a standalone operator acts
