"""`hf://org/repo` sources (+ revision): a snapshot in the Hugging Face cache, used in place.

`huggingface_hub.snapshot_download` into the cache (`HF_HUB_CACHE` / `HF_HOME`, read at call
time), `local_files_only` when `HF_HUB_OFFLINE` is set. Blocking: runs in a worker thread.
May import: huggingface_hub (imported when called), the standard library, models.errors,
models.source. Called by: models.store.
"""

from __future__ import annotations

import os
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


def download(src: source.HfRepo, revision: str | None, *, cache_dir: Path | None = None) -> Path:
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

    where = f"hf://{src.repo}@{revision or 'main'}"
    hub_offline = offline()
    try:
        path = snapshot_download(
            src.repo,
            revision=revision,
            cache_dir=cache_dir or default_cache_dir(),
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
    out = Path(str(path))
    if not (out / "config.json").is_file():
        raise errors.ModelNotFound(f"hf://{src.repo} has no config.json at {revision or 'main'}")
    return out


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
