"""Fixture `dist`: `make dist` once for the release tests that read its wheel and sdist."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support.helm import REPO


@pytest.fixture(scope="package")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    start = time.monotonic()
    proc = subprocess.run(["make", "-C", str(REPO), "dist", f"DIST={out}"], capture_output=True,
                          text=True, timeout=900, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    print(f"make dist: {time.monotonic() - start:.1f} s")
    assert "PASSED" in proc.stdout + proc.stderr  # twine check --strict
    return out
