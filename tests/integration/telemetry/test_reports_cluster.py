"""Reports priced from InferenceNodes on the real API server, as the CronJobs' own identity.

The report jobs' RBAC (manifests/cronjobs/rbac.yaml) is applied for real; the report runs with a
token of their ServiceAccount (TokenRequest), reads InferenceNodes with `--from-cluster` and the
telemetry from a real S3 bucket, and matches them by name.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlxfleet_operator.adapters import objectstore
from mlxfleet_operator.api import resources
from mlxfleet_operator.dev import controlplane
from mlxfleet_operator.reports import cli, fixture
from tests.support import docs
from tests.support import s3 as s3support

pytestmark = [pytest.mark.cluster, pytest.mark.s3]
REPO = Path(__file__).resolve().parents[3]
PREFIX = "cluster/telemetry"
SYSTEM = resources.OPERATOR_NAMESPACE
ACCOUNT = f"system:serviceaccount:{SYSTEM}:mlxfleet-reports"
STUDIO = {
    "purchasePriceUSD": 3999,
    "amortizationMonths": 36,
    "electricityUSDPerKWh": 0.30,
    "idlePowerWatts": 12,
    "busyPowerWatts": 95,
}
MINI = {**STUDIO, "purchasePriceUSD": 1399, "amortizationMonths": 24}


def _inference_node(name: str, tag: str, cost: dict[str, Any] | None) -> str:
    spec: dict[str, Any] = {
        "agent": {
            "url": f"https://{name}.lan:8470",
            "tokenSecretRef": {
                "name": f"{name}-agent",
                "namespace": resources.AGENT_SECRETS_NAMESPACE,
            },
        }
    }
    if cost is not None:
        spec["cost"] = cost
    return json.dumps(
        {
            "apiVersion": resources.API_VERSION,
            "kind": "InferenceNode",
            "metadata": {"name": name, "labels": {"report-test": tag}},
            "spec": spec,
        }
    )


@pytest.fixture(scope="module")
def fleet(
    cluster: controlplane.ControlPlane, s3_server: s3support.S3Server
) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(tag, bucket, fixture node -> InferenceNode name): three InferenceNodes, one without
    spec.cost, and the fixture month shipped under their names."""
    tag = secrets.token_hex(3)
    names = {n: f"rpt-{tag}-{n}" for n in ("studio-1", "mini-1", "mini-2")}
    costs = {"studio-1": STUDIO, "mini-1": MINI, "mini-2": None}
    proc = cluster.kubectl("apply", "--server-side", "-k", str(REPO / "manifests" / "cronjobs"))
    assert "clusterrole.rbac.authorization.k8s.io/mlxfleet-reports serverside-applied" in (
        proc.stdout
    )
    for n, name in names.items():
        cluster.kubectl(
            "apply", "--server-side", "-f", "-", input=_inference_node(name, tag, costs[n])
        )
    bucket = s3_server.make_bucket()
    store = objectstore.TelemetryStore(
        objectstore.StoreConfig(
            bucket=bucket,
            prefix=PREFIX,
            endpoint_url=s3_server.endpoint_url,
            region=s3_server.region,
            access_key_id=s3_server.access_key,
            secret_access_key=s3_server.secret_key,
        )
    )
    for iv in fixture.intervals(interval_hours=24):
        store.put_interval(iv.model_copy(update={"node": names[iv.node]}))
    try:
        yield tag, bucket, names
    finally:
        cluster.kubectl("delete", "inferencenodes", "-l", f"report-test={tag}", check=False)


def _kubeconfig(cluster: controlplane.ControlPlane, path: Path, token: str) -> Path:
    config = json.loads(cluster.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def _reports_kubeconfig(cluster: controlplane.ControlPlane, tmp_path: Path) -> Path:
    token = cluster.kubectl("create", "token", "mlxfleet-reports", "-n", SYSTEM).stdout.strip()
    return _kubeconfig(cluster, tmp_path / "reports.kubeconfig", token)


def _common(s3: s3support.S3Server, bucket: str, out: Path, cfg: Path) -> list[str]:
    return [
        *("--config", str(cfg), "--bucket", bucket, "--prefix", PREFIX),
        *("--endpoint-url", s3.endpoint_url, "--region", s3.region, "--out", str(out)),
    ]


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        pytest.param("list", "inferencenodes.mlxfleet.io", "yes", id="list-inferencenodes"),
        pytest.param("get", "inferencenodes.mlxfleet.io", "no", id="get-inferencenodes"),
        pytest.param("watch", "inferencenodes.mlxfleet.io", "no", id="watch-inferencenodes"),
        pytest.param("patch", "inferencenodes.mlxfleet.io", "no", id="patch-inferencenodes"),
        pytest.param("list", "modeldeployments.mlxfleet.io", "no", id="list-modeldeployments"),
        pytest.param("get", "secrets", "no", id="get-secrets"),
        pytest.param("list", "secrets", "no", id="list-secrets"),
        pytest.param("list", "configmaps", "no", id="list-configmaps"),
    ],
)
def test_report_jobs_may_only_list_inference_nodes(
    cluster: controlplane.ControlPlane,
    fleet: tuple[str, str, dict[str, str]],
    verb: str,
    resource: str,
    allowed: str,
) -> None:
    proc = cluster.kubectl(
        "auth", "can-i", verb, resource, "-n", SYSTEM, f"--as={ACCOUNT}", check=False
    )
    assert proc.stdout.strip() == allowed, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils not installed")
def test_monthly_report_prices_nodes_from_their_inference_nodes(
    cluster: controlplane.ControlPlane,
    s3_server: s3support.S3Server,
    fleet: tuple[str, str, dict[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tag, bucket, names = fleet
    monkeypatch.setenv("MLXFLEET_TELEMETRY_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY", s3_server.secret_key)
    cfg = tmp_path / "report.yaml"
    cfg.write_text("reference: {inputUSDPerMillion: 2.5, outputUSDPerMillion: 10}\n")
    out = tmp_path / "out"
    kubeconfig = _reports_kubeconfig(cluster, tmp_path)
    rc = cli.main(
        ["monthly", "--month", "2026-10", "--from-cluster", "--kubeconfig", str(kubeconfig),
         "--node-selector", f"report-test={tag}", *_common(s3_server, bucket, out, cfg)]
    )  # fmt: skip
    assert rc == 0
    text = subprocess.run(
        ["pdftotext", str(out / "monthly-2026-10.pdf"), "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    text = " ".join(text.split())
    assert "$113.14" in text  # studio hardware from its InferenceNode: 3,999 / 36 x 744 / 730.5
    assert f"InferenceNode {names['mini-2']}: spec.cost is not set" in text
    assert "No cost inputs for" not in text  # every telemetry name is an InferenceNode
    assert "142.6M" in text


def test_report_yaml_overrides_one_field_of_an_inference_node(
    cluster: controlplane.ControlPlane,
    s3_server: s3support.S3Server,
    fleet: tuple[str, str, dict[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tag, bucket, names = fleet
    monkeypatch.setenv("MLXFLEET_TELEMETRY_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY", s3_server.secret_key)
    cfg = tmp_path / "report.yaml"
    cfg.write_text(f"nodes:\n  {names['mini-2']}: {json.dumps(MINI)}\n")
    out = tmp_path / "out"
    rc = cli.main(
        ["weekly", "--week", "2026-W41", "--from-cluster",
         "--kubeconfig", str(_reports_kubeconfig(cluster, tmp_path)),
         "--node-selector", f"report-test={tag}", *_common(s3_server, bucket, out, cfg)]
    )  # fmt: skip
    assert rc == 0
    md = (out / "weekly-2026-W41.md").read_text()
    assert "spec.cost is not set" not in md
    # the nodes' table (the hot spots' table below it has rows for the same nodes)
    rows = {row["node"]: row for row in docs.table(md, "Nodes: memory headroom and cost")}
    assert rows[names["mini-2"]]["cost"] == rows[names["mini-1"]]["cost"]  # priced from the YAML
    assert rows[names["mini-2"]]["cost"].startswith("$")


def test_an_identity_without_rights_is_a_clear_error(
    cluster: controlplane.ControlPlane,
    s3_server: s3support.S3Server,
    fleet: tuple[str, str, dict[str, str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, bucket, _ = fleet
    kubeconfig = _kubeconfig(cluster, tmp_path / "bad.kubeconfig", "not-a-token")
    cfg = tmp_path / "report.yaml"
    cfg.write_text("")
    out = tmp_path / "out"
    rc = cli.main(
        ["weekly", "--week", "2026-W41", "--from-cluster", "--kubeconfig", str(kubeconfig),
         *_common(s3_server, bucket, out, cfg)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    assert "cannot list InferenceNodes" in err
    assert "401" in err
    assert "Traceback" not in err
    assert not out.exists()
