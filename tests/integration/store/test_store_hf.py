"""hf:// sources resolved from an offline Hugging Face cache (huggingface_hub's own layout)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from mlxfleet_agent import memory, sources, store

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


def add_revision(hub: Path, repo: str, model: Path, commit: str, ref: str | None) -> Path:
    """Lay out a model as huggingface_hub caches it: blobs/, snapshots/<commit>/ links, refs/."""
    root = hub / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True)
    for path in sorted(model.iterdir()):
        data = path.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / path.name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    if ref is not None:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / ref).write_text(commit)
    return snapshot


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_a: Path, model_b: Path) -> Path:
    home = tmp_path / "hf"
    add_revision(home / "hub", "mlxfleet/tiny", model_a, COMMIT, "main")
    add_revision(home / "hub", "mlxfleet/tiny", model_b, OLD_COMMIT, None)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


def test_resolves_main_from_offline_cache(hf_home: Path, tmp_path: Path, model_a: Path) -> None:
    s = store.Store(tmp_path / "models")
    seen: list[tuple[int, int]] = []
    path = asyncio.run(s.ensure("hf://mlxfleet/tiny", progress_cb=lambda d, t: seen.append((d, t))))
    assert path == hf_home / "hub" / "models--mlxfleet--tiny" / "snapshots" / COMMIT
    assert (path / "model.safetensors").read_bytes() == (model_a / "model.safetensors").read_bytes()
    assert memory.inspect_model_dir(path)[0] == memory.weights_bytes(model_a)
    [cached] = s.list()
    assert (cached.source, cached.revision, cached.shape is not None) == (
        "hf://mlxfleet/tiny",
        None,
        True,
    )
    assert seen[-1][0] == seen[-1][1] > 0


def test_resolves_pinned_commit(hf_home: Path, tmp_path: Path, model_b: Path) -> None:
    s = store.Store(tmp_path / "models")
    path = asyncio.run(s.ensure("hf://mlxfleet/tiny", OLD_COMMIT))
    assert path.name == OLD_COMMIT
    assert (path / "model.safetensors").read_bytes() == (model_b / "model.safetensors").read_bytes()
    assert s.get(sources.model_id("hf://mlxfleet/tiny", OLD_COMMIT)).revision == OLD_COMMIT


@pytest.mark.parametrize(
    ("source", "revision"),
    [
        pytest.param("hf://mlxfleet/absent", None, id="unknown-repo"),
        pytest.param("hf://mlxfleet/tiny", "v9", id="unknown-ref"),
        pytest.param("hf://mlxfleet/tiny", "1" * 40, id="unknown-commit"),
    ],
)
def test_not_in_offline_cache(
    hf_home: Path, tmp_path: Path, source: str, revision: str | None
) -> None:
    s = store.Store(tmp_path / "models")
    with pytest.raises(store.ModelNotFound, match="HF_HUB_OFFLINE") as info:
        asyncio.run(s.ensure(source, revision))
    assert info.value.http_status == 404
    assert s.list() == []


def test_evict_removes_the_revision_from_the_cache(hf_home: Path, tmp_path: Path) -> None:
    s = store.Store(tmp_path / "models")
    path = asyncio.run(s.ensure("hf://mlxfleet/tiny", OLD_COMMIT, holder="slot-a"))
    mid = sources.model_id("hf://mlxfleet/tiny", OLD_COMMIT)
    with pytest.raises(store.ModelInUse):
        asyncio.run(s.evict(mid))
    s.release("slot-a", mid)
    asyncio.run(s.evict(mid))
    assert not path.exists()
    assert (path.parent / COMMIT / "config.json").is_file()  # the other revision stays
