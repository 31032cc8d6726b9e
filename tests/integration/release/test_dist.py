"""`make dist`: the wheel alone, in clean virtual environments, runs every console script.

`make dist` builds the sdist and the wheel (from that sdist) and checks both with
`twine check --strict`. Each virtual environment gets the wheel with one set of extras from the
package index (no repository on the path: the working directory is elsewhere, PYTHONPATH unset)
and must run its console scripts with `--version` and `--help`, and import every module of its
packages: a dependency a module imports but the extra does not declare fails here. The gateway's
extra must stay slim (no PDF stack, no kopf), and the agent's alone is what a Mac installs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from mlxfleet_operator import __version__

pytestmark = [pytest.mark.slow]

WHEEL = f"mlxfleet-{__version__}-py3-none-any.whl"
SDIST = f"mlxfleet-{__version__}.tar.gz"
IMPORT_ALL = """
import importlib, pkgutil, sys
for root in sys.argv[1:]:
    package = importlib.import_module(root)
    assert "site-packages" in package.__file__, package.__file__  # the wheel, not the repo
    for info in pkgutil.walk_packages(package.__path__, root + "."):
        importlib.import_module(info.name)
print("imported", len(sys.modules))
"""


def test_dist_holds_the_wheel_the_sdist_and_their_checksums(dist: Path) -> None:
    assert {p.name for p in dist.iterdir()} >= {WHEEL, SDIST, f"mlxfleet-{__version__}.sha256"}
    with zipfile.ZipFile(dist / WHEEL) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"mlxfleet-{__version__}.dist-info/METADATA").decode()
    assert f"mlxfleet-{__version__}.dist-info/licenses/LICENSE" in names
    assert not [n for n in names if n.startswith("tests/")]
    assert "mlxfleet_operator/reports/templates/monthly.html.j2" in names  # package data
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert any(r.startswith("Requires-Dist: aiohttp") and "operator" in r for r in requires)
    assert any("uvicorn" in r and "<0.55" in r for r in requires)  # private internals: bounded
    with tarfile.open(dist / SDIST) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "LICENSE", "README.md", "charts/mlxfleet/Chart.yaml"} <= members
    assert not [m for m in members if m.startswith(("tests/", ".github/", "benchmarks/"))]


@pytest.mark.parametrize(
    ("extras", "scripts", "packages"),
    [
        pytest.param(
            "operator,agent,gateway",
            ["mlxfleet-agent", "mlxfleet-operator", "mlxfleet-gateway", "mlxfleet",
             "kubectl-mlxfleet"],
            ["mlxfleet_operator", "mlxfleet_agent", "mlxfleet_gateway"],
            id="everything",
        ),
        pytest.param("agent", ["mlxfleet-agent"], ["mlxfleet_agent"], id="agent-alone"),
        pytest.param(
            "gateway", ["mlxfleet-gateway"], ["mlxfleet_gateway"], id="gateway-alone"
        ),
    ],
)  # fmt: skip
@pytest.mark.timeout(1800)  # a virtual environment from the package index: minutes on 2 cores
def test_the_wheel_alone_runs_its_console_scripts(
    dist: Path, tmp_path: Path, extras: str, scripts: list[str], packages: list[str]
) -> None:
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"

    def run(*cmd: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=timeout, check=False)  # fmt: skip

    assert run(sys.executable, "-m", "venv", venv).returncode == 0
    installed = run(venv / "bin/python", "-m", "pip", "install", "--quiet", "--no-compile",
                    f"{dist / WHEEL}[{extras}]", timeout=900)  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    for script in scripts:
        version = run(venv / "bin" / script, "--version")
        assert version.returncode == 0, (script, version.stderr[-2000:])
        assert version.stdout.strip() == __version__, script
        usage = run(venv / "bin" / script, "--help")
        assert usage.returncode == 0, (script, usage.stderr[-2000:])
        assert "usage:" in usage.stdout, script
    imported = run(venv / "bin/python", "-c", IMPORT_ALL, *packages, timeout=300)
    assert imported.returncode == 0, imported.stderr[-3000:]
    if extras == "gateway":  # slim: what the gateway image holds
        for heavy in ("weasyprint", "pyarrow", "kopf", "mlx", "numpy"):
            found = run(venv / "bin/python", "-c", f"import {heavy}")
            assert found.returncode != 0, f"{heavy} is installed with mlxfleet[gateway]"
    if extras == "agent":  # the Mac's install (the Homebrew formula): join's own help
        assert run(venv / "bin/mlxfleet-agent", "join", "--help").returncode == 0
