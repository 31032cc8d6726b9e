"""hf:// sources resolved from an offline Hugging Face cache (huggingface_hub's own layout), and
what a failing hub means: unreachable is a transient download failure (502), a repository the hub
says does not exist is not found (404), offline and not cached is not found either."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants

from mlxfleet_agent.models import errors, modeldir, progress, store
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


class FakeHub(http.server.BaseHTTPRequestHandler):
    """The endpoints huggingface_hub downloads a revision through (repo info, tree listing, file
    metadata, file bytes) over one model directory, sending bytes at `RATE` per second."""

    model: Path
    rate = 400_000  # bytes/s: a 0.4 MB test model takes about a second
    seen: list[str]

    def _files(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.model.iterdir())}

    def _json(self, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _file(self, head: bool) -> None:
        name = self.path.split("?")[0].rsplit("/", 1)[-1]
        data = self._files().get(name)
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if head:
            return
        for i in range(0, len(data), 8192):
            self.wfile.write(data[i : i + 8192])
            time.sleep(8192 / self.rate)

    def do_HEAD(self) -> None:
        self.seen.append(f"HEAD {self.path}")
        self._file(head=True)

    def do_GET(self) -> None:
        self.seen.append(f"GET {self.path}")
        path = self.path.split("?")[0]
        if path == "/api/models/mlxfleet/tiny" or path.startswith(
            "/api/models/mlxfleet/tiny/revision/"
        ):
            files = [{"rfilename": n} for n in self._files()]
            self._json({"id": "mlxfleet/tiny", "sha": COMMIT, "siblings": files})
        elif path.startswith("/api/models/mlxfleet/tiny/tree/"):
            items = self._files().items()
            oid = {n: hashlib.sha256(d).hexdigest()[:40] for n, d in items}
            self._json(
                [{"type": "file", "path": n, "size": len(d), "oid": oid[n]} for n, d in items]
            )
        elif "/resolve/" in path:
            self._file(head=False)
        else:
            self.send_error(404)

    def log_message(self, *_: Any) -> None:
        return


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch, model_a: Path) -> Iterator[type[FakeHub]]:
    hub = type("Hub", (FakeHub,), {"model": model_a, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setattr(constants, "ENDPOINT", url)  # HF_ENDPOINT, read at its import
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    yield hub
    server.shutdown()
    server.server_close()


def test_a_download_from_the_hub_reports_bytes_done_of_the_listed_total(
    online_empty_cache: Path, fake_hub: type[FakeHub], tmp_path: Path, model_a: Path
) -> None:
    """hf:// reported 0/0 until done, so a first model of several GB looked hung (issue 28 item
    2): the total comes from the hub's listing, bytes done grow while it downloads, and the
    slot's meter turns them into a rate, as for s3://."""
    meter = progress.Meter()
    seen: list[tuple[int, int]] = []
    snapshots = []

    def report(done: int, total: int) -> None:
        seen.append((done, total))
        meter.update(done, total)
        snapshots.append(meter.snapshot())

    s = store.Store(tmp_path / "models")
    path = asyncio.run(s.ensure(msource.parse("hf://mlxfleet/tiny"), progress_cb=report))
    assert (path / "model.safetensors").read_bytes() == (model_a / "model.safetensors").read_bytes()
    total = sum(p.stat().st_size for p in model_a.iterdir())
    assert seen[-1] == (total, total)
    middle = [d for d, t in seen if t == total and 0 < d < total]
    assert middle, seen  # reported while it downloaded, not only 0/0 then done
    assert middle == sorted(middle)
    assert any(p is not None and p.bytes_per_second > 0 for p in snapshots)
    assert any("/tree/" in r for r in fake_hub.seen)  # the total came from the listing
