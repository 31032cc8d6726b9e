"""`file://` sources: a model directory used in place, only under the allowed roots.

Symlinks and `..` are resolved first and the resolved path must stay inside a root (the models
dir always is one); only then is existence checked, and a refusal names the path as given,
never where a symlink leads.
May import: the standard library, models.errors, models.source. Called by: models.store,
models.catalog (admission).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mlxfleet_agent.models import errors, source


def resolve(src: source.FilePath, roots: Sequence[Path]) -> Path:
    """The resolved model directory, if inside an allowed root; containment is checked first
    (on the resolved path, so symlinks cannot escape) and only then existence. The refusal names
    the path as given, never where a symlink leads."""
    try:
        real = Path(src.path).resolve(strict=False)
    except (ValueError, OSError) as exc:  # NUL byte, symlink loop
        raise errors.InvalidSource(f"file source {src.path!r} cannot be resolved: {exc}") from exc
    resolved_roots = [Path(r).resolve(strict=False) for r in roots]
    if not any(real == r or real.is_relative_to(r) for r in resolved_roots):
        raise errors.SourceNotAllowed(
            f"file source {src.path} is outside the allowed roots (symlinks are followed)",
            allowed=", ".join(str(r) for r in resolved_roots),
        )
    if not real.is_dir():
        raise errors.ModelNotFound(f"file source {src.path}: no such directory")
    if not (real / "config.json").is_file():
        raise errors.ModelNotFound(
            f"file source {src.path} is not a model directory (no config.json)"
        )
    return real
