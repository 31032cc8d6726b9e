"""Model sources: parse `file://`, `s3://`, `hf://` strings and fetch them to a local directory.

- `file:///abs/path`: used in place, only under the allowed roots (the models dir always is one);
  symlinks and `..` are resolved first and the resolved path must stay inside a root.
- `s3://bucket/prefix`: every object under the prefix, streamed with boto3 into a partial folder;
  each file's size and (for single-part uploads) its MD5 ETag are verified, a `.part` file is
  resumed with a Range request, and the caller renames the folder into place once complete.
  `revision` is part of the cached copy's identity only (S3 has no repository revisions).
- `hf://org/repo` (+ `revision`): `huggingface_hub.snapshot_download` into the Hugging Face cache
  (`HF_HUB_CACHE` / `HF_HOME`), `local_files_only` when `HF_HUB_OFFLINE` is set; used in place.

Errors are `StoreError`s naming the field and what is allowed; `http_status` is the agent's hint.
Blocking functions here run in a worker thread (the store calls them via `asyncio.to_thread`).
May import: boto3, huggingface_hub, the standard library, contract. Called by: store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from mlxfleet_agent import contract

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

ProgressCallback = Callable[[int, int], None]
"""progress(done_bytes, total_bytes); may raise to abort the download (it runs in the worker)."""

CHUNK_BYTES = 1024 * 1024
MANIFEST = ".mlxfleet-manifest.json"
PART_SUFFIX = ".part"
HF_ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.py", "tokenizer.model", "*.tiktoken", "*.txt"]


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class StoreError(Exception):
    """A model store failure the agent maps to an HTTP error (see `http_status`)."""

    http_status = 400

    def __init__(self, message: str, *, field: str | None = "source", allowed: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.allowed = allowed

    def detail(self) -> contract.ErrorDetail:
        return contract.ErrorDetail(field=self.field, message=self.message, allowed=self.allowed)


class InvalidSource(StoreError):
    """The source string is malformed (scheme, path, bucket, repo)."""

    http_status = 422


class SourceNotAllowed(StoreError):
    """A file:// path that resolves outside every allowed root."""

    http_status = 403


class ModelNotFound(StoreError):
    """Nothing (or no model) at the source, or an unknown cached model id."""

    http_status = 404


class ModelInUse(StoreError):
    """Eviction of a model a slot wants."""

    http_status = 409


class InsufficientDisk(StoreError):
    """Not enough free disk even after evicting every unused cached model."""

    http_status = 507


class DownloadFailed(StoreError):
    """The remote store failed or returned data that does not verify (size, MD5)."""

    http_status = 502


class DownloadCancelled(StoreError):
    """The store was closed while downloading."""

    http_status = 503


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileSource:
    path: PurePosixPath


@dataclass(frozen=True)
class S3Source:
    bucket: str
    prefix: str  # "" (whole bucket) or "a/b/" (always a trailing slash)

    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class HfSource:
    repo: str
    revision: str | None


Source = FileSource | S3Source | HfSource

ALLOWED_SOURCES = "file:///<absolute path>, hf://<org>/<repo> or s3://<bucket>/<prefix>"


def parse(source: str, revision: str | None = None) -> Source:
    """Validate (as the wire contract does) and split a source string."""
    if not isinstance(source, str) or not 4 <= len(source) <= 2048:
        raise InvalidSource(
            "source must be a string of 4 to 2048 characters", allowed=ALLOWED_SOURCES
        )
    if revision is not None and not (
        isinstance(revision, str) and 1 <= len(revision) <= 256 and revision.isprintable()
    ):
        raise InvalidSource(
            "revision must be 1 to 256 printable characters",
            field="revision",
            allowed="a branch, tag or commit",
        )
    try:
        contract.check_source(source)
    except contract.SourceError as exc:
        raise InvalidSource(str(exc), allowed=ALLOWED_SOURCES) from exc
    parts = urlsplit(source)
    if parts.scheme == "file":
        return FileSource(PurePosixPath(parts.path))
    if parts.scheme == "hf":
        return HfSource(parts.netloc + parts.path, revision)
    prefix = parts.path.strip("/")
    if "//" in prefix or "." in prefix.split("/"):
        raise InvalidSource(
            "s3 prefix must not contain empty or '.' segments", allowed=ALLOWED_SOURCES
        )
    return S3Source(parts.netloc, f"{prefix}/" if prefix else "")


def model_id(source: str, revision: str | None) -> str:
    """Stable id of the cached copy of (source, revision)."""
    return hashlib.sha256(f"{source}\n{revision or ''}".encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# file://
# --------------------------------------------------------------------------------------------


def resolve_file(src: FileSource, roots: Sequence[Path]) -> Path:
    """The resolved model directory, if inside an allowed root; containment is checked first
    (on the resolved path, so symlinks cannot escape) and only then existence. The refusal names
    the path as given, never where a symlink leads."""
    try:
        real = Path(src.path).resolve(strict=False)
    except (ValueError, OSError) as exc:  # NUL byte, symlink loop
        raise InvalidSource(f"file source {src.path!r} cannot be resolved: {exc}") from exc
    resolved_roots = [Path(r).resolve(strict=False) for r in roots]
    if not any(real == r or real.is_relative_to(r) for r in resolved_roots):
        raise SourceNotAllowed(
            f"file source {src.path} is outside the allowed roots (symlinks are followed)",
            allowed=", ".join(str(r) for r in resolved_roots),
        )
    if not real.is_dir():
        raise ModelNotFound(f"file source {src.path}: no such directory")
    if not (real / "config.json").is_file():
        raise ModelNotFound(f"file source {src.path} is not a model directory (no config.json)")
    return real


# --------------------------------------------------------------------------------------------
# s3://
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteObject:
    key: str
    rel: str
    size: int
    etag: str

    def md5(self) -> str | None:
        """The object's MD5 when its ETag is one (single-part upload), else None."""
        tag = self.etag.strip('"')
        is_md5 = len(tag) == 32 and all(c in "0123456789abcdef" for c in tag.lower())
        return tag.lower() if is_md5 else None


def _safe_rel(rel: str) -> bool:
    segments = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(s not in ("", ".", "..") for s in segments)


def list_s3(client: S3Client, src: S3Source) -> list[RemoteObject]:
    """Every object under the prefix (folder markers skipped); DownloadFailed on store errors."""
    from botocore.exceptions import BotoCoreError, ClientError

    objects: list[RemoteObject] = []
    try:
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=src.bucket, Prefix=src.prefix
        )
        for page in pages:
            for obj in page.get("Contents", []):
                key = obj["Key"]
                rel = key[len(src.prefix) :]
                if key.endswith("/"):
                    continue
                if not _safe_rel(rel):
                    raise DownloadFailed(f"{src.url()}: refusing object key {key!r} (unsafe path)")
                objects.append(RemoteObject(key, rel, int(obj["Size"]), obj.get("ETag", "")))
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ("NoSuchBucket", "404"):
            raise ModelNotFound(f"{src.url()}: bucket {src.bucket!r} does not exist") from exc
        raise DownloadFailed(f"{src.url()}: listing failed ({code or exc})") from exc
    except BotoCoreError as exc:
        raise DownloadFailed(f"{src.url()}: listing failed ({exc})") from exc
    names = {o.rel for o in objects}
    if "config.json" not in names or not any(n.endswith(".safetensors") for n in names):
        raise ModelNotFound(f"{src.url()} holds no model (needs config.json and *.safetensors)")
    return sorted(objects, key=lambda o: o.rel)


def _manifest(src: S3Source, objects: Sequence[RemoteObject]) -> dict[str, Any]:
    return {
        "source": src.url(),
        "objects": [{"rel": o.rel, "size": o.size, "etag": o.etag} for o in objects],
    }


def _hash_file(path: Path) -> tuple[Any, int]:
    digest = hashlib.md5(usedforsecurity=False)
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return digest, size


class _Progress:
    def __init__(self, total: int, callback: ProgressCallback | None, abort: threading.Event):
        self.total, self.done, self.callback, self.abort = total, 0, callback, abort

    def add(self, n: int) -> None:
        if self.abort.is_set():
            raise DownloadCancelled("model store is shutting down", field=None)
        self.done += n
        if self.callback is not None:
            self.callback(self.done, self.total)


def _fetch_object(
    client: S3Client, src: S3Source, obj: RemoteObject, dest: Path, progress: _Progress
) -> None:
    """Download (or resume) one object into dest via dest.part, verify, rename into place."""
    from botocore.exceptions import BotoCoreError, ClientError

    if dest.is_file() and dest.stat().st_size == obj.size:
        progress.add(obj.size)  # verified before it was renamed from .part
        return
    part = dest.with_name(dest.name + PART_SUFFIX)
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest, offset = _hash_file(part) if part.is_file() else (hashlib.md5(usedforsecurity=False), 0)
    if offset > obj.size:
        part.unlink()
        digest, offset = hashlib.md5(usedforsecurity=False), 0
    progress.add(offset)
    if offset < obj.size:
        kwargs: dict[str, Any] = {"Bucket": src.bucket, "Key": obj.key}
        if obj.etag:
            kwargs["IfMatch"] = obj.etag
        if offset:
            kwargs["Range"] = f"bytes={offset}-"
        try:
            body = client.get_object(**kwargs)["Body"]
            with contextlib.closing(body), part.open("ab") as f:
                for chunk in body.iter_chunks(CHUNK_BYTES):
                    f.write(chunk)
                    digest.update(chunk)
                    offset += len(chunk)
                    progress.add(len(chunk))
                f.flush()
                os.fsync(f.fileno())
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            raise DownloadFailed(f"s3://{src.bucket}/{obj.key}: download failed ({code})") from exc
        except BotoCoreError as exc:
            raise DownloadFailed(f"s3://{src.bucket}/{obj.key}: download failed ({exc})") from exc
    md5 = obj.md5()
    if offset != obj.size or (md5 is not None and digest.hexdigest() != md5):
        part.unlink(missing_ok=True)
        raise DownloadFailed(
            f"s3://{src.bucket}/{obj.key}: got {offset} bytes md5 {digest.hexdigest()}, "
            f"expected {obj.size} bytes md5 {md5 or '(multipart, not checked)'}"
        )
    part.rename(dest)


def prepare_partial(src: S3Source, objects: Sequence[RemoteObject], partial: Path) -> None:
    """Keep what a previous try left in `partial` when the remote listing is unchanged (the
    peer fetcher fills the same folder first), start it over otherwise."""
    manifest = _manifest(src, objects)
    mpath = partial / MANIFEST
    if partial.exists():
        try:
            previous = json.loads(mpath.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = None
        if previous != manifest:
            shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    mpath.write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def download_s3(
    client: S3Client,
    src: S3Source,
    objects: Sequence[RemoteObject],
    partial: Path,
    *,
    progress: ProgressCallback | None,
    abort: threading.Event,
) -> None:
    """Fill `partial` with a verified copy of `objects` (from list_s3), resuming what a previous
    try left there when the remote listing is unchanged, starting over otherwise."""
    prepare_partial(src, objects, partial)
    tracker = _Progress(sum(o.size for o in objects), progress, abort)
    tracker.add(0)
    for obj in objects:
        _fetch_object(client, src, obj, partial.joinpath(*obj.rel.split("/")), tracker)


# --------------------------------------------------------------------------------------------
# hf://
# --------------------------------------------------------------------------------------------


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment at call time."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache)
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home) / "hub"


def hf_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def download_hf(src: HfSource, *, cache_dir: Path | None = None) -> Path:
    """Snapshot folder of the repo at its revision (downloading unless offline).

    What the hub said decides the error: no such repository or revision (or no access to it)
    is `ModelNotFound` (404: it cannot be served as given); a hub that cannot be reached or
    fails is `DownloadFailed` (502: worth retrying), with its error. huggingface_hub raises
    `LocalEntryNotFoundError` both when offline and on connection errors; only the first is
    "not in the cache and offline"."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"hf://{src.repo}@{src.revision or 'main'}"
    offline = hf_offline()
    try:
        path = snapshot_download(
            src.repo,
            revision=src.revision,
            cache_dir=cache_dir or hf_cache_dir(),
            local_files_only=offline,
            allow_patterns=HF_ALLOW_PATTERNS,
        )
    except LocalEntryNotFoundError as exc:
        if offline or _offline_mode(exc):
            raise ModelNotFound(
                f"{where} is not in the Hugging Face cache and the hub is offline (HF_HUB_OFFLINE)"
            ) from exc
        why = " ".join(str(exc).split())  # huggingface_hub's text spans lines
        raise DownloadFailed(f"{where}: the hub could not be reached: {why}") from exc
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        field = "revision" if isinstance(exc, RevisionNotFoundError) else "source"
        raise ModelNotFound(f"{where}: {exc}", field=field) from exc
    except HfHubHTTPError as exc:
        raise DownloadFailed(f"hf://{src.repo}: {exc}") from exc
    except (OSError, ValueError) as exc:
        raise DownloadFailed(f"hf://{src.repo}: {exc}") from exc
    out = Path(str(path))
    if not (out / "config.json").is_file():
        raise ModelNotFound(f"hf://{src.repo} has no config.json at {src.revision or 'main'}")
    return out


def _offline_mode(exc: BaseException) -> bool:
    """huggingface_hub refused to go online (its own HF_HUB_OFFLINE, read at its import)."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    return isinstance(exc.__cause__, OfflineModeIsEnabled)


def delete_hf_snapshot(snapshot: Path) -> None:
    """Remove one revision from the Hugging Face cache (blobs no other revision uses)."""
    from huggingface_hub import scan_cache_dir

    cache = snapshot.parent.parent.parent
    info = scan_cache_dir(cache)
    info.delete_revisions(snapshot.name).execute()
