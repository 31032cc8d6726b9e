"""file:// sources through the Store: allowed roots, traversal and symlink escapes, in-place use."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from mlxfleet_agent.models import errors, store
from mlxfleet_agent.models import source as msource


@pytest.fixture
def models_dir(tmp_path: Path, model_a: Path) -> Path:
    root = tmp_path / "models"
    shutil.copytree(model_a, root / "tiny")
    return root


def test_file_model_used_in_place_and_indexed(models_dir: Path) -> None:
    s = store.Store(models_dir)
    path = asyncio.run(s.ensure(msource.parse(f"file://{models_dir}/tiny"), holder="slot-a"))
    assert path == (models_dir / "tiny").resolve()
    [cached] = s.list()
    assert cached.source == f"file://{models_dir}/tiny"
    assert cached.in_use
    assert cached.shape is not None
    assert (cached.shape.num_layers, cached.shape.num_kv_heads, cached.shape.head_dim) == (2, 2, 16)
    assert cached.size_bytes > 100_000
    assert cached.total_bytes > cached.size_bytes
    with pytest.raises(errors.ModelInUse, match="slot-a"):
        asyncio.run(s.evict(cached.id))
    s.release("slot-a")
    asyncio.run(s.evict(cached.id))
    assert s.list() == []
    assert (models_dir / "tiny" / "model.safetensors").is_file()  # never deletes the user's files


def test_extra_allowed_root(tmp_path: Path, model_a: Path, models_dir: Path) -> None:
    s = store.Store(models_dir, allowed_roots=[model_a.parent])
    assert asyncio.run(s.ensure(msource.parse(f"file://{model_a}"))) == model_a.resolve()


@pytest.mark.parametrize(
    ("make", "error"),
    [
        pytest.param("outside", errors.SourceNotAllowed, id="outside-roots"),
        pytest.param("symlink", errors.SourceNotAllowed, id="symlink-escape"),
        pytest.param("traversal", errors.InvalidSource, id="dotdot-traversal"),
        pytest.param("missing", errors.ModelNotFound, id="missing-inside"),
    ],
)
def test_file_rejections(
    models_dir: Path, model_a: Path, make: str, error: type[errors.StoreError]
) -> None:
    if make == "outside":
        source = f"file://{model_a}"
    elif make == "symlink":
        (models_dir / "sneaky").symlink_to(model_a)
        source = f"file://{models_dir}/sneaky"
    elif make == "traversal":
        source = f"file://{models_dir}/../../etc"
    else:
        source = f"file://{models_dir}/absent"
    s = store.Store(models_dir)
    with pytest.raises(error) as info:
        asyncio.run(s.ensure(msource.parse(source), holder="slot-a"))
    assert info.value.field == "source"
    if make == "symlink":
        assert str(model_a.resolve()) not in info.value.message  # never where the link points
        assert f"{models_dir}/sneaky" in info.value.message  # the path as given
        assert info.value.allowed == str(models_dir.resolve())
    assert s.list() == []
    if make != "traversal":  # a source that does not parse never reaches the store
        assert s.holders(msource.parse(source).id) == set()  # failed ensure drops the pin


def test_index_survives_restart(models_dir: Path) -> None:
    first = store.Store(models_dir)
    asyncio.run(first.ensure(msource.parse(f"file://{models_dir}/tiny", "rev1")))
    again = store.Store(models_dir)
    [cached] = again.list()
    assert (cached.source, cached.revision, cached.in_use) == (
        f"file://{models_dir}/tiny",
        "rev1",
        False,
    )
