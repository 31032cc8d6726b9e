"""Fixtures: tiny llama models generated locally (mlxfleet_agent.dev.devmodels), once per session.

`model_a` and `model_b` load in mlx_lm and differ in their weights (seeds 1 and 2), so a test can
tell which one answered; `broken_model` looks like a model but fails to load (rollback tests);
`model_tri` has 6 heads / 3 KV heads (hidden 96), so tensor sharding splits it over 3 ranks.
`embedding_model` (and `embedding_model_b`, other weights) / `reranker_model`: tiny Qwen3
checkpoints of the mlx-embed / mlx-rerank engines (mlxfleet_agent.dev.testmodels).
May import: pytest, mlxfleet_agent.dev.devmodels, mlxfleet_agent.dev.testmodels (lazily).
Called by: any test (loaded via tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxfleet_agent.dev import devmodels

SEED_A = 1
SEED_B = 2


def models_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's folder of generated models (shared by every fixture here)."""
    return tmp_path_factory.getbasetemp() / "models"


def make_model(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    *,
    seed: int,
    broken: bool = False,
    **shape: int,
) -> Path:
    """Generate (or reuse, within the session) the model `name` under models_root(); `shape`:
    devmodels.generate_model's size arguments (hidden_size, num_heads, num_kv_heads ...)."""
    root = models_root(tmp_path_factory)
    return devmodels.generate_model(root / name, seed=seed, broken=broken, **shape)


@pytest.fixture(scope="session")
def model_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory, "model-a", seed=SEED_A)


@pytest.fixture(scope="session")
def model_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory, "model-b", seed=SEED_B)


@pytest.fixture(scope="session")
def broken_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory, "model-broken", seed=SEED_A, broken=True)


@pytest.fixture(scope="session")
def embedding_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlxfleet_agent.dev import testmodels

    return testmodels.generate_embedding_model(
        models_root(tmp_path_factory) / "qwen3-embedding", seed=3
    )


@pytest.fixture(scope="session")
def embedding_model_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlxfleet_agent.dev import testmodels

    return testmodels.generate_embedding_model(
        models_root(tmp_path_factory) / "qwen3-embedding-b", seed=4
    )


@pytest.fixture(scope="session")
def reranker_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlxfleet_agent.dev import testmodels

    return testmodels.generate_reranker_model(models_root(tmp_path_factory) / "qwen3-reranker")


@pytest.fixture(scope="session")
def model_tri(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(
        tmp_path_factory, "model-tri", seed=SEED_A, hidden_size=96, num_heads=6, num_kv_heads=3
    )
