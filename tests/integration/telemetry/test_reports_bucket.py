"""Weekly and monthly reports from a fixture month written to a real S3 bucket."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pypdf
import pytest
import yaml

from mlxfleet_operator.adapters import objectstore
from mlxfleet_operator.reports import cli, fixture
from tests.support import s3 as s3support

pytestmark = pytest.mark.s3
PREFIX = "acme/telemetry"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def month_bucket(s3_server: s3support.S3Server) -> str:
    """October 2026 of the fixture fleet in 6-hour intervals (about 350 objects)."""
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
    for iv in fixture.intervals(interval_hours=6):
        store.put_interval(iv)
    return bucket


@pytest.fixture
def run(
    s3_server: s3support.S3Server,
    month_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Path, list[str]]:
    monkeypatch.setenv("MLXFLEET_TELEMETRY_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY", s3_server.secret_key)
    cfg = tmp_path / "report.yaml"
    cfg.write_text(fixture.CONFIG_YAML)
    out = tmp_path / "out"
    common = [
        "--config",
        str(cfg),
        "--bucket",
        month_bucket,
        "--prefix",
        PREFIX,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--region",
        s3_server.region,
        "--out",
        str(out),
        "--write-back",
    ]
    return out, common


def test_weekly_report_from_the_bucket_matches_hand_computed_figures(
    run: tuple[Path, list[str]], s3_server: s3support.S3Server, month_bucket: str
) -> None:
    out, common = run
    assert cli.main(["weekly", "--week", "2026-W42", *common]) == 0
    md = (out / "weekly-2026-W42.md").read_text()
    html = (out / "weekly-2026-W42.html").read_text()
    # 7 days x 24 h x (90,000 llama + 2 x 54,000 qwen) tokens, same as the week before
    assert "| Tokens served | 33.3M | 33.3M | 0.0% |" in md
    # 7 x 24 x (120 + 2 x 90) requests
    assert "| Requests | 50,400 | 50,400 | 0.0% |" in md
    assert "| qwen-2.5-7b | team-search | mini-1, mini-2, studio-1 | 18.1M |" in md
    assert "| studio-1 | llama-3.1-8b, qwen-2.5-7b | 100.0% |" in md
    assert "| Fleet cost | $55.80 |" in md  # all three nodes priced
    assert "| qwen-2.5-7b | studio-1 | removed | Sat 17 Oct 00:00 |" in md
    assert "- mini-2: Thu 15 Oct 00:00 to Sat 17 Oct 00:00 UTC (48 h)" in md
    # llama p95: 2.5 + 2.5 x (114 - 108) / 12; qwen: 2.5 + 2.5 x (85.5 - 84) / 6
    assert (
        "| llama-3.1-8b | team-chat | studio-1 | 15.1M | 0.0% | 20,160 | 0.0% | 1.00 s | 3.75 s |"
        in md
    )
    assert "| 3.12 s | 3.12 s |" in md
    # memory headroom: studio-1 drops from 24 GiB free to 16 GiB while it carries qwen
    assert (
        "| studio-1 | llama-3.1-8b, qwen-2.5-7b | 100.0% "
        "| 64.0 GiB | 48.0 GiB | 16.0 GiB | 24.0 GiB |" in md
    )
    assert "Thu 15 Oct, Fri 16 Oct" in md  # mini-2's missing days, as gaps
    assert "<h2>What moved where, and why</h2>" in html
    keys = {
        o["Key"]
        for o in s3_server.client().list_objects_v2(
            Bucket=month_bucket, Prefix=f"{PREFIX}/reports/"
        )["Contents"]
    }
    assert keys == {
        f"{PREFIX}/reports/weekly-2026-W42.md",
        f"{PREFIX}/reports/weekly-2026-W42.html",
        f"{PREFIX}/reports/weekly-2026-W42.summary.txt",  # what a delivery sends
    }


def test_weekly_report_flags_a_missing_day(run: tuple[Path, list[str]]) -> None:
    out, common = run
    assert cli.main(["weekly", "--week", "2026-W44", *common]) == 0
    md = (out / "weekly-2026-W44.md").read_text()
    assert "No telemetry from any node on Tue 27 Oct, Sun 01 Nov" in md
    # 26, 28-31 Oct reported: 5 days of the 7, never zeros for the other two
    assert "| Tokens served | 23.8M |" in md  # 5 x 24 x 198,000 = 23,760,000


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils not installed")
def test_monthly_pdf_from_the_bucket(
    run: tuple[Path, list[str]], s3_server: s3support.S3Server, month_bucket: str
) -> None:
    out, common = run
    assert cli.main(["monthly", "--month", "2026-10", *common]) == 0
    pdf = out / "monthly-2026-10.pdf"
    assert len(pypdf.PdfReader(pdf).pages) == 2
    text = subprocess.run(
        ["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    # llama 64.8M (30 days x 24 h x 90,000) + qwen 77.76M (60 node-days x 24 h x 54,000)
    assert "142.6M" in text
    assert "216,000 requests" in text  # 720 h x 120 + 1,440 h x 90
    assert "Inference fleet report: October 2026" in text
    assert "1 of 2" in text  # swaps with zero failed requests
    assert "94.6%" in text  # 88 of 93 node-days reported
    assert "Tue 27 Oct: no node reported" in text
    assert "Thu 15 Oct: mini-2 missing" in text
    assert "all 3 nodes: no telemetry for 24 h" in text
    assert "$113.14" in text  # studio-1 hardware: 3,999 / 36 x 744 / 730.5
    assert "page 2 of 2" in text
    head = s3_server.client().head_object(
        Bucket=month_bucket, Key=f"{PREFIX}/reports/monthly-2026-10.pdf"
    )
    assert head["ContentType"] == "application/pdf"
    assert head["ContentLength"] == pdf.stat().st_size


def test_no_bucket_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("MLXFLEET_TELEMETRY_BUCKET", raising=False)
    assert cli.main(["weekly", "--week", "2026-W42"]) == 2
    assert "MLXFLEET_TELEMETRY_BUCKET" in capsys.readouterr().err


def test_unreachable_store_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("MLXFLEET_TELEMETRY_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY", "s")
    rc = cli.main(
        ["weekly", "--week", "2026-W42", "--bucket", "b", "--endpoint-url", closed,
         "--out", str(tmp_path / "out")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    assert "s3://b/" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_corrupt_objects_are_skipped_not_fatal(
    s3_server: s3support.S3Server, run: tuple[Path, list[str]], month_bucket: str
) -> None:
    """Garbage bytes and a wrong-schema line beside real intervals: the report still renders."""
    client = s3_server.client()
    day_prefix = f"{PREFIX}/v1/date=2026-10-13/node=mini-1"
    client.put_object(Bucket=month_bucket, Key=f"{day_prefix}/garbage.jsonl", Body=b"\xff\xfe\x00{")
    client.put_object(
        Bucket=month_bucket, Key=f"{day_prefix}/wrong.jsonl", Body=b'{"schemaVersion": "x"}\n'
    )
    try:
        out, common = run
        assert cli.main(["weekly", "--week", "2026-W42", *common]) == 0
        assert (out / "weekly-2026-W42.md").read_text().count("mini-1") >= 1
    finally:
        client.delete_object(Bucket=month_bucket, Key=f"{day_prefix}/garbage.jsonl")
        client.delete_object(Bucket=month_bucket, Key=f"{day_prefix}/wrong.jsonl")


# ---- issue 15 item 2: cost inputs that match no node with telemetry -------------------------

HOST_NAMES = {"studio-1": "Mac-Studio", "mini-1": "mac-mini-a", "mini-2": "mac-mini-b"}
OLD_SAMPLE_TABLE = """\
nodes:
  studio-1: {purchasePriceUSD: 3999, amortizationMonths: 36, electricityUSDPerKWh: 0.30,
             idlePowerWatts: 12, busyPowerWatts: 95}
  mini-1: {purchasePriceUSD: 1399, amortizationMonths: 24, electricityUSDPerKWh: 0.30,
           idlePowerWatts: 5, busyPowerWatts: 38}
reference: {name: Cloud API (reference), inputUSDPerMillion: 2.50, outputUSDPerMillion: 10.00}
"""


def _shipped_report_yaml() -> str:
    cm = yaml.safe_load((REPO / "manifests" / "cronjobs" / "report-config.yaml").read_text())
    text: str = cm["data"]["report.yaml"]
    return text


@pytest.fixture(scope="module")
def host_named_bucket(s3_server: s3support.S3Server) -> str:
    """October 2026 as agents that kept their host names as nodeName ship it (daily objects)."""
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
        store.put_interval(iv.model_copy(update={"node": HOST_NAMES[iv.node]}))
    return bucket


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils not installed")
@pytest.mark.parametrize(
    "report_yaml",
    [
        pytest.param(_shipped_report_yaml(), id="shipped-report-config"),
        pytest.param(OLD_SAMPLE_TABLE, id="old-sample-cost-table"),
    ],
)
def test_reports_name_nodes_without_cost_inputs_instead_of_crashing(
    s3_server: s3support.S3Server,
    host_named_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    report_yaml: str,
) -> None:
    """Before: `mlxfleet report monthly` died with ZeroDivisionError on the old sample table."""
    monkeypatch.setenv("MLXFLEET_TELEMETRY_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY", s3_server.secret_key)
    cfg = tmp_path / "report.yaml"
    cfg.write_text(report_yaml)
    out = tmp_path / "out"
    common = ["--config", str(cfg), "--bucket", host_named_bucket, "--prefix", PREFIX,
              "--endpoint-url", s3_server.endpoint_url, "--region", s3_server.region,
              "--out", str(out)]  # fmt: skip
    assert cli.main(["monthly", "--month", "2026-10", *common]) == 0
    assert cli.main(["weekly", "--week", "2026-W42", *common]) == 0
    pdf = subprocess.run(
        ["pdftotext", str(out / "monthly-2026-10.pdf"), "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pdf = " ".join(pdf.split())
    expected = "No cost inputs for Mac-Studio, mac-mini-a, mac-mini-b:"
    assert expected in pdf
    assert "142.6M" in pdf  # every token is still counted
    assert expected in (out / "monthly-2026-10.html").read_text()
    assert expected in (out / "weekly-2026-W42.md").read_text()
    assert expected in (out / "weekly-2026-W42.html").read_text()


def test_aliases_put_host_named_telemetry_on_the_cost_table_nodes(
    s3_server: s3support.S3Server,
    host_named_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLXFLEET_TELEMETRY_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("MLXFLEET_TELEMETRY_SECRET_ACCESS_KEY", s3_server.secret_key)
    cfg = tmp_path / "report.yaml"
    cfg.write_text(
        fixture.CONFIG_YAML + yaml.safe_dump({"aliases": {v: k for k, v in HOST_NAMES.items()}})
    )
    out = tmp_path / "out"
    rc = cli.main(
        ["weekly", "--week", "2026-W42", "--config", str(cfg), "--bucket", host_named_bucket,
         "--prefix", PREFIX, "--endpoint-url", s3_server.endpoint_url,
         "--region", s3_server.region, "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    md = (out / "weekly-2026-W42.md").read_text()
    assert "No cost inputs" not in md
    assert "Mac-Studio" not in md
    assert "| qwen-2.5-7b | team-search | mini-1, mini-2, studio-1 | 18.1M |" in md
    assert "| studio-1 | llama-3.1-8b, qwen-2.5-7b | 100.0% |" in md
    assert "| Fleet cost | $55.80 |" in md  # all three nodes priced
