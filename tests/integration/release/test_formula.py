"""The Homebrew formula of the agent, rendered from a release as the workflow renders it.

mlxfleet[agent] is resolved for macOS 14 on Apple Silicon against the package index (the
workflow's `pip install --dry-run --report`), scripts/release.py renders the formula, Ruby parses
it (`ruby -c`), and its contents are checked: the sdist and the wheel pinned by their sha256,
every dependency of the agent's extra a pinned macOS/pure wheel, only mlxfleet-agent linked.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mlxfleet_operator import __version__
from tests.support.helm import REPO

pytestmark = [pytest.mark.slow]

BASE = f"https://github.com/mlxfleet/mlxfleet/releases/download/v{__version__}"
MACOS = ["macosx_14_0_arm64", "macosx_13_0_arm64", "macosx_12_0_arm64", "macosx_11_0_arm64",
         "macosx_11_0_universal2", "macosx_10_9_universal2"]  # fmt: skip


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.timeout(900)
def test_formula_from_the_release_parses_and_pins_every_wheel(dist: Path, tmp_path: Path) -> None:
    wheel = dist / f"mlxfleet-{__version__}-py3-none-any.whl"
    sdist = dist / f"mlxfleet-{__version__}.tar.gz"
    report = tmp_path / "macos.json"
    resolved = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
         "--report", str(report), "--only-binary=:all:", "--python-version", "3.11",
         "--implementation", "cp", "--abi", "cp311", *[f"--platform={p}" for p in MACOS],
         "--target", str(tmp_path / "target"), f"mlxfleet[agent] @ {wheel.as_uri()}"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    out = tmp_path / "mlxfleet-agent.rb"
    rendered = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "release.py"), "formula", "--version",
         __version__, "--sdist-url", f"{BASE}/{sdist.name}", "--sdist", str(sdist),
         "--wheel-url", f"{BASE}/{wheel.name}", "--wheel", str(wheel), "--resolved",
         str(report), "--out", str(out)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    syntax = subprocess.run(["ruby", "-c", str(out)], capture_output=True, text=True, check=False)
    assert syntax.returncode == 0, syntax.stderr
    assert syntax.stdout.strip() == "Syntax OK"

    text = out.read_text()
    assert re.search(r"^class MlxfleetAgent < Formula$", text, re.M)
    assert re.search(rf'^  url "{re.escape(BASE)}/{re.escape(sdist.name)}"\n  sha256 '
                     rf'"{_sha256(sdist)}"$', text, re.M)  # fmt: skip
    blocks = dict(re.findall(r'resource "([^"]+)" do\n    url "[^"]+"\n    sha256 "([a-f0-9]{64})"',
                             text))  # fmt: skip
    assert blocks.pop("mlxfleet-wheel") == _sha256(wheel)
    urls = re.findall(r'^    url "([^"]+)"$', text, re.M)
    assert len(urls) == len(blocks) + 1
    for url in urls[1:]:
        assert url.startswith("https://files.pythonhosted.org/"), url
        assert url.endswith(".whl"), url
        assert "manylinux" not in url, url
        assert "win" not in url.rsplit("/", 1)[1], url
    installed = {
        _canonical(i["metadata"]["name"]) for i in json.loads(report.read_text())["install"]
    }
    assert set(blocks) == installed - {"mlxfleet"}
    # every dependency the wheel declares for the agent on macOS is a resource
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"mlxfleet-{__version__}.dist-info/METADATA").decode()
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        spec = line.removeprefix("Requires-Dist:").strip()
        name = _canonical(re.split(r"[\s;<>=!~\[]", spec, maxsplit=1)[0])
        markers = spec.partition(";")[2]
        agent = "extra == 'agent'" in markers or 'extra == "agent"' in markers
        if ("extra" not in markers or agent) and "linux" not in markers:
            assert name in blocks, name
    assert {"mlx", "mlx-lm", "fastapi", "uvicorn", "httptools", "psutil"} <= set(blocks)
    assert 'bin.install_symlink venv/"bin/mlxfleet-agent"' in text
