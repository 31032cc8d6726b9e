"""Model source strings: `file:///abs`, `hf://org/repo`, `s3://bucket/prefix`, checked as the
wire contract does (the agent's `models.source` parses them further).

May import: pydantic and the standard library only (pure).
Called by: contract.slots, contract.models, the agent's model store, the operator's API models.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

SOURCE_SCHEMES = ("file", "hf", "s3")
# Hugging Face repo ids: org/name, each starting with a letter, digit or underscore, no "..".
HF_REPO = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/\w[\w.-]{0,95}$")
S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
ALLOWED_SOURCES = "file:///<absolute path>, hf://<org>/<repo> or s3://<bucket>/<prefix>"


class SourceError(ValueError):
    """A model source string that is not `file:///abs`, `hf://org/repo` or `s3://bucket/prefix`."""


def check_source(value: str) -> str:
    """Validate a model source and return it unchanged; raise SourceError naming what is allowed."""
    allowed = ALLOWED_SOURCES
    if not value.isprintable():  # urlsplit silently drops tabs and newlines: refuse them here
        raise SourceError("model source must not contain control characters (NUL, newline, tab)")
    if value != value.strip():
        raise SourceError("model source must not start or end with whitespace")
    parts = urlsplit(value)
    if parts.scheme not in SOURCE_SCHEMES:
        raise SourceError(f"unknown scheme {parts.scheme!r}: allowed are {allowed}")
    if parts.scheme == "file":
        if parts.netloc:
            raise SourceError(f"file source must be file:///<absolute path>, got {value!r}")
        if not parts.path.startswith("/"):
            raise SourceError("file source path must be absolute")
        if any(seg in ("..", ".") for seg in parts.path.split("/")):
            raise SourceError("file source path must not contain '.' or '..' segments")
    elif parts.scheme == "hf":
        repo = parts.netloc + parts.path
        if not HF_REPO.match(repo) or ".." in repo:
            raise SourceError(f"hf source must be hf://<org>/<repo>, got {value!r}")
    else:
        if not S3_BUCKET.match(parts.netloc):
            raise SourceError(f"s3 source must be s3://<bucket>/<prefix>, got {value!r}")
        if ".." in parts.path.split("/"):
            raise SourceError("s3 prefix must not contain '..' segments")
    if parts.query or parts.fragment:
        raise SourceError("model source must not carry a query or fragment")
    return value


ModelSource = Annotated[str, Field(min_length=4, max_length=2048), AfterValidator(check_source)]
