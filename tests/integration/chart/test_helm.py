"""charts/mlxfleet with the real helm against a real API server (a bare one: helm owns it all).

Rendered output passes the server's validation (--dry-run=server, Pod Security `restricted`);
`helm install`, then the operator runs as a process with the chart's own identity (a token of the
chart's ServiceAccount: there is no kubelet) and reconciles; `helm upgrade` applies a changed
value and a CRD change; `helm uninstall` leaves nothing behind but the CRDs it is told to keep.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_operator.dev import controlplane, processes
from tests.e2e.conftest import Agent, wait_for
from tests.support.helm import (
    AGENTS,
    CHART,
    NAMESPACE,
    RELEASE,
    REPO,
    ChartOperator,
    Helm,
    chart_copy,
    ensure_namespace,
    kinds,
    objects,
)

pytestmark = pytest.mark.cluster

PROMETHEUS_CRDS = (
    "servicemonitors.monitoring.coreos.com",
    "podmonitors.monitoring.coreos.com",
    "prometheusrules.monitoring.coreos.com",
)
FAST = ("--set=operator.pollSeconds=1", "--set=operator.misses=2")
OPERATOR = "mlxfleet-operator"


def install_prometheus_crds(plane: controlplane.ControlPlane, folder: Path) -> None:
    plane.kubectl("apply", "--server-side", f"--filename={folder}")
    plane.wait_established(*PROMETHEUS_CRDS)


def remove_prometheus_crds(plane: controlplane.ControlPlane) -> None:
    for name in PROMETHEUS_CRDS:
        plane.kubectl("delete", "crd", name, "--ignore-not-found", "--wait=true")


def test_every_rendering_passes_server_side_validation(
    helm_cli: Helm,
    bare_cluster: controlplane.ControlPlane,
    prometheus_crds: Path,
    tmp_path: Path,
) -> None:
    """Defaults, everything on, and the HA + gateway branches (as they will ship) are accepted
    by the API server as the objects they are, in a namespace enforcing `restricted`."""
    ensure_namespace(bare_cluster)
    install_prometheus_crds(bare_cluster, prometheus_crds)
    future = chart_copy(tmp_path, leader_election=True, gateway=True)
    variants = {
        "defaults": (CHART, ()),
        "everything": (
            CHART,
            (
                "--set=reports.enabled=true",
                "--set=metrics.podMonitor.enabled=true",
                "--set=namespace.create=true",
                "--api-versions=monitoring.coreos.com/v1/ServiceMonitor",
                "--api-versions=monitoring.coreos.com/v1/PodMonitor",
                "--api-versions=monitoring.coreos.com/v1/PrometheusRule",
                "--set=metrics.agents.serviceMonitor.bearerTokenSecret.name=agent-scrape",
                "--set=metrics.agents.serviceMonitor.tlsConfig.insecureSkipVerify=true",
            ),
        ),
        "ha-and-gateway": (
            future,
            (
                "--set=operator.replicas=2",
                "--set=operator.leaderElection.enabled=true",
                "--set=gateway.enabled=true",
                "--api-versions=monitoring.coreos.com/v1/ServiceMonitor",
                "--api-versions=monitoring.coreos.com/v1/PrometheusRule",
            ),
        ),
    }
    seen: set[str] = set()
    for name, (chart, values) in variants.items():
        rendered = helm_cli(
            "template", "dryrun", str(chart), f"--namespace={NAMESPACE}", *values
        ).stdout
        seen |= set(kinds(objects(rendered)))
        proc = bare_cluster.kubectl(
            "apply", "--dry-run=server", "-f", "-", input=rendered, check=False
        )
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        assert "PodSecurity" not in proc.stderr, f"{name}: {proc.stderr}"
        assert proc.stdout.count("(server dry run)") == len(objects(rendered)), proc.stdout
    assert {
        "CustomResourceDefinition",
        "Deployment",
        "CronJob",
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "PodDisruptionBudget",
        "Namespace",
    } <= seen


# ----------------------------------------------------------------------------- lifecycle


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    control, data = processes.free_ports(2)
    (tmp_path / "models").mkdir()
    one = Agent(
        name="mac-1",
        root=tmp_path / "agent",
        models_root=tmp_path / "models",
        control_port=control,
        data_port=data,
        token=secrets.token_urlsafe(24),
    )
    one.start()
    yield one
    one.stop()


def get(plane: controlplane.ControlPlane, *args: str) -> dict[str, Any]:
    out = plane.kubectl("get", *args, "-o", "json", check=False).stdout
    return dict(json.loads(out)) if out.strip() else {}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind]
    return found[0] if found else {}


def release_objects(helm: Helm) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of every object in the release's manifest."""
    manifest = helm("get", "manifest", RELEASE, f"--namespace={NAMESPACE}").stdout
    return sorted(
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
        for d in objects(manifest)
    )


def exists(plane: controlplane.ControlPlane, kind: str, namespace: str, name: str) -> bool:
    ns = [f"--namespace={namespace}"] if namespace else []
    proc = plane.kubectl("get", kind, name, *ns, "-o", "name", check=False)
    assert proc.returncode == 0 or "NotFound" in proc.stderr, proc.stderr
    return proc.returncode == 0


def labelled_leftovers(plane: controlplane.ControlPlane) -> list[str]:
    """Every object in the cluster, of every listable type, that Helm created (managed-by)."""
    types = plane.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    types = [t for t in types if t not in ("events", "events.events.k8s.io")]
    out = plane.kubectl(
        "get", ",".join(types), "--all-namespaces", "-l", "app.kubernetes.io/managed-by=Helm",
        "-o", "name",
    ).stdout  # fmt: skip
    return sorted(out.split())


def uninstall_release(
    helm: Helm, plane: controlplane.ControlPlane
) -> subprocess.CompletedProcess[str]:
    """`helm uninstall --wait`, after listing our kinds once.

    kube-apiserver 1.37.2 here twice left a CRD Terminating for good ("could not list instances:
    storage is (re)initializing") when it was deleted before anything had listed its objects:
    the CRD finalizer then builds the kind's watch cache itself. Listing first avoids that path.
    """
    kinds = (
        "inferencenodes.mlxfleet.io,modeldeployments.mlxfleet.io,swapplans.mlxfleet.io,"
        "modeldemands.mlxfleet.io"
    )
    wait_for(
        "our kinds listable",
        lambda: plane.kubectl("get", kinds, "-A", check=False).returncode == 0,
        timeout=30,
    )
    proc = helm("uninstall", RELEASE, f"--namespace={NAMESPACE}", "--wait", "--timeout=90s",
                check=False)  # fmt: skip
    if proc.returncode != 0:
        crds = plane.kubectl("get", "crd", "-o", "yaml").stdout
        raise AssertionError(f"helm uninstall failed: {proc.stderr}\n{crds[-3000:]}")
    return proc


def old_chart(dest: Path) -> Path:
    """The chart as it was before the scale subresource: the CRD change an upgrade must apply."""
    chart = chart_copy(dest)
    crd = chart / "files" / "crds" / "modeldeployments.mlxfleet.io.yaml"
    text = crd.read_text()
    scale = (
        "      scale:\n"
        "        specReplicasPath: .spec.replicas\n"
        "        statusReplicasPath: .status.replicas\n"
        "        labelSelectorPath: .status.selector\n"
    )
    assert scale in text
    crd.write_text(text.replace(scale, ""))
    return chart


def test_install_run_upgrade_uninstall(
    helm_cli: Helm,
    bare_cluster: controlplane.ControlPlane,
    prometheus_crds: Path,
    agent: Agent,
    tmp_path: Path,
) -> None:
    plane, helm = bare_cluster, helm_cli.on(bare_cluster)
    remove_prometheus_crds(plane)  # first without the Prometheus Operator
    ensure_namespace(plane)
    operator = ChartOperator(plane, tmp_path / "operator")
    try:
        # --- install (the chart of the previous version: no scale subresource) --------------
        helm("install", RELEASE, str(old_chart(tmp_path / "old")), f"--namespace={NAMESPACE}",
             "--set=reports.enabled=true", *FAST)  # fmt: skip
        installed = release_objects(helm)
        assert [k for k, _, _ in installed if k == "CustomResourceDefinition"] == [
            "CustomResourceDefinition"
        ] * 5  # ModelDeployment, InferenceNode, SwapPlan, ModelRoute, ModelDemand
        assert not {"ServiceMonitor", "PodMonitor"} & {k for k, _, _ in installed}
        for kind, namespace, name in installed:
            assert exists(plane, kind, namespace, name), (kind, namespace, name)
        plane.wait_established()

        # --- the operator, as the chart's ServiceAccount, with the rendered flags -----------
        args = operator.start()
        assert {"--all-namespaces", "--poll-seconds=1", "--misses=2"} <= set(args)
        assert "--standalone" not in args  # elected, on the chart's Lease with the chart's RBAC
        wait_for("operator liveness (Ready)", operator.ready, timeout=60)
        whoami = subprocess.run(
            [plane.kubectl_path, f"--kubeconfig={operator.kubeconfig()}", "auth", "whoami",
             "-o", "json"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout  # fmt: skip
        user = json.loads(whoami)["status"]["userInfo"]["username"]
        assert user == f"system:serviceaccount:{NAMESPACE}:{OPERATOR}"

        def holder() -> str:
            proc = plane.kubectl("-n", NAMESPACE, "get", "lease", OPERATOR, "-o", "json",
                                 check=False)  # fmt: skip
            return (
                str(json.loads(proc.stdout)["spec"].get("holderIdentity", ""))
                if (proc.returncode == 0)
                else ""
            )

        wait_for(  # the chart's Lease RBAC lets it lead (identity: the downward API's pod name)
            "the operator holds the chart's Lease", lambda: holder().startswith(f"{OPERATOR}-1_")
        )

        plane.kubectl("-n", AGENTS, "create", "secret", "generic", "mac-1-agent",
                      f"--from-literal=token={agent.token}")  # fmt: skip
        plane.kubectl("-n", AGENTS, "label", "secret", "mac-1-agent",
                      "mlxfleet.io/agent-credentials=true")  # fmt: skip
        node = {
            "apiVersion": "mlxfleet.io/v1alpha1",
            "kind": "InferenceNode",
            "metadata": {"name": "mac-1", "labels": {"fleet": "chart"}},
            "spec": {"agent": {"url": agent.url, "tokenSecretRef": {"name": "mac-1-agent"}}},
        }
        plane.kubectl("apply", "-f", "-", input=json.dumps(node))
        wait_for(
            "InferenceNode Ready through the chart's RBAC (reads its token Secret)",
            lambda: (
                condition(get(plane, "inferencenode", "mac-1"), "Ready").get("reason")
                == "HeartbeatOK"
            ),
        )
        target = "mlxfleet-agent-mac-1"
        slices = f"kubernetes.io/service-name={target}"

        def published() -> bool:
            service = get(plane, "-n", NAMESPACE, "service", target)
            labels = service.get("metadata", {}).get("labels", {})
            found = get(plane, "-n", NAMESPACE, "endpointslices", "-l", slices).get("items")
            return bool(found) and labels.get("app.kubernetes.io/component") == "agent-metrics"

        # metrics.agents.publish: its scrape target, written with the chart's RBAC
        wait_for("the agent published as a scrape target in the release namespace", published)
        deployment = {
            "apiVersion": "mlxfleet.io/v1alpha1",
            "kind": "ModelDeployment",
            "metadata": {"name": "chat", "namespace": "default"},
            "spec": {
                "model": {"source": "file:///nowhere/model"},
                "replicas": 1,
                "placement": {"nodeSelector": {"fleet": "elsewhere"}},
            },
        }
        plane.kubectl("apply", "-f", "-", input=json.dumps(deployment))
        wait_for(
            "ModelDeployment status written",
            lambda: (
                get(plane, "-n", "default", "mdep", "chat")
                .get("status", {})
                .get("observedGeneration")
                == 1
            ),
        )
        no_scale = plane.kubectl("-n", "default", "scale", "mdep/chat", "--replicas=0", check=False)
        assert no_scale.returncode != 0  # the old CRD has no scale subresource

        # --- upgrade: the current chart (CRD change), a changed value, Prometheus present ---
        install_prometheus_crds(plane, prometheus_crds)
        helm("upgrade", RELEASE, str(CHART), f"--namespace={NAMESPACE}",
             "--set=reports.enabled=true", "--set=reports.weekly.schedule=0 5 * * 1",
             "--set=operator.logLevel=DEBUG", *FAST)  # fmt: skip
        upgraded = release_objects(helm)
        assert ("ServiceMonitor", NAMESPACE, OPERATOR) in upgraded
        assert exists(plane, "servicemonitor", NAMESPACE, OPERATOR)
        crd = get(plane, "crd", "modeldeployments.mlxfleet.io")
        assert crd["spec"]["versions"][0]["subresources"]["scale"] == {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
        weekly = get(plane, "-n", NAMESPACE, "cronjob", "mlxfleet-weekly-report")
        assert weekly["spec"]["schedule"] == "0 5 * * 1"
        operator.stop()
        assert "--log-level=DEBUG" in operator.start()  # the new pod's flags
        wait_for("operator Ready after the upgrade", operator.ready, timeout=60)
        plane.kubectl("-n", "default", "scale", "mdep/chat", "--replicas=0")
        scaled = wait_for(
            "operator observes the scaled generation",
            lambda: (
                (d := get(plane, "-n", "default", "mdep", "chat"))
                and d["metadata"]["generation"] == 2
                and d["status"].get("observedGeneration") == 2
                and d
            ),
        )
        assert scaled["spec"]["replicas"] == 0
        assert scaled["status"]["selector"] == "mlxfleet.io/deployment=chat"

        # --- our objects go while the operator runs (its finalizers) -------------------------
        plane.kubectl("-n", "default", "delete", "mdep", "chat", "--timeout=60s")
        plane.kubectl("delete", "inferencenode", "mac-1", "--timeout=60s")
        plane.kubectl("-n", AGENTS, "delete", "secret", "mac-1-agent")
    finally:
        operator.stop()

    # --- uninstall: nothing left but the CRDs it was told to keep --------------------------
    before = release_objects(helm)
    uninstall = uninstall_release(helm, plane)
    assert "kept due to the resource policy" in uninstall.stdout
    for kind, namespace, name in before:
        assert exists(plane, kind, namespace, name) == (kind == "CustomResourceDefinition"), name
    assert labelled_leftovers(plane) == [
        f"customresourcedefinition.apiextensions.k8s.io/{p}.mlxfleet.io"
        for p in ("inferencenodes", "modeldemands", "modeldeployments", "modelroutes", "swapplans")
    ]
    assert plane.kubectl("-n", NAMESPACE, "get", "secrets", "-l", "owner=helm", "-o",
                         "name").stdout.strip() == ""  # fmt: skip

    # --- install again: the kept CRDs are adopted; crds.keep=false removes them at the end --
    helm("install", RELEASE, str(CHART), f"--namespace={NAMESPACE}", "--set=crds.keep=false")
    uninstall_release(helm, plane)
    wait_for("no object of the release left", lambda: labelled_leftovers(plane) == [])
    assert "mlxfleet.io" not in plane.kubectl("get", "crd", "-o", "name").stdout


def test_a_kustomize_install_moves_under_helm(
    helm_cli: Helm, bare_cluster: controlplane.ControlPlane, tmp_path: Path
) -> None:
    """docs/upgrading.md: adopt `kubectl apply -f crds` + `-k manifests/base` (and the report
    CronJobs of `-k manifests/cronjobs`) into a release."""
    plane, helm = bare_cluster, helm_cli.on(bare_cluster)
    ensure_namespace(plane, restricted=False)
    base, cronjobs = REPO / "manifests" / "base", REPO / "manifests" / "cronjobs"
    plane.kubectl("apply", "--server-side", f"--filename={REPO / 'crds'}")
    plane.kubectl("apply", "-k", str(base))
    plane.kubectl("apply", "-k", str(cronjobs))
    reports = ("--values", str(cronjobs / "chart-values.yaml"))
    refused = helm("install", RELEASE, str(CHART), f"--namespace={NAMESPACE}", *reports,
                   check=False)  # fmt: skip
    assert "invalid ownership metadata" in refused.stderr
    # as docs/upgrading.md: every object but the namespaces, each in its own namespace (the base
    # spans mlxfleet-system and mlxfleet-agents), in one List file
    items = [
        item
        for source in (("-f", str(REPO / "crds")), ("-k", str(base)), ("-k", str(cronjobs)))
        for item in json.loads(plane.kubectl("get", *source, "-o", "json").stdout)["items"]
        if item["kind"] != "Namespace"
    ]
    assert ("ClusterRole", "mlxfleet-reports") in {
        (i["kind"], i["metadata"]["name"]) for i in items
    }
    assert {i["metadata"].get("namespace") for i in items} == {None, NAMESPACE, AGENTS}
    adopt = tmp_path / "adopt.json"
    adopt.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    plane.kubectl("annotate", "--overwrite", "-f", str(adopt),
                  f"meta.helm.sh/release-name={RELEASE}",
                  f"meta.helm.sh/release-namespace={NAMESPACE}")  # fmt: skip
    plane.kubectl("label", "--overwrite", "-f", str(adopt),
                  "app.kubernetes.io/managed-by=Helm")  # fmt: skip
    # the kustomize base holds the gateway's identity too: the release takes it with the gateway
    helm("install", RELEASE, str(CHART), f"--namespace={NAMESPACE}", "--set=crds.keep=false",
         "--set=gateway.enabled=true", "--set=operator.providerKeySecrets={openai}",
         *reports)  # fmt: skip
    deployment = get(plane, "-n", NAMESPACE, "deployment", OPERATOR)
    assert deployment["metadata"]["labels"]["helm.sh/chart"].startswith("mlxfleet-")
    weekly = get(plane, "-n", NAMESPACE, "cronjob", "mlxfleet-weekly-report")
    assert weekly["metadata"]["labels"]["helm.sh/chart"].startswith("mlxfleet-")
    uninstall_release(helm, plane)
    wait_for("no object of the release left", lambda: labelled_leftovers(plane) == [])
    assert "mlxfleet.io" not in plane.kubectl("get", "crd", "-o", "name").stdout
