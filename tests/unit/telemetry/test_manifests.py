"""The Grafana dashboard and report CronJobs agree with the code they point at."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from mlxfleet_agent.telemetry import intervals, recorder
from mlxfleet_agent.telemetry import metrics as agent_metrics
from mlxfleet_gateway import metrics as gateway_metrics
from mlxfleet_operator.adapters import metrics as operator_metrics
from mlxfleet_operator.reports import cli, delivery

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "manifests" / "grafana" / "mlxfleet-dashboard.json"


def exposed_names() -> set[str]:
    """Every series name the agent, the operator, the gateway and the report job export, with
    each optional reading present (heat: the names defined for the host sampler)."""
    tel = recorder.Telemetry(idle_watts=1, busy_watts=2)
    tel.add_host_sample(
        intervals.HostSample(
            memory_total_bytes=8, memory_used_bytes=4, memory_available_bytes=4, pressure="normal"
        )
    )
    heat = agent_metrics.AgentMetrics()
    heat.add_host_collector(
        lambda: {"thermal": "fair", **{key: 1.0 for key, _ in agent_metrics.HOST_GAUGES}}
    )
    names: set[str] = set()
    gateway = gateway_metrics.GatewayMetrics()
    gateway.watch_keys(lambda: [gateway_metrics.KeyFacts("k", {"requests_per_minute": 0.1}, 1.0)])
    operator_metrics.observe_token_expiry("n", datetime(2030, 1, 1, tzinfo=UTC))
    record = delivery.Record(report="monthly-2026-10")
    record.channels["email"] = delivery.ChannelState(
        state="delivered", delivered_at=datetime.now(UTC)
    )
    registries = (
        tel.metrics.registry,
        heat.registry,
        operator_metrics.REGISTRY,
        gateway.registry,
        delivery.gauges(record),
    )
    for registry in registries:
        for family in registry.collect():
            names |= {sample.name for sample in family.samples}
            names.add(family.name)
            if family.type == "counter":
                names.add(family.name + "_total")
            if family.type == "histogram":
                names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
    return names


def test_every_dashboard_query_uses_a_metric_we_expose() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = set(re.findall(r"\bmlxfleet_[a-z_]+", " ".join(exprs)))
    assert used, "the dashboard queries nothing"
    missing = sorted(used - exposed_names())
    assert missing == []
    assert {
        "mlxfleet_agent_requests_total",
        "mlxfleet_operator_node_ready",
        "mlxfleet_gateway_requests_total",
        "mlxfleet_gateway_replica_up",
    } <= used


def test_every_series_the_alert_rules_read_is_one_we_export() -> None:
    rules = yaml.safe_load((REPO / "manifests" / "monitoring" / "prometheusrule.yaml").read_text())
    exprs = [r["expr"] for g in rules["spec"]["groups"] for r in g["rules"]]
    used = set(re.findall(r"\bmlxfleet_[a-z_]+", " ".join(exprs)))
    assert len(used) > 15
    assert sorted(used - exposed_names()) == []


@pytest.mark.parametrize("kind", ["weekly", "monthly"])
def test_cronjob_runs_a_command_the_cli_accepts(kind: str) -> None:
    doc = yaml.safe_load((REPO / "manifests" / "cronjobs" / f"{kind}-report.yaml").read_text())
    pod = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["command"]
    assert command[:3] == ["mlxfleet", "report", kind]
    args = cli._parser().parse_args(command[2:])
    assert args.write_back
    mounted = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(args.config.parent) in mounted
    assert str(args.out).startswith("/tmp")
    assert args.from_cluster  # nodes and cost inputs from the InferenceNodes
    rbac = list(yaml.safe_load_all((REPO / "manifests" / "cronjobs" / "rbac.yaml").read_text()))
    account = next(d for d in rbac if d["kind"] == "ServiceAccount")
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert account["automountServiceAccountToken"] is False  # only the report pods opt in
    assert pod["automountServiceAccountToken"] is True
    (role,) = (d for d in rbac if d["kind"] == "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": ["mlxfleet.io"], "resources": ["inferencenodes"], "verbs": ["list"]}
    ]
    refs = {next(iter(v.values()))["name"] for v in container["envFrom"]}
    assert refs == {"mlxfleet-reports", "mlxfleet-telemetry-credentials"}


def test_compaction_cronjob_runs_a_command_the_cli_accepts() -> None:
    folder = REPO / "manifests" / "cronjobs"
    doc = yaml.safe_load((folder / "telemetry-compaction.yaml").read_text())
    assert "telemetry-compaction.yaml" in (folder / "kustomization.yaml").read_text()
    pod = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["command"]
    assert command[:3] == ["mlxfleet", "report", "compact"]
    args = cli._parser().parse_args(command[2:])
    assert args.delete_raw
    assert args.retention_days >= 31
    assert args.days >= 2  # late telemetry of yesterday's day is joined in the next night
    assert pod["automountServiceAccountToken"] is False  # the bucket only, no API server
    assert doc["spec"]["concurrencyPolicy"] == "Forbid"
    refs = {next(iter(v.values()))["name"] for v in container["envFrom"]}
    assert refs == {"mlxfleet-reports", "mlxfleet-telemetry-compaction-credentials"}
    example = yaml.safe_load((folder / "telemetry-compaction-credentials.example.yaml").read_text())
    assert example["metadata"]["name"] == "mlxfleet-telemetry-compaction-credentials"
