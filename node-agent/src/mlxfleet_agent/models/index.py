"""The model store's index on disk: which models are cached, where, and whether they are ours.

Layout under `--models-dir`: `.mlxfleet-store/index.json` (this index, written atomically),
`.mlxfleet-store/s3/<id>/` (complete downloads), `.mlxfleet-store/partial/<id>/` (downloads in
progress). `file://` models (used in place) and `hf://` models (in the Hugging Face cache) are
indexed too. A corrupt index starts empty (downloads are verified again); folders under `s3/`
that the index does not name are half-renamed leftovers and are removed at load.
May import: the standard library, contract, sizing, host.files, models.modeldir, models.source.
Called by: models.store, models.evictions.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Literal

from mlxfleet_agent import contract, sizing
from mlxfleet_agent.host import files
from mlxfleet_agent.models import modeldir, source

STORE_DIR = ".mlxfleet-store"
Kind = Literal["file", "s3", "hf"]


class IndexEntry(contract.Wire):
    """One indexed model: what the API shows plus where it lives and whether we may delete it."""

    model: contract.CachedModel
    kind: Kind
    path: str
    owned: bool = False


def dir_bytes(path: Path) -> int:
    """Bytes of every regular file under path (symlinks followed once, as the HF cache uses)."""
    total = 0
    for p in path.rglob("*"):
        if p.is_file():
            total += p.stat().st_size
    return total


class Index:
    """The entries of one store, by model id, persisted on every change."""

    def __init__(self, root: Path, *, now: Callable[[], datetime]) -> None:
        self.root = root
        self._path = root / "index.json"
        self._now = now
        self._entries = self._load()

    def _load(self) -> dict[str, IndexEntry]:
        try:
            raw = json.loads(self._path.read_text(encoding="utf-8"))
            entries = [IndexEntry.model_validate(e) for e in raw.get("models", [])]
        except FileNotFoundError:
            entries = []
        except ValueError:  # a corrupt index: start empty, downloads are re-verified
            entries = []
        index = {e.model.id: e for e in entries if Path(e.path).is_dir()}
        for orphan in (self.root / "s3").iterdir():  # ours but not indexed: half-renamed junk
            if orphan.name not in index:
                shutil.rmtree(orphan, ignore_errors=True)
        return index

    def save(self) -> None:
        data = {"version": 1, "models": [e.model_dump(mode="json") for e in self._entries.values()]}
        files.write_atomic(self._path, json.dumps(data, indent=1).encode())

    def get(self, model_id: str) -> IndexEntry | None:
        return self._entries.get(model_id)

    def __iter__(self) -> Iterator[IndexEntry]:
        return iter(list(self._entries.values()))

    def record(self, src: source.Source, *, kind: Kind, path: Path, owned: bool) -> IndexEntry:
        """Index the model at `path` (sized from its files) and save."""
        try:
            size, shape = modeldir.inspect(path)
        except sizing.UnknownModelSize:
            size, shape = modeldir.weights_bytes(path) if path.is_dir() else 0, None
        model = contract.CachedModel(
            id=src.id,
            source=src.text,
            revision=src.revision,
            size_bytes=size,
            total_bytes=dir_bytes(path),
            shape=shape,
            last_used=self._now(),
        )
        entry = IndexEntry(model=model, kind=kind, path=str(path), owned=owned)
        self._entries[src.id] = entry
        self.save()
        return entry

    def touch(self, model_id: str) -> None:
        """Mark a model used now (eviction is least recently used first)."""
        if (entry := self._entries.get(model_id)) is not None:
            entry.model.last_used = self._now()
            self.save()

    def remove(self, model_id: str) -> None:
        del self._entries[model_id]
        self.save()
