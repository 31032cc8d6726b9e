"""The one S3 client builder of the product (any S3-compatible endpoint: AWS, R2, MinIO,
SeaweedFS), for the agent, the gateway and the operator.

`client(profile=..., endpoint_url=..., region=..., access_key_id=..., secret_access_key=...)`:
path-style addressing, SigV4, credentials given or boto3's own chain (AWS_* variables,
profiles); an empty string is "not given". Each kind of use is a `Profile` (timeouts, attempts,
retry mode, connection pool, the region when none is given):

- `MODELS`: the agent's weights (patient: a download may take long);
- `TELEMETRY`: the agent's and the gateway's telemetry shippers (short, so an unreachable store
  only delays the queue);
- the operator's reports declare their own (`adapters.objectstore.REPORTS`: botocore's timeouts
  and retry mode, one pooled connection per parallel fetch).

May import: boto3/botocore (imported when a client is built), the standard library.
`Bucket` (put, list, get on one bucket) is the telemetry shippers' store.
Called by: the agent's models.store (s3:// sources) and telemetry.shipper, the gateway's
shipper, the operator's adapters.objectstore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@dataclass(frozen=True, slots=True)
class Profile:
    """Timeouts (seconds), attempts and retry mode of one kind of use; None: botocore's own."""

    max_attempts: int
    connect_timeout_s: float | None = None
    read_timeout_s: float | None = None
    retry_mode: str | None = "standard"
    max_pool_connections: int | None = None
    default_region: str | None = None  # when the caller gives none


MODELS = Profile(connect_timeout_s=10, read_timeout_s=60, max_attempts=5)
TELEMETRY = Profile(
    connect_timeout_s=3, read_timeout_s=10, max_attempts=2, default_region="us-east-1"
)


def config(profile: Profile) -> dict[str, Any]:
    """The botocore `Config` arguments of `profile` (only what it sets; botocore's defaults for
    the rest)."""
    retries: dict[str, Any] = {"max_attempts": profile.max_attempts}
    if profile.retry_mode is not None:
        retries["mode"] = profile.retry_mode
    out: dict[str, Any] = {"s3": {"addressing_style": "path"}, "retries": retries}
    if profile.connect_timeout_s is not None:
        out["connect_timeout"] = profile.connect_timeout_s
    if profile.read_timeout_s is not None:
        out["read_timeout"] = profile.read_timeout_s
    if profile.max_pool_connections is not None:
        out["max_pool_connections"] = profile.max_pool_connections
    return out


def client(
    *,
    profile: Profile,
    endpoint_url: str | None = None,
    region: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
) -> S3Client:
    """A boto3 S3 client; endpoint and credentials from the arguments, else the AWS_* chain."""
    import boto3
    from botocore.config import Config

    s3: S3Client = boto3.client(
        "s3",
        endpoint_url=endpoint_url or None,
        region_name=region or profile.default_region,
        aws_access_key_id=access_key_id or None,
        aws_secret_access_key=secret_access_key or None,
        config=Config(**config(profile)),
    )
    return s3


class Bucket:
    """One bucket through a client of `profile`: what the telemetry shippers (agent, gateway) do
    with theirs. `put` labels a `.json` key JSON and anything else NDJSON (the intervals)."""

    def __init__(
        self,
        name: str,
        *,
        profile: Profile,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
    ) -> None:
        self.name = name
        self._client: Any = client(
            profile=profile,
            endpoint_url=endpoint_url,
            region=region,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
        )

    def put(self, key: str, body: bytes) -> None:
        kind = "application/json" if key.endswith(".json") else "application/x-ndjson"
        self._client.put_object(Bucket=self.name, Key=key, Body=body, ContentType=kind)

    def list(self, prefix: str) -> list[tuple[str, str]]:
        """(key, ETag) of every object under `prefix` (all pages)."""
        out: list[tuple[str, str]] = []
        pages = self._client.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self.name, Prefix=prefix):
            out.extend((o["Key"], str(o.get("ETag", ""))) for o in page.get("Contents") or [])
        return out

    def get(self, key: str) -> bytes:
        body: bytes = self._client.get_object(Bucket=self.name, Key=key)["Body"].read()
        return body
