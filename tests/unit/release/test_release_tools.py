"""scripts/release.py: the released chart pins its images by digest (comments kept), and the
Homebrew formula of the agent is rendered from a resolution report; bad input names the flag."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from mlxfleet_agent import __version__ as agent_version
from mlxfleet_gateway import __version__ as gateway_version
from mlxfleet_operator import __version__

REPO = Path(__file__).resolve().parents[3]
OPERATOR = "sha256:" + "a" * 64
GATEWAY = "sha256:" + "b" * 64


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release", REPO / "scripts" / "release.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["release"] = module
    spec.loader.exec_module(module)
    return module


release = _load()


def test_one_version_everywhere() -> None:
    chart = yaml.safe_load((REPO / "charts" / "mlxfleet" / "Chart.yaml").read_text())
    assert {__version__, agent_version, gateway_version, chart["version"],
            chart["appVersion"]} == {__version__}  # fmt: skip


def test_pinned_values_name_the_pushed_images_and_keep_the_comments() -> None:
    text = (REPO / "charts" / "mlxfleet" / "values.yaml").read_text()
    pinned = release.pin_chart_values(
        text,
        operator=release.Pushed.parse(f"reg:5000/m/operator@{OPERATOR}", flag="--operator"),
        gateway=release.Pushed.parse(f"reg:5000/m/gateway:0.1.0@{GATEWAY}", flag="--gateway"),
    )
    values = yaml.safe_load(pinned)
    assert values["image"] | {"pullPolicy": "x"} == {
        "repository": "reg:5000/m/operator", "tag": "", "digest": OPERATOR, "pullPolicy": "x"
    }  # fmt: skip
    assert values["gateway"]["image"] == {
        "repository": "reg:5000/m/gateway", "tag": "", "digest": GATEWAY
    }  # fmt: skip
    original = yaml.safe_load(text)
    for key in original:  # nothing else moved
        if key not in ("image", "gateway"):
            assert values[key] == original[key], key
    assert [line for line in text.splitlines() if line.lstrip().startswith("#")] == [
        line for line in pinned.splitlines() if line.lstrip().startswith("#")
    ]


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        pytest.param("reg/m/operator:0.1.0", "REPOSITORY@sha256", id="no-digest"),
        pytest.param("reg/m/operator@sha256:abc", "64 hex", id="short-digest"),
        pytest.param("@" + OPERATOR, "REPOSITORY@sha256", id="no-repository"),
    ],
)
def test_a_reference_without_a_digest_is_refused(ref: str, why: str) -> None:
    with pytest.raises(release.ReleaseError, match="--operator"):
        release.Pushed.parse(ref, flag="--operator")


def test_set_value_refuses_a_missing_key() -> None:
    with pytest.raises(release.ReleaseError, match=r"image\.nope"):
        release.set_value("image:\n  tag: x\n", ["image", "nope"], "y")


REPORT = {
    "install": [
        {"metadata": {"name": "mlxfleet"}, "download_info": {"url": "file:///dist/x.whl"}},
        *(
            {
                "metadata": {"name": name},
                "download_info": {
                    "url": f"https://files.pythonhosted.org/packages/aa/{name}-1-py3-none-any.whl",
                    "archive_info": {"hashes": {"sha256": digit * 64}},
                },
            }
            for name, digit in (("mlx_lm", "1"), ("Fast.API", "2"), ("mlx", "3"))
        ),
    ]
}


def test_formula_pins_every_resource_and_installs_only_the_agent() -> None:
    resources = release.resources_from_report(REPORT)
    assert [r.name for r in resources] == ["fast-api", "mlx", "mlx-lm"]  # ours left out
    text = release.formula(
        version="0.1.0",
        sdist_url="https://example.org/mlxfleet-0.1.0.tar.gz",
        sdist_sha256="c" * 64,
        wheel_url="https://example.org/mlxfleet-0.1.0-py3-none-any.whl",
        wheel_sha256="d" * 64,
        resources=resources,
    )
    assert "class MlxfleetAgent < Formula" in text
    assert re.findall(r'^  url "(.*)"$', text, re.M) == [
        "https://example.org/mlxfleet-0.1.0.tar.gz"
    ]
    assert len(re.findall(r'^  resource "', text, re.M)) == 4  # the wheel + 3 dependencies
    assert 'bin.install_symlink venv/"bin/mlxfleet-agent"' in text
    assert 'depends_on "python@3.11"' in text


def test_formula_refuses_a_resource_that_is_not_a_pinned_wheel() -> None:
    bad = {"install": [{"metadata": {"name": "x"}, "download_info": {
        "url": "https://files.pythonhosted.org/x-1.tar.gz", "archive_info": {}}}]}  # fmt: skip
    with pytest.raises(release.ReleaseError, match="--resolved"):
        release.resources_from_report(bad)
