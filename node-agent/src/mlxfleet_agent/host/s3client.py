"""The agent's one S3 client builder (any S3-compatible endpoint: AWS, R2, MinIO, SeaweedFS).

`client(endpoint_url=..., region=..., profile=...)`: path-style addressing, credentials given or
boto3's own chain (AWS_* variables, profiles), timeouts and retries from a `Profile`: `MODELS`
(weights: patient, a download may take long) or `TELEMETRY` (short, so an unreachable store only
delays the shipper's queue).
May import: boto3/botocore (imported when a client is built), the standard library.
Called by: models.store (s3:// sources), telemetry.shipper (uploads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@dataclass(frozen=True, slots=True)
class Profile:
    """Timeouts (seconds) and attempts of one kind of use; `region` when none is given."""

    connect_timeout_s: float
    read_timeout_s: float
    max_attempts: int
    default_region: str | None = None


MODELS = Profile(connect_timeout_s=10, read_timeout_s=60, max_attempts=5)
TELEMETRY = Profile(
    connect_timeout_s=3, read_timeout_s=10, max_attempts=2, default_region="us-east-1"
)


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
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": profile.max_attempts, "mode": "standard"},
            connect_timeout=profile.connect_timeout_s,
            read_timeout=profile.read_timeout_s,
        ),
    )
    return s3
