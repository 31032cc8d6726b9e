"""s3:// sources against a real S3 server: verified download, atomic rename, interrupted and
corrupted downloads, a changed remote, concurrent prefetch, LRU eviction under a cache cap."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mlxfleet_agent.models import errors, index, modeldir, store
from mlxfleet_agent.models import s3 as s3fetch
from mlxfleet_agent.models import source as msource
from tests.support.s3 import S3Server

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.s3

FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


class Counting:
    """A factory of real boto3 clients (endpoint and keys from AWS_* env) that logs GetObjects."""

    def __init__(self) -> None:
        self.clients = 0
        self.gets: list[dict[str, Any]] = []

    def __call__(self) -> S3Client:
        self.clients += 1
        client = store.default_s3_client()

        def log(params: dict[str, Any], **_: Any) -> None:
            self.gets.append(dict(params))

        client.meta.events.register("provide-client-params.s3.GetObject", log)
        return client


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server


def upload(server: S3Server, model: Path, bucket: str, prefix: str) -> str:
    client = server.client()
    for path in sorted(model.iterdir()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.name}")
    return f"s3://{bucket}/{prefix}"


def new_store(tmp_path: Path, **kwargs: Any) -> tuple[store.Store, Counting]:
    counting = Counting()
    kwargs.setdefault("min_free_bytes", 0)
    return store.Store(tmp_path / "models", s3_client=counting, **kwargs), counting


def same_files(a: Path, b: Path) -> bool:
    return all((a / n).read_bytes() == (b / n).read_bytes() for n in FILES)


def raise_after(limit: int) -> Callable[[int, int], None]:
    def cb(done: int, total: int) -> None:
        if done >= limit:
            raise RuntimeError(f"interrupted at {done}/{total}")

    return cb


def test_download_verifies_and_renames_into_place(
    s3_env: S3Server, tmp_path: Path, model_a: Path
) -> None:
    source = upload(s3_env, model_a, s3_env.make_bucket(), "tiny/a")
    s, counting = new_store(tmp_path)
    seen: list[tuple[int, int]] = []
    path = asyncio.run(
        s.ensure(msource.parse(source), progress_cb=lambda d, t: seen.append((d, t)))
    )
    assert same_files(path, model_a)
    assert path.parent.name == "s3"
    assert not any((tmp_path / "models" / index.STORE_DIR / "partial").iterdir())
    total = sum(p.stat().st_size for p in model_a.iterdir())
    assert seen[0] == (0, total)
    assert seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    [cached] = s.list()
    assert (cached.source, cached.size_bytes) == (source, modeldir.weights_bytes(model_a))
    assert not cached.in_use
    # cached: a second ensure downloads nothing
    gets = len(counting.gets)
    assert asyncio.run(s.ensure(msource.parse(source))) == path
    assert len(counting.gets) == gets


def test_interrupted_download_resumes_with_range(
    s3_env: S3Server, tmp_path: Path, model_a: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3fetch, "CHUNK_BYTES", 32 * 1024)
    source = upload(s3_env, model_a, s3_env.make_bucket(), "tiny/a")
    s, counting = new_store(tmp_path)
    with pytest.raises(RuntimeError, match="interrupted"):
        asyncio.run(
            s.ensure(msource.parse(source), progress_cb=raise_after(100_000), holder="slot-a")
        )
    assert s.list() == []
    assert s.holders(msource.parse(source, None).id) == set()
    partial = tmp_path / "models" / index.STORE_DIR / "partial" / msource.parse(source, None).id
    part = partial / "model.safetensors.part"
    assert (partial / "config.json").is_file()  # finished files stay
    assert 0 < part.stat().st_size < (model_a / "model.safetensors").stat().st_size
    counting.gets.clear()
    seen: list[int] = []
    path = asyncio.run(s.ensure(msource.parse(source), progress_cb=lambda d, t: seen.append(d)))
    assert same_files(path, model_a)
    keys = [g["Key"].rsplit("/", 1)[1] for g in counting.gets]
    assert "config.json" not in keys  # not fetched again
    [resumed] = [g for g in counting.gets if g["Key"].endswith("model.safetensors")]
    assert resumed["Range"].startswith("bytes=")
    assert int(resumed["Range"][6:-1]) > 0
    assert not partial.exists()


def test_corrupt_partial_fails_verification_then_recovers(
    s3_env: S3Server, tmp_path: Path, model_a: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3fetch, "CHUNK_BYTES", 32 * 1024)
    source = upload(s3_env, model_a, s3_env.make_bucket(), "tiny/a")
    s, _ = new_store(tmp_path)
    with pytest.raises(RuntimeError, match="interrupted"):
        asyncio.run(s.ensure(msource.parse(source), progress_cb=raise_after(100_000)))
    part = next((tmp_path / "models" / index.STORE_DIR / "partial").rglob("*.part"))
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(errors.DownloadFailed, match="md5") as info:
        asyncio.run(s.ensure(msource.parse(source)))
    assert info.value.http_status == 502
    assert not part.exists()
    assert same_files(asyncio.run(s.ensure(msource.parse(source))), model_a)


def test_changed_remote_restarts_download(
    s3_env: S3Server, tmp_path: Path, model_a: Path, model_b: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3fetch, "CHUNK_BYTES", 32 * 1024)
    bucket = s3_env.make_bucket()
    source = upload(s3_env, model_a, bucket, "tiny/x")
    s, _ = new_store(tmp_path)
    with pytest.raises(RuntimeError, match="interrupted"):
        asyncio.run(s.ensure(msource.parse(source), progress_cb=raise_after(100_000)))
    upload(s3_env, model_b, bucket, "tiny/x")
    assert same_files(asyncio.run(s.ensure(msource.parse(source))), model_b)


def test_concurrent_prefetch_downloads_once(
    s3_env: S3Server, tmp_path: Path, model_a: Path
) -> None:
    source = upload(s3_env, model_a, s3_env.make_bucket(), "tiny/a")
    s, counting = new_store(tmp_path)
    seen: dict[str, list[int]] = {"one": [], "two": []}

    async def both() -> tuple[Path, Path]:
        return await asyncio.gather(
            s.ensure(
                msource.parse(source),
                progress_cb=lambda d, t: seen["one"].append(d),
                holder="slot-1",
            ),
            s.ensure(
                msource.parse(source),
                progress_cb=lambda d, t: seen["two"].append(d),
                holder="slot-2",
            ),
        )

    first, second = asyncio.run(both())
    assert first == second
    assert counting.clients == 1
    assert len(counting.gets) == len(list(model_a.iterdir()))
    total = sum(p.stat().st_size for p in model_a.iterdir())
    assert seen["one"][-1] == seen["two"][-1] == total
    assert s.holders(msource.parse(source, None).id) == {"slot-1", "slot-2"}


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        pytest.param("s3://no-such-bucket-here/x", "does not exist", id="no-bucket"),
        pytest.param("s3://{bucket}/empty", "holds no model", id="empty-prefix"),
        pytest.param("s3://{bucket}/onlyconfig", "holds no model", id="no-weights"),
    ],
)
def test_missing_models(s3_env: S3Server, tmp_path: Path, source: str, needle: str) -> None:
    bucket = s3_env.make_bucket()
    s3_env.client().put_object(Bucket=bucket, Key="onlyconfig/config.json", Body=b"{}")
    s, _ = new_store(tmp_path)
    with pytest.raises(errors.ModelNotFound, match=needle) as info:
        asyncio.run(s.ensure(msource.parse(source.format(bucket=bucket))))
    assert info.value.http_status == 404


def test_lru_eviction_under_cache_cap(
    s3_env: S3Server, tmp_path: Path, model_a: Path, model_b: Path
) -> None:
    bucket = s3_env.make_bucket()
    src_a, src_b = upload(s3_env, model_a, bucket, "a"), upload(s3_env, model_b, bucket, "b")
    size = sum(p.stat().st_size for p in model_a.iterdir())
    s, _ = new_store(tmp_path, max_cache_bytes=size * 3 // 2)
    path_a = asyncio.run(s.ensure(msource.parse(src_a), holder="slot-a"))
    with pytest.raises(errors.InsufficientDisk, match="need"):  # A is wanted: never evicted
        asyncio.run(s.ensure(msource.parse(src_b)))
    assert path_a.is_dir()
    s.release("slot-a")
    path_b = asyncio.run(s.ensure(msource.parse(src_b), holder="slot-b"))
    assert not path_a.exists()
    assert [m.source for m in s.list()] == [src_b]
    assert same_files(path_b, model_b)


def test_evict_and_gc(s3_env: S3Server, tmp_path: Path, model_a: Path, model_b: Path) -> None:
    bucket = s3_env.make_bucket()
    src_a, src_b = upload(s3_env, model_a, bucket, "a"), upload(s3_env, model_b, bucket, "b")
    s, _ = new_store(tmp_path)
    path_a = asyncio.run(s.ensure(msource.parse(src_a), holder="slot-a"))
    path_b = asyncio.run(s.ensure(msource.parse(src_b)))
    id_a, id_b = msource.parse(src_a, None).id, msource.parse(src_b, None).id
    with pytest.raises(errors.ModelInUse, match="slot-a") as info:
        asyncio.run(s.evict(id_a))
    assert info.value.http_status == 409
    with pytest.raises(errors.ModelNotFound):
        asyncio.run(s.evict("0123456789abcdef"))
    s.min_free_bytes = 1 << 60  # the disk is "full": gc evicts every unused model
    assert asyncio.run(s.gc()) == [id_b]
    assert not path_b.exists()
    assert path_a.is_dir()
    assert [m.id for m in s.list()] == [id_a]


def test_restart_keeps_index_and_drops_orphans(
    s3_env: S3Server, tmp_path: Path, model_a: Path
) -> None:
    source = upload(s3_env, model_a, s3_env.make_bucket(), "tiny/a")
    s, _ = new_store(tmp_path)
    path = asyncio.run(s.ensure(msource.parse(source)))
    orphan = path.parent / "orphan"
    shutil.copytree(path, orphan)
    again, counting = new_store(tmp_path)
    assert [m.source for m in again.list()] == [source]
    assert not orphan.exists()
    assert asyncio.run(again.ensure(msource.parse(source))) == path
    assert counting.gets == []


def test_close_cancels_a_running_download(
    s3_env: S3Server, tmp_path: Path, model_a: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3fetch, "CHUNK_BYTES", 32 * 1024)
    source = upload(s3_env, model_a, s3_env.make_bucket(), "tiny/a")
    s, _ = new_store(tmp_path)

    def close_midway(done: int, total: int) -> None:
        if done >= 100_000:
            s.close()

    with pytest.raises(errors.DownloadCancelled, match="shutting down") as info:
        asyncio.run(s.ensure(msource.parse(source), progress_cb=close_midway))
    assert info.value.http_status == 503
    assert s.list() == []
