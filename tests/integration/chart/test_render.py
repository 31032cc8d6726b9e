"""charts/mlxfleet rendered by the real helm: lint, what each value renders, what it refuses.

No API server here (tests/integration/chart/test_helm.py installs it into one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import CHART, NAMESPACE, REPO, Helm, chart_copy, kinds, one

pytestmark = pytest.mark.tools

EVERYTHING = (
    "--set=reports.enabled=true",
    "--set=metrics.podMonitor.enabled=true",
    "--set=namespace.create=true",
)
HA = ("--set=operator.replicas=2", "--set=operator.leaderElection.enabled=true")
STANDALONE = ("--set=operator.replicas=1", "--set=operator.leaderElection.enabled=false")
MONITORING_APIS = (
    "--api-versions=monitoring.coreos.com/v1/ServiceMonitor",
    "--api-versions=monitoring.coreos.com/v1/PodMonitor",
    "--api-versions=monitoring.coreos.com/v1/PrometheusRule",
)


@pytest.mark.parametrize(
    ("values", "ships"),
    [
        pytest.param((), {}, id="defaults"),
        pytest.param(EVERYTHING, {}, id="everything-on"),
        pytest.param(("--set=crds.install=false", "--set=crds.keep=false"), {}, id="no-crds"),
        pytest.param(STANDALONE, {}, id="standalone"),
        pytest.param((*HA, "--set=gateway.enabled=true"), {"le": True, "gw": True}, id="ha-gw"),
    ],
)
def test_helm_lint_is_clean(
    helm_cli: Helm, tmp_path: Path, values: tuple[str, ...], ships: dict[str, bool]
) -> None:
    chart = CHART
    if ships:
        chart = chart_copy(tmp_path, leader_election=ships["le"], gateway=ships["gw"])
    proc = helm_cli("lint", "--strict", str(chart), *values)
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout
    assert "[ERROR]" not in proc.stdout


def test_defaults_render_the_operator_crds_and_dashboard(helm_cli: Helm) -> None:
    docs = helm_cli.template()
    assert kinds(docs) == [
        "ClusterRole",
        "ClusterRole",  # join: the bootstrap identity may create InferenceNodes
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "ConfigMap",
        "CustomResourceDefinition",
        "CustomResourceDefinition",
        "CustomResourceDefinition",
        "CustomResourceDefinition",
        "CustomResourceDefinition",  # ModelDemand (the gateway's requests for sleeping models)
        "Deployment",
        "PodDisruptionBudget",
        "Role",  # the operator's Lease, by name
        "Role",  # the operator: agent tokens by name in the agents' namespace
        "Role",  # join: ... and Secrets in the agents' namespace
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    assert kinds(helm_cli.template("--set=join.enabled=false")).count("ClusterRole") == 1
    deployment = one(docs, "Deployment", "mlxfleet-operator")
    assert deployment["spec"]["replicas"] == 2  # leader election is on by default
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--standalone" not in container["args"]
    assert container["image"] == "ghcr.io/mlxfleet/operator:0.1.0"
    dashboard = one(docs, "ConfigMap", "mlxfleet-grafana-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (REPO / "manifests" / "grafana" / "mlxfleet-dashboard.json").read_text()
    assert dashboard["data"]["mlxfleet-dashboard.json"] == shipped.rstrip("\n")


def _without_policy(crd: dict[str, Any]) -> dict[str, Any]:
    meta = dict(crd["metadata"])
    meta.pop("annotations", None)
    return {**crd, "metadata": meta}


@pytest.mark.parametrize(
    ("values", "policy"),
    [
        pytest.param((), "keep", id="keep"),
        pytest.param(("--set=crds.keep=false",), None, id="delete-on-uninstall"),
    ],
)
def test_crds_are_the_generated_ones(
    helm_cli: Helm, values: tuple[str, ...], policy: str | None
) -> None:
    rendered = {
        d["metadata"]["name"]: d
        for d in helm_cli.template(*values)
        if d["kind"] == "CustomResourceDefinition"
    }
    generated = {
        d["metadata"]["name"]: d
        for d in (yaml.safe_load(p.read_text()) for p in sorted((REPO / "crds").glob("*.yaml")))
    }
    assert sorted(rendered) == sorted(generated)
    for name, crd in rendered.items():
        annotations = crd["metadata"].get("annotations") or {}
        assert annotations.get("helm.sh/resource-policy") == policy
        assert _without_policy(crd) == generated[name]
    assert "CustomResourceDefinition" not in kinds(helm_cli.template("--set=crds.install=false"))


def test_monitors_render_only_where_the_prometheus_operator_serves_them(helm_cli: Helm) -> None:
    monitoring = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert monitoring.isdisjoint(kinds(helm_cli.template(*EVERYTHING)))
    docs = helm_cli.template(*EVERYTHING, *MONITORING_APIS)
    assert "PrometheusRule" in kinds(docs)
    monitor = one(docs, "ServiceMonitor", "mlxfleet-operator")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True  # the deployments' namespace
    service = one(docs, "Service", "mlxfleet-operator-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    pod_monitor = one(docs, "PodMonitor")
    deployment = one(docs, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] in {p["name"] for p in ports}
    quiet = helm_cli.template(
        *MONITORING_APIS,
        "--set=metrics.serviceMonitor.enabled=false",
        "--set=metrics.agents.serviceMonitor.enabled=false",
        "--set=alerts.enabled=false",
    )
    assert {"ServiceMonitor", "PrometheusRule"}.isdisjoint(kinds(quiet))


def test_the_agents_monitor_selects_what_the_operator_publishes(helm_cli: Helm) -> None:
    """The operator publishes agents with `publishing.of_agent` (labels, port names, the node
    annotation); the ServiceMonitor selects exactly those, sends the token from the Secret named
    in the values and passes tlsConfig to the https endpoint only."""
    from mlxfleet_operator.adapters import publishing

    docs = helm_cli.template(
        *MONITORING_APIS,
        "--set=metrics.agents.serviceMonitor.bearerTokenSecret.name=agent-scrape",
        "--set=metrics.agents.serviceMonitor.tlsConfig.insecureSkipVerify=true",
    )
    deployment = one(docs, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--agent-metrics-namespace={NAMESPACE}" in args
    monitor = one(docs, "ServiceMonitor", "mlxfleet-agents")
    pub = publishing.of_agent(
        {"metadata": {"name": "mac-1", "uid": "u"}}, namespace=NAMESPACE, scheme="https", port=1
    )
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pub.labels.items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    by_port = {e["port"]: e for e in monitor["spec"]["endpoints"]}
    assert set(by_port) == set(publishing.AGENT_METRICS_PORT_NAMES.values())
    for scheme, port in publishing.AGENT_METRICS_PORT_NAMES.items():
        endpoint = by_port[port]
        assert endpoint["scheme"] == scheme
        assert endpoint["authorization"]["credentials"] == {"name": "agent-scrape", "key": "token"}
        assert ("tlsConfig" in endpoint) is (scheme == "https")
        node = publishing.NODE_ANNOTATION.replace(".", "_").replace("/", "_")
        sources = {tuple(r["sourceLabels"]) for r in endpoint["relabelings"]}
        assert sources == {(f"__meta_kubernetes_service_annotation_{node}",)}
        assert {r["targetLabel"] for r in endpoint["relabelings"]} == {"node", "instance"}
    unpublished = helm_cli.template(*MONITORING_APIS, "--set=metrics.agents.publish=false")
    assert not [d for d in unpublished if d["metadata"]["name"] == "mlxfleet-agents"]
    args = one(unpublished, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--agent-metrics-namespace")]


def test_the_gateway_monitor_selects_the_gateway_service(helm_cli: Helm) -> None:
    docs = helm_cli.template(*MONITORING_APIS, "--set=gateway.enabled=true")
    monitor = one(docs, "ServiceMonitor", "mlxfleet-gateway")
    service = one(docs, "Service", "mlxfleet-gateway")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert "mlxfleet-gateway" not in {
        d["metadata"]["name"]
        for d in helm_cli.template(*MONITORING_APIS)
        if d["kind"] == "ServiceMonitor"
    }


def test_reports_render_the_cronjobs_with_the_bucket_and_the_config(helm_cli: Helm) -> None:
    docs = helm_cli.template(
        "--set=reports.enabled=true",
        "--set=reports.telemetry.bucket=fleet-bucket",
        "--set=reports.weekly.schedule=0 5 * * 1",
        "--set=reports.monthly.enabled=false",
        "--set=reports.config.namespaces.team-a=Team A",
    )
    reports = [
        d for d in docs if d["kind"] == "CronJob" and "compaction" not in d["metadata"]["name"]
    ]
    (weekly,) = reports
    assert weekly["metadata"]["name"] == "mlxfleet-weekly-report"
    assert weekly["spec"]["schedule"] == "0 5 * * 1"
    config = one(docs, "ConfigMap", "mlxfleet-reports")
    assert config["data"]["MLXFLEET_TELEMETRY_BUCKET"] == "fleet-bucket"
    assert "MLXFLEET_TELEMETRY_ENDPOINT_URL" not in config["data"]  # empty: AWS S3
    assert yaml.safe_load(config["data"]["report.yaml"])["namespaces"] == {"team-a": "Team A"}


def test_report_delivery_options_reach_the_cronjobs_as_the_cli_reads_them(helm_cli: Helm) -> None:
    """reports.delivery becomes report.yaml's `delivery` section (parsed by the report command's
    own config model), its Secret is in the Jobs' environment and the SMTP CA is mounted where
    the section points; off, nothing of it renders."""
    from mlxfleet_operator.reports import config as report_config

    docs = helm_cli.template(
        "--set=reports.enabled=true",
        "--set=reports.delivery.enabled=true",
        "--set=reports.delivery.email.to={cfo@example.com,platform@example.com}",
        "--set=reports.delivery.email.from=fleet@example.com",
        "--set=reports.delivery.email.smtpHost=smtp.example.com",
        "--set=reports.delivery.email.caConfigMap=smtp-ca",
        "--set=reports.delivery.webhook.enabled=true",
        "--set=reports.delivery.pushgateway=http://pushgateway.monitoring:9091",
    )
    text = one(docs, "ConfigMap", "mlxfleet-reports")["data"]["report.yaml"]
    spec = report_config.ReportConfig.from_yaml(text).delivery
    assert spec is not None
    assert spec.email is not None
    assert spec.webhook is not None
    assert spec.email.to == ["cfo@example.com", "platform@example.com"]
    assert (spec.email.security, spec.email.port) == ("starttls", 587)
    assert spec.pushgateway == "http://pushgateway.monitoring:9091"
    for job in (d for d in docs if d["kind"] == "CronJob" and "report" in d["metadata"]["name"]):
        pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        secrets = {e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e}
        assert "mlxfleet-report-delivery" in secrets
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert str(spec.email.ca_file).startswith(mounts["smtp-ca"] + "/")
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["smtp-ca"]["configMap"]["name"] == "smtp-ca"
    quiet = helm_cli.template("--set=reports.enabled=true")
    assert "delivery" not in yaml.safe_load(
        one(quiet, "ConfigMap", "mlxfleet-reports")["data"]["report.yaml"]
    )
    refused = helm_cli(
        "template", "m", str(CHART), "--set=reports.enabled=true",
        "--set=reports.delivery.enabled=true", check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "reports.delivery.email.to or reports.delivery.webhook.enabled" in refused.stderr


def test_reports_read_the_inference_nodes_and_nothing_else(helm_cli: Helm) -> None:
    """The CronJobs run `--from-cluster` (costs from InferenceNode spec.cost) as their own
    ServiceAccount, which may list InferenceNodes and do nothing else."""
    docs = helm_cli.template("--set=reports.enabled=true")
    jobs = [d for d in docs if d["kind"] == "CronJob"]
    for job in (d for d in jobs if "compaction" not in d["metadata"]["name"]):
        pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "mlxfleet-reports"
        assert pod["automountServiceAccountToken"] is True
        assert "--from-cluster" in pod["containers"][0]["command"]
    account = one(docs, "ServiceAccount", "mlxfleet-reports")
    assert account["automountServiceAccountToken"] is False  # other pods must opt in
    role = one(docs, "ClusterRole", "mlxfleet-reports")
    assert role["rules"] == [
        {"apiGroups": ["mlxfleet.io"], "resources": ["inferencenodes"], "verbs": ["list"]}
    ]
    binding = one(docs, "ClusterRoleBinding", "mlxfleet-reports")
    assert binding["roleRef"]["name"] == "mlxfleet-reports"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "mlxfleet-reports", "namespace": NAMESPACE}
    ]
    own = helm_cli.template(
        "--set=reports.enabled=true",
        "--set=reports.serviceAccount.create=false",
        "--set=reports.serviceAccount.name=reporter",
    )
    assert "reporter" not in {d["metadata"]["name"] for d in own if d["kind"] == "ServiceAccount"}
    assert one(own, "ClusterRoleBinding", "mlxfleet-reports")["subjects"][0]["name"] == "reporter"
    assert "mlxfleet-reports" not in {d["metadata"]["name"] for d in helm_cli.template()}


def test_operator_rbac_touches_only_what_it_owns(helm_cli: Helm) -> None:
    """Services and EndpointSlices: no watch, update or (for Services) list; it reads one by name
    to check it is its own. Secrets: get by name in one namespace, no list or watch."""
    docs = helm_cli.template()
    rules = one(docs, "ClusterRole", "mlxfleet-operator")["rules"]
    verbs = {(g, r): rule["verbs"] for rule in rules for g in rule["apiGroups"]
             for r in rule["resources"]}  # fmt: skip
    assert verbs[("", "services")] == ["get", "create", "patch", "delete"]
    assert verbs[("discovery.k8s.io", "endpointslices")] == [
        "get", "list", "create", "patch", "delete"
    ]  # fmt: skip
    assert ("", "secrets") not in verbs
    secrets = one(docs, "Role", "mlxfleet-operator-secrets")
    assert secrets["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]


@pytest.mark.parametrize(
    ("values", "names"),
    [
        pytest.param(
            ("--set=operator.leaderElection.enabled=false",), "operator.replicas", id="two-alone"
        ),
        pytest.param(("--set=operator.logLevel=LOUD",), "/operator/logLevel", id="schema-enum"),
        pytest.param(("--set=operator.replica=1",), "'replica' not allowed", id="schema-typo"),
        pytest.param(
            ("--set=reports.weekly.schedule=weekly",), "/reports/weekly/schedule", id="cron"
        ),
        pytest.param(("--set=operator.misses=0",), "/operator/misses", id="schema-minimum"),
    ],
)
def test_refusals_name_the_value(helm_cli: Helm, values: tuple[str, ...], names: str) -> None:
    proc = helm_cli("template", "mlxfleet", str(CHART), *values, check=False)
    assert proc.returncode != 0
    assert names in proc.stderr, proc.stderr


def test_operator_flags_follow_the_values(helm_cli: Helm) -> None:
    docs = helm_cli.template(
        "--set=operator.pollSeconds=2.5",
        "--set=operator.misses=4",
        "--set=operator.failoverDelaySeconds=0",
        "--set=operator.logLevel=DEBUG",
        "--set=operator.watchNamespaces={team-a,team-b}",
        "--set=operator.agentSecretsNamespace=agents",
    )
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == [
        "--namespace=team-a",
        "--namespace=team-b",
        "--lease-name=mlxfleet-operator",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--metrics-host=0.0.0.0",
        "--metrics-port=9090",
        "--agent-metrics-namespace=mlxfleet-system",
        "--log-level=DEBUG",
        "--fleet-key-file=/etc/mlxfleet/fleet-key/key",
        "--fleet-key-optional",
        "--poll-seconds=2.5",
        "--misses=4",
        "--failover-delay=0",
    ]
    role = one(docs, "Role", "mlxfleet-operator-secrets")
    assert role["metadata"]["namespace"] == "agents"
    assert (
        one(docs, "RoleBinding", "mlxfleet-operator-secrets")["subjects"][0]["namespace"]
        == NAMESPACE
    )


def test_agent_tokens_live_apart_from_the_gateway_by_default(
    helm_cli: Helm, tmp_path: Path
) -> None:
    """The gateway may read every Secret of the release namespace (its keys): by default the
    agents' token Secrets, which the operator reads and join creates, are in mlxfleet-agents;
    `namespace.create` renders both namespaces; "" keeps 0.1.0's layout."""
    chart = chart_copy(tmp_path, gateway=True)
    docs = helm_cli.template("--set=gateway.enabled=true", "--set=namespace.create=true",
                             chart=chart)  # fmt: skip
    agents = "mlxfleet-agents"
    for kind, name in (
        ("Role", "mlxfleet-operator-secrets"),
        ("RoleBinding", "mlxfleet-operator-secrets"),
        ("Role", "mlxfleet-join"),
        ("RoleBinding", "mlxfleet-join"),
    ):
        assert one(docs, kind, name)["metadata"]["namespace"] == agents, (kind, name)
    assert one(docs, "Role", "mlxfleet-gateway-keys")["metadata"]["namespace"] == NAMESPACE
    namespaces = [d["metadata"] for d in docs if d["kind"] == "Namespace"]
    assert [n["name"] for n in namespaces] == [NAMESPACE, agents]
    assert namespaces[1]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    validations = one(docs, "ValidatingAdmissionPolicy")["spec"]["validations"]
    policy = " ".join(f"{v['expression']} {v['message']}" for v in validations)
    assert f"tokenSecretRef.namespace == '{agents}'" in policy
    assert NAMESPACE not in policy
    for refused in ("metadata.labels", "metadata.annotations", "metadata.finalizers",
                    "metadata.ownerReferences", "immutable", "spec.approved: false",
                    "spec.unschedulable: true"):  # fmt: skip
        assert refused in policy, refused

    legacy = ("--set=operator.agentSecretsNamespace=", "--set=namespace.create=true")
    old = helm_cli.template(*legacy)
    assert one(old, "Role", "mlxfleet-operator-secrets")["metadata"]["namespace"] == NAMESPACE
    assert [d["metadata"]["name"] for d in old if d["kind"] == "Namespace"] == [NAMESPACE]


def test_leader_election_by_default(helm_cli: Helm) -> None:
    """Two replicas on the Lease named like the operator, rolled one at a time, a PDB, preferred
    anti-affinity, identity from the downward API; RBAC: create, and get/update of that one Lease
    in the release namespace only."""
    docs = helm_cli.template()
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "--standalone" not in container["args"]
    assert "--lease-name=mlxfleet-operator" in container["args"]
    fields = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container["env"]
        if "valueFrom" in e
    }
    assert fields == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    preferred = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (
        "requiredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["podAntiAffinity"]
    )
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels(deployment).items()
    lease = one(docs, "Role", "mlxfleet-operator-leader-election")
    assert lease["metadata"]["namespace"] == NAMESPACE
    assert lease["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["mlxfleet-operator"],
            "verbs": ["get", "update"],
        },
    ]
    binding = one(docs, "RoleBinding", "mlxfleet-operator-leader-election")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["subjects"][0]["name"] == "mlxfleet-operator"
    cluster = one(docs, "ClusterRole", "mlxfleet-operator")
    assert all("leases" not in rule["resources"] for rule in cluster["rules"])
    other = helm_cli.template("--set=fullnameOverride=ops")  # the Lease follows the name
    (container,) = one(other, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--lease-name=ops-operator" in container["args"]
    rules = one(other, "Role", "ops-operator-leader-election")["rules"]
    assert rules[1]["resourceNames"] == ["ops-operator"]


def test_standalone_when_election_is_off(helm_cli: Helm) -> None:
    docs = helm_cli.template(*STANDALONE)
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--standalone" in container["args"]
    assert not any(a.startswith("--lease-name") for a in container["args"])
    assert not any("valueFrom" in e for e in container["env"])
    assert "PodDisruptionBudget" not in kinds(docs)
    assert "mlxfleet-operator-leader-election" not in {d["metadata"]["name"] for d in docs}
    single = helm_cli.template("--set=operator.replicas=1")  # elected, alone: no PDB to block
    assert "PodDisruptionBudget" not in kinds(single)


def test_an_image_without_election_refuses_it(helm_cli: Helm, tmp_path: Path) -> None:
    old = chart_copy(tmp_path, leader_election=False)
    proc = helm_cli("template", "mlxfleet", str(old), check=False)
    assert proc.returncode != 0
    assert "operator.leaderElection.enabled" in proc.stderr, proc.stderr
    assert one(helm_cli.template(*STANDALONE, chart=old), "Deployment")["spec"]["replicas"] == 1


def test_gateway_branch(helm_cli: Helm) -> None:
    """Issue 9: 2 replicas, a PDB, probes, the fleet credential, a least-privilege identity."""
    docs = helm_cli.template("--set=gateway.enabled=true")
    deployment = one(docs, "Deployment", "mlxfleet-gateway")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "mlxfleet-gateway"
    (container,) = pod["containers"]
    assert container["command"] == ["mlxfleet-gateway"]
    assert container["args"] == [  # no --allow-anonymous: keys required
        "--listen=0.0.0.0:8080",
        "--metrics-listen=0.0.0.0:9090",
        "--fleet-key-file=/etc/mlxfleet/fleet-key/key",
        "--peers=2",
        "--name=$(POD_NAME)",
    ]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["fleet-key"]["secret"]["secretName"] == "mlxfleet-fleet-key"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert one(docs, "PodDisruptionBudget", "mlxfleet-gateway")["spec"]["minAvailable"] == 1
    service = one(docs, "Service", "mlxfleet-gateway")
    assert service["spec"]["selector"].items() <= pod_labels(deployment).items()
    assert one(docs, "ServiceAccount", "mlxfleet-gateway")
    cluster_role = one(docs, "ClusterRole", "mlxfleet-gateway")
    verbs = {v for rule in cluster_role["rules"] for v in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}
    resources = {r for rule in cluster_role["rules"] for r in rule["resources"]}
    assert resources == {"modeldeployments", "modelroutes", "inferencenodes"}
    single = helm_cli.template("--set=gateway.enabled=true", "--set=gateway.replicas=1")
    pdbs = {d["metadata"]["name"] for d in single if d["kind"] == "PodDisruptionBudget"}
    assert "mlxfleet-gateway" not in pdbs  # minAvailable 1 of 1 would block drains


def test_the_operator_looks_only_at_the_provider_keys_listed(helm_cli: Helm) -> None:
    """Issue 22 item 9: its `get` on Secrets in the release namespace read the fleet key; now
    only the names in operator.providerKeySecrets (none by default: no Role, since an empty
    resourceNames would mean every name), and never the fleet key."""
    names = {(d["kind"], d["metadata"]["name"]) for d in helm_cli.template()}
    assert ("Role", "mlxfleet-operator-provider-keys") not in names
    assert ("RoleBinding", "mlxfleet-operator-provider-keys") not in names
    docs = helm_cli.template("--set=operator.providerKeySecrets={openai,anthropic}")
    role = one(docs, "Role", "mlxfleet-operator-provider-keys")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["openai", "anthropic"],
            "verbs": ["get"],
        }
    ]
    assert one(docs, "RoleBinding", "mlxfleet-operator-provider-keys")["roleRef"]["name"] == (
        "mlxfleet-operator-provider-keys"
    )
    refused = helm_cli(
        "template",
        "mlxfleet",
        str(CHART),
        "--set=operator.providerKeySecrets={openai,mlxfleet-fleet-key}",
        check=False,
    )
    assert refused.returncode != 0
    assert "operator.providerKeySecrets: mlxfleet-fleet-key is gateway.fleetKeySecret" in (
        refused.stderr
    )
    # the layout where agent tokens share the release namespace: that Role covers it already
    legacy = helm_cli.template(
        "--set=operator.agentSecretsNamespace=", "--set=operator.providerKeySecrets={openai}"
    )
    assert ("Role", "mlxfleet-operator-provider-keys") not in {
        (d["kind"], d["metadata"]["name"]) for d in legacy
    }


EGRESS = (
    "--set=gateway.networkPolicy.enabled=true",
    "--set=gateway.networkPolicy.apiServer[0].cidr=10.0.0.10/32",
    "--set=gateway.networkPolicy.apiServer[0].ports={6443}",
    "--set=gateway.networkPolicy.agents[0].cidr=192.168.10.0/24",
    "--set=gateway.networkPolicy.agents[0].ports={8471}",
)


def test_the_gateway_egress_policy_is_off_by_default_and_renders_what_it_is_given(
    helm_cli: Helm, tmp_path: Path
) -> None:
    """Issue 22 item 9: a keyless external backend made the gateway POST anywhere its pod
    reaches; the chart ships an egress NetworkPolicy (off by default) that allows DNS, the API
    server, the agents and the listed destinations only."""
    chart = chart_copy(tmp_path, gateway=True)
    plain = helm_cli.template("--set=gateway.enabled=true", chart=chart)
    assert "NetworkPolicy" not in kinds(plain)
    docs = helm_cli.template(
        "--set=gateway.enabled=true",
        *EGRESS,
        "--set=gateway.networkPolicy.destinations[0].cidr=0.0.0.0/0",
        "--set=gateway.networkPolicy.destinations[0].except={10.0.0.0/8,169.254.0.0/16}",
        "--set=gateway.networkPolicy.destinations[0].ports={443}",
        chart=chart,
    )
    policy = one(docs, "NetworkPolicy", "mlxfleet-gateway-egress")
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Egress"]
    gateway = one(docs, "Deployment", "mlxfleet-gateway")
    assert spec["podSelector"]["matchLabels"].items() <= pod_labels(gateway).items()
    blocks = [(r["to"][0].get("ipBlock"), [p["port"] for p in r["ports"]]) for r in spec["egress"]]
    assert blocks == [
        (None, [53, 53]),
        ({"cidr": "10.0.0.10/32"}, [6443]),
        ({"cidr": "192.168.10.0/24"}, [8471]),
        ({"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "169.254.0.0/16"]}, [443]),
    ]
    for missing, flag in (("apiServer", EGRESS[1]), ("agents", EGRESS[3])):
        values = [v for v in EGRESS if missing not in v]
        assert flag not in values
        refused = helm_cli(
            "template", "mlxfleet", str(chart), "--set=gateway.enabled=true", *values, check=False
        )
        assert refused.returncode != 0
        assert f"gateway.networkPolicy.{missing}: list" in refused.stderr
    bad = helm_cli(
        "template",
        "mlxfleet",
        str(chart),
        "--set=gateway.enabled=true",
        *EGRESS,
        "--set=gateway.networkPolicy.agents[0].ports={0}",
        check=False,
    )
    assert bad.returncode != 0
    assert "/gateway/networkPolicy/agents/0/ports/0" in bad.stderr


def pod_labels(deployment: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels
