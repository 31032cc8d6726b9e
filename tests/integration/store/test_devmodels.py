"""The generated dev models load in real mlx-lm, generate to max_tokens and differ by seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mlxfleet_agent.dev import devmodels

pytestmark = pytest.mark.mlx


def _generate(model: Path, max_tokens: int = 40) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mlx_lm", "generate", "--model", str(model)]
    cmd += ["--prompt", "hello there", "--max-tokens", str(max_tokens), "--temp", "0"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _text(out: str) -> str:
    return out.split("==========")[1].strip()


def test_models_generate_to_max_tokens_and_differ(model_a: Path, model_b: Path) -> None:
    a, b = _generate(model_a), _generate(model_b)
    assert a.returncode == 0, a.stderr
    assert b.returncode == 0, b.stderr
    assert "Generation: 40 tokens" in a.stdout
    assert "Generation: 40 tokens" in b.stdout
    assert _text(a.stdout).isascii()
    assert _text(a.stdout) != _text(b.stdout)


def test_broken_model_fails_to_load(broken_model: Path) -> None:
    result = _generate(broken_model)
    assert result.returncode != 0
    assert "shape" in result.stderr


def test_same_seed_same_bytes_and_reuse(tmp_path: Path, model_a: Path) -> None:
    again = devmodels.generate_model(tmp_path / "again", seed=1)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (again / name).read_bytes() == (model_a / name).read_bytes(), name
    assert devmodels.generate_model(again, seed=1) == again
    with pytest.raises(FileExistsError):
        devmodels.generate_model(again, seed=2)
    assert [p.name for p in tmp_path.iterdir()] == ["again"]  # no temp dirs left behind


def test_cli_writes_a_model(tmp_path: Path) -> None:
    assert devmodels.main(["--out", str(tmp_path / "m"), "--seed", "5"]) == 0
    assert (tmp_path / "m" / "model.safetensors").is_file()
