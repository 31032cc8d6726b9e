"""hf:// sources resolved from an offline Hugging Face cache (huggingface_hub's own layout), and
what a failing hub means: unreachable is a transient download failure (502), a repository the hub
says does not exist is not found (404), offline and not cached is not found either."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants

from mlxfleet_agent.models import errors, modeldir, store
from mlxfleet_agent.models import source as msource

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
    path = asyncio.run(
        s.ensure(msource.parse("hf://mlxfleet/tiny"), progress_cb=lambda d, t: seen.append((d, t)))
    )
    assert path == hf_home / "hub" / "models--mlxfleet--tiny" / "snapshots" / COMMIT
    assert (path / "model.safetensors").read_bytes() == (model_a / "model.safetensors").read_bytes()
    assert modeldir.inspect(path)[0] == modeldir.weights_bytes(model_a)
    [cached] = s.list()
    assert (cached.source, cached.revision, cached.shape is not None) == (
        "hf://mlxfleet/tiny",
        None,
        True,
    )
    assert seen[-1][0] == seen[-1][1] > 0


def test_resolves_pinned_commit(hf_home: Path, tmp_path: Path, model_b: Path) -> None:
    s = store.Store(tmp_path / "models")
    path = asyncio.run(s.ensure(msource.parse("hf://mlxfleet/tiny", OLD_COMMIT)))
    assert path.name == OLD_COMMIT
    assert (path / "model.safetensors").read_bytes() == (model_b / "model.safetensors").read_bytes()
    assert s.get(msource.parse("hf://mlxfleet/tiny", OLD_COMMIT).id).revision == OLD_COMMIT


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
    with pytest.raises(errors.ModelNotFound, match="HF_HUB_OFFLINE") as info:
        asyncio.run(s.ensure(msource.parse(source, revision)))
    assert info.value.http_status == 404
    assert s.list() == []


def test_evict_removes_the_revision_from_the_cache(hf_home: Path, tmp_path: Path) -> None:
    s = store.Store(tmp_path / "models")
    path = asyncio.run(s.ensure(msource.parse("hf://mlxfleet/tiny", OLD_COMMIT), holder="slot-a"))
    mid = msource.parse("hf://mlxfleet/tiny", OLD_COMMIT).id
    with pytest.raises(errors.ModelInUse):
        asyncio.run(s.evict(mid))
    s.release("slot-a", mid)
    asyncio.run(s.evict(mid))
    assert not path.exists()
    assert (path.parent / COMMIT / "config.json").is_file()  # the other revision stays


@pytest.fixture
def online_empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Nothing cached, HF_HUB_OFFLINE unset: the store asks the hub."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return tmp_path / "hf"


@pytest.fixture
def hub_says_no_such_repo(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A hub endpoint on loopback that answers every request as the hub does for a missing repo."""

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"error": "Repository not found"}'
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    yield url
    server.shutdown()
    server.server_close()


def test_unreachable_hub_is_a_download_failure_naming_the_cause(
    online_empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    s = store.Store(tmp_path / "models")
    with pytest.raises(errors.DownloadFailed) as info:
        asyncio.run(s.ensure(msource.parse("hf://mlxfleet/tiny")))
    assert info.value.http_status == 502
    assert "HF_HUB_OFFLINE" not in info.value.message
    assert "Connect" in info.value.message
    assert "hf://mlxfleet/tiny" in info.value.message


def test_repository_the_hub_does_not_have_is_not_found(
    online_empty_cache: Path, hub_says_no_such_repo: str, tmp_path: Path
) -> None:
    s = store.Store(tmp_path / "models")
    with pytest.raises(errors.ModelNotFound) as info:
        asyncio.run(s.ensure(msource.parse("hf://mlxfleet/absent")))
    assert info.value.http_status == 404
    assert "HF_HUB_OFFLINE" not in info.value.message
