"""`mlxfleet report sample`: both reports from the built-in fixture month, no bucket."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pypdf
import pytest


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils not installed")
def test_sample_renders_weekly_and_monthly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mlxfleet_operator.cli", "report", "sample", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "monthly-2026-10-models.csv",
        "monthly-2026-10-nodes.csv",
        "monthly-2026-10.html",
        "monthly-2026-10.pdf",
        "monthly-2026-10.summary.txt",  # what a delivery's webhook gets (reports.delivery)
        "weekly-2026-W42.html",
        "weekly-2026-W42.md",
        "weekly-2026-W42.summary.txt",
    ]
    assert len(pypdf.PdfReader(tmp_path / "monthly-2026-10.pdf").pages) == 2
    text = subprocess.run(
        ["pdftotext", str(tmp_path / "monthly-2026-10.pdf"), "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for expected in ("Tokens served", "Cost per million tokens", "Models", "Nodes", "Data gaps"):
        assert expected in text
