"""`hf://org/repo` sources (+ revision): a snapshot in the Hugging Face cache, used in place.

`huggingface_hub.snapshot_download` into the cache (`HF_HUB_CACHE` / `HF_HOME`, read at call
time), `local_files_only` when `HF_HUB_OFFLINE` is set. Blocking: runs in a worker thread.
Progress: the revision's files and sizes come from the hub's listing first (the calls
huggingface_hub makes itself), and a watcher thread counts the bytes on disk while it downloads,
so a model of several GB reports bytes done / total and a rate as `s3://` does instead of `0/0`
until it is done.
May import: huggingface_hub (imported when called), the standard library, models.errors,
models.source. Called by: models.store.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from mlxfleet_agent.models import errors, source

HF_ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.py", "tokenizer.model", "*.tiktoken", "*.txt"]


def default_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment at call time."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache)
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home) / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


Progress = Callable[[int, int], None]
POLL_S = 0.5  # how often the bytes on disk are counted while huggingface_hub downloads


@dataclass(frozen=True, slots=True)
class Listing:
    """What the hub lists for one revision, as the download will fetch it."""

    commit: str
    files: dict[str, int]  # path in the repo -> size, only those HF_ALLOW_PATTERNS fetches

    @property
    def total(self) -> int:
        return sum(self.files.values())


def listing(src: source.HfRepo, revision: str | None) -> Listing | None:
    """The revision's commit and files (sizes) from the hub: `repo_info` + `list_repo_tree`, the
    calls huggingface_hub makes itself; None when the hub does not answer (the download then
    says why)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    api = HfApi()
    try:
        commit = api.repo_info(src.repo, revision=revision).sha
        if commit is None:
            return None
        tree = [
            f
            for f in api.list_repo_tree(src.repo, revision=commit, recursive=True)
            if isinstance(f, RepoFile)
        ]
    except Exception:  # the download that follows reports the hub's answer
        return None
    wanted = {f.path: f.size for f in tree if any(fnmatch(f.path, p) for p in HF_ALLOW_PATTERNS)}
    return Listing(commit=commit, files=wanted)


def bytes_on_disk(storage: Path, found: Listing) -> int:
    """How much of the listed files is in the cache now: finished files in the snapshot folder,
    plus the partial blobs huggingface_hub is writing (`blobs/*.incomplete`)."""
    done = 0
    snapshot = storage / "snapshots" / found.commit
    for name, size in found.files.items():
        if (snapshot / name).exists():
            done += size
    with contextlib.suppress(OSError):
        for part in (storage / "blobs").glob("*.incomplete"):
            with contextlib.suppress(OSError):
                done += part.stat().st_size
    return min(done, found.total)


def download(
    src: source.HfRepo,
    revision: str | None,
    *,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> Path:
    """Snapshot folder of the repo at its revision (downloading unless offline).

    `progress(done, total)`: bytes of the files the hub lists for the revision (the total from
    its listing; done counted on disk every `POLL_S` while huggingface_hub downloads), as the
    s3 download reports them; not called offline (nothing is downloaded then).

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

    where = f"hf://{src.repo}@{revision or 'main'}"
    hub_offline = offline()
    cache = cache_dir or default_cache_dir()
    found = listing(src, revision) if progress is not None and not hub_offline else None
    stop = threading.Event()
    if found is not None and progress is not None:
        storage = cache / f"models--{src.repo.replace('/', '--')}"
        watcher = threading.Thread(
            target=_watch, args=(storage, found, progress, stop), daemon=True
        )
        watcher.start()
    try:
        path = snapshot_download(
            src.repo,
            revision=revision,
            cache_dir=cache,
            local_files_only=hub_offline,
            allow_patterns=HF_ALLOW_PATTERNS,
        )
    except LocalEntryNotFoundError as exc:
        if hub_offline or _offline_mode(exc):
            raise errors.ModelNotFound(
                f"{where} is not in the Hugging Face cache and the hub is offline (HF_HUB_OFFLINE)"
            ) from exc
        why = " ".join(str(exc).split())  # huggingface_hub's text spans lines
        raise errors.DownloadFailed(f"{where}: the hub could not be reached: {why}") from exc
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        field = "revision" if isinstance(exc, RevisionNotFoundError) else "source"
        raise errors.ModelNotFound(f"{where}: {exc}", field=field) from exc
    except HfHubHTTPError as exc:
        raise errors.DownloadFailed(f"hf://{src.repo}: {exc}") from exc
    except (OSError, ValueError) as exc:
        raise errors.DownloadFailed(f"hf://{src.repo}: {exc}") from exc
    finally:
        stop.set()
    if found is not None and progress is not None:
        progress(found.total, found.total)
    out = Path(str(path))
    if not (out / "config.json").is_file():
        raise errors.ModelNotFound(f"hf://{src.repo} has no config.json at {revision or 'main'}")
    return out


def _watch(storage: Path, found: Listing, progress: Progress, stop: threading.Event) -> None:
    """Report the bytes on disk every `POLL_S` until `stop` (its own thread)."""
    while True:
        progress(bytes_on_disk(storage, found), found.total)
        if stop.wait(POLL_S):
            return


def _offline_mode(exc: BaseException) -> bool:
    """huggingface_hub refused to go online (its own HF_HUB_OFFLINE, read at its import)."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    return isinstance(exc.__cause__, OfflineModeIsEnabled)


def delete_snapshot(snapshot: Path) -> None:
    """Remove one revision from the Hugging Face cache (blobs no other revision uses)."""
    from huggingface_hub import scan_cache_dir

    cache = snapshot.parent.parent.parent
    info = scan_cache_dir(cache)
    info.delete_revisions(snapshot.name).execute()
