"""`s3://bucket/prefix` sources: list the model's objects and download them, verified.

Every object under the prefix is streamed into a partial folder; each file's size and (for
single-part uploads) its MD5 ETag are verified, a `.part` file is resumed with a Range request,
and the store renames the folder into place once complete. `revision` is part of the cached
copy's identity only (S3 has no repository revisions). Blocking: runs in a worker thread.
May import: botocore (errors), the standard library, models.errors, models.source.
Called by: models.store.
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxfleet_agent.models import errors, source

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

ProgressCallback = Callable[[int, int], None]
"""progress(done_bytes, total_bytes); may raise to abort the download (it runs in the worker)."""

CHUNK_BYTES = 1024 * 1024
MANIFEST = ".mlxfleet-manifest.json"
PART_SUFFIX = ".part"


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


def list_objects(client: S3Client, src: source.S3Prefix) -> list[RemoteObject]:
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
                    raise errors.DownloadFailed(
                        f"{src.url()}: refusing object key {key!r} (unsafe path)"
                    )
                objects.append(RemoteObject(key, rel, int(obj["Size"]), obj.get("ETag", "")))
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ("NoSuchBucket", "404"):
            raise errors.ModelNotFound(
                f"{src.url()}: bucket {src.bucket!r} does not exist"
            ) from exc
        raise errors.DownloadFailed(f"{src.url()}: listing failed ({code or exc})") from exc
    except BotoCoreError as exc:
        raise errors.DownloadFailed(f"{src.url()}: listing failed ({exc})") from exc
    names = {o.rel for o in objects}
    if "config.json" not in names or not any(n.endswith(".safetensors") for n in names):
        raise errors.ModelNotFound(
            f"{src.url()} holds no model (needs config.json and *.safetensors)"
        )
    return sorted(objects, key=lambda o: o.rel)


def _manifest(src: source.S3Prefix, objects: Sequence[RemoteObject]) -> dict[str, Any]:
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
            raise errors.DownloadCancelled("model store is shutting down", field=None)
        self.done += n
        if self.callback is not None:
            self.callback(self.done, self.total)


def _fetch_object(
    client: S3Client, src: source.S3Prefix, obj: RemoteObject, dest: Path, progress: _Progress
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
            raise errors.DownloadFailed(
                f"s3://{src.bucket}/{obj.key}: download failed ({code})"
            ) from exc
        except BotoCoreError as exc:
            raise errors.DownloadFailed(
                f"s3://{src.bucket}/{obj.key}: download failed ({exc})"
            ) from exc
    md5 = obj.md5()
    if offset != obj.size or (md5 is not None and digest.hexdigest() != md5):
        part.unlink(missing_ok=True)
        raise errors.DownloadFailed(
            f"s3://{src.bucket}/{obj.key}: got {offset} bytes md5 {digest.hexdigest()}, "
            f"expected {obj.size} bytes md5 {md5 or '(multipart, not checked)'}"
        )
    part.rename(dest)


def download(
    client: S3Client,
    src: source.S3Prefix,
    objects: Sequence[RemoteObject],
    partial: Path,
    *,
    progress: ProgressCallback | None,
    abort: threading.Event,
) -> None:
    """Fill `partial` with a verified copy of `objects` (from list_objects), resuming what a
    previous try left there when the remote listing is unchanged, starting over otherwise."""
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
    tracker = _Progress(sum(o.size for o in objects), progress, abort)
    tracker.add(0)
    for obj in objects:
        _fetch_object(client, src, obj, partial.joinpath(*obj.rel.split("/")), tracker)
