"""A model source, parsed once: the `Source` value of a (source string, revision) pair.

`parse(text, revision)` validates the pair as the wire contract does and splits it into where
the weights are (`FilePath`, `S3Prefix` or `HfRepo`); `Source.id` is the stable id of its cached
copy. The slot registry parses a spec's source at admission and everything downstream (the
swap, the store, the fetchers) takes the `Source`, never the string again.
May import: the standard library, contract, models.errors. Called by: models (catalog, store,
fetchers), slots (registry, slot).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from mlxfleet_agent import contract
from mlxfleet_agent.models import errors


@dataclass(frozen=True, slots=True)
class FilePath:
    """`file:///abs/path`: a directory used in place (under an allowed root)."""

    path: PurePosixPath


@dataclass(frozen=True, slots=True)
class S3Prefix:
    """`s3://bucket/prefix`: every object under the prefix."""

    bucket: str
    prefix: str  # "" (whole bucket) or "a/b/" (always a trailing slash)

    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True, slots=True)
class HfRepo:
    """`hf://org/repo`: a Hugging Face repository (at the source's revision)."""

    repo: str


Location = FilePath | S3Prefix | HfRepo


@dataclass(frozen=True, slots=True)
class Source:
    """One model: the source string as given, its revision, where it is, and its cache id."""

    text: str
    revision: str | None
    location: Location
    id: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", contract.credentials.model_id(self.text, self.revision))


def parse(text: str, revision: str | None = None) -> Source:
    """Validate (as the wire contract does) and split a source string; `InvalidSource` names
    the field and what is allowed."""
    if not isinstance(text, str) or not 4 <= len(text) <= 2048:
        raise errors.InvalidSource(
            "source must be a string of 4 to 2048 characters", allowed=contract.ALLOWED_SOURCES
        )
    if revision is not None and not (
        isinstance(revision, str) and 1 <= len(revision) <= 256 and revision.isprintable()
    ):
        raise errors.InvalidSource(
            "revision must be 1 to 256 printable characters",
            field="revision",
            allowed="a branch, tag or commit",
        )
    try:
        contract.check_source(text)
    except contract.SourceError as exc:
        raise errors.InvalidSource(str(exc), allowed=contract.ALLOWED_SOURCES) from exc
    return Source(text, revision, _location(text))


def of(spec: contract.SlotSpec | contract.PrefetchRequest) -> Source:
    """The parsed source of a slot spec or a prefetch request."""
    return parse(spec.source, spec.revision)


def _location(text: str) -> Location:
    parts = urlsplit(text)
    if parts.scheme == "file":
        return FilePath(PurePosixPath(parts.path))
    if parts.scheme == "hf":
        return HfRepo(parts.netloc + parts.path)
    prefix = parts.path.strip("/")
    if "//" in prefix or "." in prefix.split("/"):
        raise errors.InvalidSource(
            "s3 prefix must not contain empty or '.' segments", allowed=contract.ALLOWED_SOURCES
        )
    return S3Prefix(parts.netloc, f"{prefix}/" if prefix else "")
