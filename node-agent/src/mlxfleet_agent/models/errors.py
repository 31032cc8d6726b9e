"""Errors of the model store: each names the field at fault and what is allowed, and carries the
HTTP status the agent answers with (`http_status`).

May import: the standard library. Called by: every models module; mapped to `refusals.Rejected`
by models.catalog.
"""

from __future__ import annotations


class StoreError(Exception):
    """A model store failure the agent maps to an HTTP error (see `http_status`)."""

    http_status = 400

    def __init__(self, message: str, *, field: str | None = "source", allowed: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.allowed = allowed


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
