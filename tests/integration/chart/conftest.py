"""Fixture `helm_cli`: the real helm (tests/support/tools.py builds it) with a private home."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.chart.helmcli import Helm


@pytest.fixture(scope="session")
def helm_cli(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(binary=helm, home=tmp_path_factory.mktemp("helm-home"))
